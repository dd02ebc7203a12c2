import pytest

from kaiwo_ctrl.runtime.objects.ownership import (
    AlreadyOwnedError,
    OwnershipError,
    add_finalizer,
    controller_of,
    has_finalizer,
    is_owned_by,
    owner_reference,
    remove_finalizer,
    set_controller_reference,
)


def obj(kind, name, ns=None, uid=None, api="example.com/v1"):
    meta = {"name": name}
    if ns:
        meta["namespace"] = ns
    if uid:
        meta["uid"] = uid
    return {"apiVersion": api, "kind": kind, "metadata": meta}


def test_owner_reference_fields():
    owner = obj("Widget", "w", "ns", "uid-1")
    assert owner_reference(owner) == {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "name": "w",
        "uid": "uid-1",
        "controller": True,
        "blockOwnerDeletion": True,
    }
    ref = owner_reference(owner, controller=False, block_owner_deletion=False)
    assert ref["controller"] is False and ref["blockOwnerDeletion"] is False


def test_owner_reference_requires_identity():
    with pytest.raises(OwnershipError, match="metadata.uid"):
        owner_reference(obj("Widget", "w", "ns"))
    with pytest.raises(OwnershipError, match="apiVersion"):
        owner_reference({"kind": "Widget", "metadata": {"name": "w", "uid": "u"}})


def test_set_controller_reference_same_namespace():
    owner = obj("Widget", "w", "ns", "uid-1")
    child = obj("ConfigMap", "c", "ns", api="v1")
    set_controller_reference(child, owner, owner_namespaced=True)
    assert child["metadata"]["ownerReferences"] == [owner_reference(owner)]
    assert controller_of(child)["uid"] == "uid-1"
    assert is_owned_by(child, "uid-1")
    assert not is_owned_by(child, "other")


def test_set_controller_reference_is_idempotent_and_refreshes_uid():
    owner = obj("Widget", "w", "ns", "uid-1")
    child = obj("ConfigMap", "c", "ns", api="v1")
    set_controller_reference(child, owner, True)
    set_controller_reference(child, owner, True)
    assert len(child["metadata"]["ownerReferences"]) == 1
    # same group/kind/name, new uid and version: replaced, not duplicated
    recreated = obj("Widget", "w", "ns", "uid-2", api="example.com/v2")
    set_controller_reference(child, recreated, True)
    refs = child["metadata"]["ownerReferences"]
    assert len(refs) == 1 and refs[0]["uid"] == "uid-2"


def test_second_controller_is_refused_but_plain_owners_are_kept():
    child = obj("ConfigMap", "c", "ns", api="v1")
    plain = owner_reference(obj("Other", "o", "ns", "uid-o"), controller=False)
    child["metadata"]["ownerReferences"] = [plain]
    set_controller_reference(child, obj("Widget", "w", "ns", "uid-1"), True)
    assert len(child["metadata"]["ownerReferences"]) == 2
    assert controller_of(child)["name"] == "w"
    before = [dict(r) for r in child["metadata"]["ownerReferences"]]
    with pytest.raises(AlreadyOwnedError, match="already controlled by Widget w"):
        set_controller_reference(child, obj("Gadget", "g", "ns", "uid-2"), True)
    assert child["metadata"]["ownerReferences"] == before


def test_cross_namespace_owner_is_refused():
    child = obj("ConfigMap", "c", "team-a", api="v1")
    with pytest.raises(OwnershipError, match="cross-namespace"):
        set_controller_reference(child, obj("Widget", "w", "team-b", "u"), True)
    assert "ownerReferences" not in child["metadata"]


def test_namespaced_owner_of_cluster_scoped_child_is_refused():
    child = obj("ClusterThing", "c")
    with pytest.raises(OwnershipError, match="cluster-scoped .* cannot be owned by namespaced"):
        set_controller_reference(child, obj("Widget", "w", "ns", "u"), True)


def test_namespaced_owner_without_namespace_is_refused():
    with pytest.raises(OwnershipError, match="no metadata.namespace"):
        set_controller_reference(obj("ConfigMap", "c", "ns"), obj("Widget", "w", None, "u"), True)


def test_cluster_scoped_owner_may_own_anything():
    owner = obj("ClusterWidget", "cw", None, "uid-c")
    namespaced_child = obj("ConfigMap", "c", "ns", api="v1")
    cluster_child = obj("ClusterThing", "t")
    set_controller_reference(namespaced_child, owner, owner_namespaced=False)
    set_controller_reference(cluster_child, owner, owner_namespaced=False)
    assert controller_of(namespaced_child)["uid"] == "uid-c"
    assert controller_of(cluster_child)["uid"] == "uid-c"


def test_controller_of_none_when_absent():
    assert controller_of({"metadata": {}}) is None
    assert controller_of({}) is None
    assert not is_owned_by({}, "u")
    child = obj("ConfigMap", "c", "ns")
    child["metadata"]["ownerReferences"] = [owner_reference(obj("A", "a", "ns", "u"), controller=False)]
    assert controller_of(child) is None
    assert is_owned_by(child, "u")


def test_finalizers_are_a_set():
    o = {"metadata": {"name": "x"}}
    assert not has_finalizer(o, "example.com/cleanup")
    assert add_finalizer(o, "example.com/cleanup") is True
    assert add_finalizer(o, "example.com/cleanup") is False
    assert add_finalizer(o, "other.io/keep") is True
    assert o["metadata"]["finalizers"] == ["example.com/cleanup", "other.io/keep"]
    assert has_finalizer(o, "example.com/cleanup")
    assert remove_finalizer(o, "example.com/cleanup") is True
    assert remove_finalizer(o, "example.com/cleanup") is False
    assert o["metadata"]["finalizers"] == ["other.io/keep"]  # others untouched


def test_finalizer_edge_cases():
    o: dict = {}
    assert remove_finalizer(o, "a.io/x") is False
    assert add_finalizer(o, "a.io/x") is True
    assert o == {"metadata": {"finalizers": ["a.io/x"]}}
    dup = {"metadata": {"finalizers": ["a.io/x", "b.io/y", "a.io/x"]}}
    assert remove_finalizer(dup, "a.io/x") is True
    assert dup["metadata"]["finalizers"] == ["b.io/y"]
    with pytest.raises(ValueError):
        add_finalizer(o, "")
