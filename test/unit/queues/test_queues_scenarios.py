"""End-to-end (pure) scenarios of the Kueue sync, where the queue config is
authoritative: merge -> desired objects -> plan, applied to a fake store."""

import copy

from kaiwo_ctrl.queues.defaults import merge_queue_config_spec
from kaiwo_ctrl.queues.kueue import desired_kueue_objects
from kaiwo_ctrl.queues.nodepools import discover
from kaiwo_ctrl.queues.plan import object_key, plan_sync


def node(name, gpus=0):
    labels = {"nvidia.com/gpu.product": "Tesla-K80", "nvidia.com/gpu.count": str(gpus)} if gpus else {}
    return {"metadata": {"name": name, "labels": labels}, "spec": {},
            "status": {"capacity": {"cpu": "8", "memory": "16Gi"}}}


NODES = [node("cpu-0")] + [node(f"gpu-{i}", 8) for i in range(4)]


def user_cq(name, flavor, namespaces=()):
    return {"name": name, "namespaces": list(namespaces), "spec": {"namespaceSelector": {}, "resourceGroups": [
        {"coveredResources": ["cpu"], "flavors": [{"name": flavor, "resources": [{"name": "cpu", "nominalQuota": 1}]}]}]}}


class FakeCluster:
    """Applies plans the way the reconciler would (uids assigned on create)."""

    def __init__(self, objects=()):
        self.objects = {object_key(o): copy.deepcopy(o) for o in objects}
        self.counter = 0

    def cq_uids(self):
        return {k[2]: o["metadata"]["uid"] for k, o in self.objects.items() if k[0] == "ClusterQueue"}

    def apply(self, plan):
        for obj in plan.deletes:
            self.objects.pop(object_key(obj))
            if obj["kind"] == "ClusterQueue":  # garbage collection of owned LocalQueues
                uid = obj["metadata"].get("uid")
                for key, o in list(self.objects.items()):
                    if any(r.get("uid") == uid for r in o["metadata"].get("ownerReferences") or []):
                        self.objects.pop(key)
        for obj in plan.recreates + plan.creates:
            self.counter += 1
            obj = copy.deepcopy(obj)
            obj["metadata"]["uid"] = f"uid-{self.counter}"
            self.objects[object_key(obj)] = obj
        for obj in plan.updates:
            self.objects[object_key(obj)] = copy.deepcopy(obj)

    def sync(self, spec):
        qc = {"metadata": {"name": "kaiwo", "uid": "qc"}, "spec": spec}
        for _ in range(3):  # LocalQueues wait one round for their ClusterQueue's uid
            state = desired_kueue_objects(qc, self.cq_uids())
            plan = plan_sync(state.objects, list(self.objects.values()), state.hold)
            if plan.empty and not state.waiting:
                return state
            self.apply(plan)
        raise AssertionError("sync did not converge")

    def names(self, kind):
        return sorted(k[2] if k[1] is None else f"{k[1]}/{k[2]}" for k in self.objects if k[0] == kind)


def test_dynamic_mode_merge_then_shrink():
    pools = discover(NODES)
    flavors = [{"name": f"f{i}", "nodeLabels": {"pool": f"f{i}"}} for i in range(5)]
    spec = {"resourceFlavors": flavors, "clusterQueues": [user_cq("q1", "f0", ["namespace1", "namespace2"]),
                                                          user_cq("q2", "f1")]}
    hand_made = {"kind": "ClusterQueue", "apiVersion": "kueue.x-k8s.io/v1beta2",
                 "metadata": {"name": "admin-cq", "uid": "admin"}, "spec": {}}
    cluster = FakeCluster([hand_made])

    merged = merge_queue_config_spec(spec, pools, "kaiwo", "kaiwo")
    state = cluster.sync(merged)
    assert state.problems == []
    assert len(cluster.names("ResourceFlavor")) == 7
    assert cluster.names("ClusterQueue") == ["admin-cq", "kaiwo", "q1", "q2"]  # 3 managed + hand-made
    assert cluster.names("LocalQueue") == ["namespace1/q1", "namespace2/q1"]

    # drop namespace2 from q1: its LocalQueue goes, namespace1 stays
    merged["clusterQueues"][0]["namespaces"] = ["namespace1"]
    cluster.sync(merged)
    assert cluster.names("LocalQueue") == ["namespace1/q1"]

    # replace with 1 flavor / 1 queue (dynamic mode merges the discovered ones back): 3 flavors, 2 queues
    small = {"resourceFlavors": [flavors[0]], "clusterQueues": [user_cq("q2", "f0")]}
    cluster.sync(merge_queue_config_spec(small, pools, "kaiwo", "kaiwo"))
    assert len(cluster.names("ResourceFlavor")) == 3
    assert cluster.names("ClusterQueue") == ["admin-cq", "kaiwo", "q2"]  # hand-made one survives
    assert cluster.names("LocalQueue") == []  # q1 removed -> its LocalQueues are gone


def test_one_bad_item_keeps_working_objects():
    pools = discover(NODES)
    spec = merge_queue_config_spec({"clusterQueues": [user_cq("q1", "cpu-only-0gpu-7core-14gi", ["ns"])]},
                                   pools, "kaiwo", "kaiwo")
    cluster = FakeCluster()
    cluster.sync(spec)
    before = copy.deepcopy(cluster.objects)

    broken = copy.deepcopy(spec)
    broken["clusterQueues"][0]["spec"]["resourceGroups"][0]["flavors"][0]["name"] = "typo"
    broken["resourceFlavors"].append(copy.deepcopy(broken["resourceFlavors"][0]))  # duplicate flavor
    state = cluster.sync(broken)
    assert [str(p) for p in state.problems] == [
        "spec.resourceFlavors[2].name: duplicate name 'cpu-only-0gpu-7core-14gi' (also at spec.resourceFlavors[0])",
        "spec.clusterQueues[0].spec.resourceGroups[0].flavors[0].name: flavor 'typo' is not defined in "
        "spec.resourceFlavors",
    ]
    assert cluster.objects == before  # nothing torn down, nothing half-updated
