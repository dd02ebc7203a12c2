from kaiwo_ctrl.runtime.control.handler import EnqueueMapped, EnqueueObject, EnqueueOwner, Request
from kaiwo_ctrl.runtime.control.predicate import FieldsChanged, Filter, GenerationChanged, Not, Or, ResourceVersionChanged


def o(name, ns="ns", gen=1, rv="1", owners=(), labels=None):
    return {
        "metadata": {
            "name": name,
            "namespace": ns,
            "generation": gen,
            "resourceVersion": rv,
            "labels": labels or {},
            "ownerReferences": list(owners),
        }
    }


def owner(kind="KaiwoJob", name="p", api="kaiwo.silogen.ai/v1alpha1", controller=True):
    return {"apiVersion": api, "kind": kind, "name": name, "uid": "u", "controller": controller}


def test_enqueue_object_respects_predicates():
    got = []
    h = EnqueueObject(got.append, [GenerationChanged()])
    h.on_add(o("a"), True)
    h.on_update(o("a", gen=1, rv="1"), o("a", gen=1, rv="2"))  # status-only change: dropped
    h.on_update(o("a", gen=1), o("a", gen=2))
    h.on_delete(o("a"), False)
    assert got == [Request("ns", "a")] * 3


def test_enqueue_owner_matches_group_and_kind_and_controller_only():
    got = []
    h = EnqueueOwner(got.append, "kaiwo.silogen.ai", "KaiwoJob")
    h.on_add(o("child", owners=[owner()]), False)
    h.on_add(o("c2", owners=[owner(api="kaiwo.silogen.ai/v9")]), False)  # version ignored
    h.on_add(o("c3", owners=[owner(kind="Other")]), False)
    h.on_add(o("c4", owners=[owner(controller=False)]), False)
    h.on_add(o("c5", owners=[owner(api="other.io/v1")]), False)
    assert got == [Request("ns", "p"), Request("ns", "p")]


def test_enqueue_owner_cluster_scoped_and_reparenting():
    got = []
    h = EnqueueOwner(got.append, "", "Node", owner_namespaced=False)
    h.on_add(o("pod", owners=[owner(kind="Node", api="v1", name="n1")]), False)
    assert got == [Request("", "n1")]
    got.clear()
    h2 = EnqueueOwner(got.append, "kaiwo.silogen.ai", "KaiwoJob")
    h2.on_update(o("c", owners=[owner(name="old")]), o("c", owners=[owner(name="new")]))
    assert set(got) == {Request("ns", "old"), Request("ns", "new")}


def test_mapped_and_combinators():
    got = []
    h = EnqueueMapped(got.append, lambda obj: [Request("", "kaiwo")], [Filter(lambda x: x["metadata"]["labels"].get("gpu") == "1")])
    h.on_add(o("n", labels={"gpu": "1"}), False)
    h.on_add(o("n2"), False)
    assert got == [Request("", "kaiwo")]
    p = Or(GenerationChanged(), FieldsChanged(lambda x: x["metadata"]["labels"]))
    assert p.update(o("a"), o("a", labels={"x": "y"}))
    assert not p.update(o("a"), o("a", rv="9"))
    assert Not(ResourceVersionChanged()).update(o("a"), o("a"))
    assert Request("", "n").key == "n" and Request("a", "b").key == "a/b"
