"""KaiwoQueueConfig controller, node-pool watcher and startup task on a real kube-apiserver.

These tests own the cluster-scoped singletons (KaiwoConfig/kaiwo,
KaiwoQueueConfig/kaiwo), Nodes and every Kueue object, so they run on a
dedicated control plane of their own instead of the shared session one. Nodes
are simulated: Node objects with status.capacity/allocatable. There is no
controller-manager, so no garbage collection: tests assert on objects.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from decimal import Decimal

import pytest

from kaiwo_ctrl.runtime.objects.quantity import parse_quantity
from kaiwo_ctrl.runtime.control.handler import Request
from kaiwo_ctrl.local.controlplane import ControlPlane
from support import eventually, wait_until
from support.planes import own_plane
from support.admin import admin_http

pytestmark = pytest.mark.integration

MERGE = {"Content-Type": "application/merge-patch+json"}
KUEUE = "/apis/kueue.x-k8s.io/v1beta2"
QC_URL = "/apis/kaiwo.silogen.ai/v1alpha1/kaiwoqueueconfigs"
CONFIG_URL = "/apis/config.kaiwo.silogen.ai/v1alpha1/kaiwoconfigs"
CLUSTER_KINDS = ("resourceflavors", "clusterqueues", "workloadpriorityclasses", "topologies")
OURS = {"app.kubernetes.io/managed-by": "kaiwo-ctrl", "kaiwo.silogen.ai/queue-config": "kaiwo"}

AMD_LABELS = {"amd.com/gpu.product-name": "AMD_Instinct_MI300X_OAM", "beta.amd.com/gpu.family.AI": "8"}
NVIDIA_LABELS = {"nvidia.com/gpu.product": "Tesla-K80", "nvidia.com/gpu.count": "8"}

CPU_FLAVOR = "cpu-only-0gpu-7core-14gi"  # 8 cores, 16Gi
NVIDIA_FLAVOR = "nvidia-teslak80-8gpu-28core-230gi"  # 32 cores, 256Gi
AMD_FLAVOR = "amd-mi300x-8gpu-57core-460gi"  # 64 cores, 512Gi
NODE_SETTLE = 2.0  # longer than the node-event debounce


# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------


def node_body(name: str, kind: str = "cpu", labels: dict | None = None) -> dict:
    if kind == "cpu":
        capacity, extra = {"cpu": "8", "memory": "16Gi"}, {}
    elif kind == "nvidia":
        capacity, extra = {"cpu": "32", "memory": "256Gi", "nvidia.com/gpu": "8"}, NVIDIA_LABELS
    elif kind == "amd":
        capacity, extra = {"cpu": "64", "memory": "512Gi", "amd.com/gpu": "8"}, AMD_LABELS
    else:
        raise ValueError(kind)
    capacity = {**capacity, "pods": "110"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **extra, **(labels or {})}},
        "status": {"capacity": capacity, "allocatable": capacity},
    }


def add_node(admin, name: str, kind: str = "cpu", labels: dict | None = None) -> dict:
    """Create a Node and patch its status capacity/allocatable, as a kubelet would."""
    body = node_body(name, kind, labels)
    r = admin.post("/api/v1/nodes", json=body)
    assert r.status_code == 201, r.text
    r = admin.patch(f"/api/v1/nodes/{name}/status", json={"status": body["status"]}, headers=MERGE)
    assert r.status_code == 200, r.text
    return r.json()


def get(admin, path: str) -> dict | None:
    r = admin.get(path)
    if r.status_code == 404:
        return None
    assert r.status_code == 200, r.text
    return r.json()


def names(admin, plural: str) -> list[str]:
    return sorted(o["metadata"]["name"] for o in admin.get(f"{KUEUE}/{plural}").json()["items"])


def local_queues(admin) -> list[str]:
    items = admin.get(f"{KUEUE}/localqueues").json()["items"]
    return sorted(f"{o['metadata']['namespace']}/{o['metadata']['name']}" for o in items)


def quota(cq: dict | None, flavor: str, resource: str) -> Decimal | None:
    for group in ((cq or {}).get("spec") or {}).get("resourceGroups") or []:
        for f in group["flavors"]:
            if f["name"] == flavor:
                for r in f["resources"]:
                    if r["name"] == resource:
                        return parse_quantity(r["nominalQuota"])
    return None


def gpu_taints(node: dict) -> list[dict]:
    return [t for t in node["spec"].get("taints") or [] if t["key"] == "kaiwo.silogen.ai/gpu"]


def condition(obj: dict | None, type_: str) -> dict:
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c["type"] == type_:
            return c
    return {}


def queue_config(admin) -> dict | None:
    return get(admin, f"{QC_URL}/kaiwo")


def set_config(admin, spec: dict) -> None:
    r = admin.patch(f"{CONFIG_URL}/kaiwo", json={"spec": spec}, headers=MERGE)
    assert r.status_code == 200, r.text


def put_queue_config_spec(admin, spec: dict):
    """Replace the queue config's spec; returns the response (retries conflicts with the operator)."""
    for _ in range(50):
        cur = admin.get(f"{QC_URL}/kaiwo").json()
        cur["spec"] = spec
        r = admin.put(f"{QC_URL}/kaiwo", json=cur)
        if r.status_code != 409:
            return r
        time.sleep(0.05)
    raise AssertionError("could not write the queue config")


def hand_made(admin) -> None:
    """Kueue objects an administrator made by hand (no kaiwo-ctrl labels)."""
    for plural, body in (
        ("resourceflavors", {"metadata": {"name": "admin-flavor"}, "spec": {}}),
        ("clusterqueues", {"metadata": {"name": "admin-cq"}, "spec": {"namespaceSelector": {}}}),
        ("workloadpriorityclasses", {"metadata": {"name": "admin-prio"}, "value": 7}),
        ("topologies", {"metadata": {"name": "admin-topology"}, "spec": {"levels": [{"nodeLabel": "rack"}]}}),
    ):
        kind = {"resourceflavors": "ResourceFlavor", "clusterqueues": "ClusterQueue",
                "workloadpriorityclasses": "WorkloadPriorityClass", "topologies": "Topology"}[plural]
        r = admin.post(f"{KUEUE}/{plural}", json={"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": kind, **body})
        assert r.status_code == 201, r.text
    r = admin.post(
        f"{KUEUE}/namespaces/default/localqueues",
        json={"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
              "metadata": {"name": "admin-lq"}, "spec": {"clusterQueue": "admin-cq"}},
    )
    assert r.status_code == 201, r.text


def hand_made_present(admin) -> bool:
    return (
        "admin-flavor" in names(admin, "resourceflavors")
        and "admin-cq" in names(admin, "clusterqueues")
        and "admin-prio" in names(admin, "workloadpriorityclasses")
        and "admin-topology" in names(admin, "topologies")
        and "default/admin-lq" in local_queues(admin)
    )


def reset_cluster(admin) -> None:
    """Remove what the tests and the operator made (no garbage collector runs here)."""
    for plural in CLUSTER_KINDS:
        admin.delete(f"{KUEUE}/{plural}")
    for lq in admin.get(f"{KUEUE}/localqueues").json()["items"]:
        admin.delete(f"{KUEUE}/namespaces/{lq['metadata']['namespace']}/localqueues/{lq['metadata']['name']}")
    admin.delete(f"{QC_URL}/kaiwo")
    admin.delete(f"{CONFIG_URL}/kaiwo")
    admin.delete("/api/v1/nodes")
    paths = [f"{KUEUE}/{p}" for p in CLUSTER_KINDS] + [f"{KUEUE}/localqueues", QC_URL, CONFIG_URL, "/api/v1/nodes"]
    wait_until(lambda: not any(admin.get(p).json()["items"] for p in paths), what="cluster emptied")


class RunningOperator:
    """The queue-config part of the operator in-process: ensure_config, setup, Manager.run."""

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane
        self._stop = asyncio.Event()
        self._task: asyncio.Task | None = None

    async def start(self) -> "RunningOperator":
        from kaiwo_ctrl.queues import controller as queues
        from kaiwo_ctrl.runtime.api.client import Client
        from kaiwo_ctrl.runtime.manager.manager import Manager
        from kaiwo_ctrl.runtime.observe.metrics import Metrics
        from kaiwo_ctrl.settings import ensure_config

        client = await Client.from_kubeconfig(str(self.plane.kubeconfig))
        self.mgr = Manager(client, metrics=Metrics(), metrics_addr="127.0.0.1:0", health_addr="127.0.0.1:0")
        await ensure_config(client)
        self.rec = queues.setup(self.mgr)
        self._task = asyncio.create_task(self.mgr.run(self._stop))
        await asyncio.wait_for(self.mgr.is_leader.wait(), 60)
        await asyncio.wait_for(self.rec.startup_done.wait(), 60)
        return self

    @property
    def controller(self):
        return next(c for c in self.mgr.controllers if c.name == "kaiwoqueueconfig")

    @property
    def writes(self) -> int:
        return self.mgr.client.writes

    async def idle(self, settle: float = 1.5) -> None:
        """Wait until the controller has nothing queued, delayed or running, twice over ``settle``."""
        q, ctl = self.controller.queue, self.controller

        def quiet() -> bool:
            return len(q) == 0 and q.waiting_count() == 0 and ctl.active == 0

        await eventually(quiet, timeout=30, what="queue-config controller idle")
        await asyncio.sleep(settle)
        await eventually(quiet, timeout=30, what="queue-config controller idle")

    async def stop(self) -> None:
        if self._task is not None:
            self._stop.set()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._task, 60)
            self._task = None


# ---------------------------------------------------------------------------
# Fixtures
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def plane(tmp_path_factory):
    """A control plane of our own: these tests rewrite cluster-wide singletons."""
    with own_plane(tmp_path_factory, "queues-plane") as p:
        yield p


@pytest.fixture(scope="module")
def kube(plane):
    with admin_http(plane) as h:
        # freshly installed CRDs answer 429 "storage is (re)initializing" for a moment
        paths = [f"{KUEUE}/{p}" for p in CLUSTER_KINDS] + [f"{KUEUE}/localqueues", QC_URL, CONFIG_URL]
        wait_until(lambda: all(h.get(p).status_code == 200 for p in paths), timeout=120, interval=0.2,
                   what="CRD storage ready")
        yield h


@pytest.fixture
async def operator(plane, kube):
    reset_cluster(kube)
    running: list[RunningOperator] = []

    async def start() -> RunningOperator:
        op = await RunningOperator(plane).start()
        running.append(op)
        return op

    yield start
    for op in running:
        await op.stop()
    reset_cluster(kube)


def new_namespace(admin, name: str) -> str:
    r = admin.post("/api/v1/namespaces", json={"metadata": {"name": name}})
    assert r.status_code in (201, 409), r.text
    return name


async def assert_idle_without_writes(op: RunningOperator, rounds: int = 3) -> None:
    """An unchanged world: reconciles run, nothing is written."""
    await op.idle()
    writes, count = op.writes, op.controller.reconciles
    for _ in range(rounds):
        op.controller.enqueue(Request("", "kaiwo"))
        await op.idle(settle=0.3)
    assert op.controller.reconciles >= count + rounds
    assert op.writes == writes, f"idle operator wrote {op.writes - writes} times: {op.rec.stats}"


# ---------------------------------------------------------------------------
# Tests
# ---------------------------------------------------------------------------


async def test_defaults_appear_on_start_from_amd_and_nvidia_pools(operator, kube):
    add_node(kube, "cpu-0")
    for i in range(2):
        add_node(kube, f"nv-{i}", "nvidia")
    for i in range(3):
        add_node(kube, f"amd-{i}", "amd")
    assert get(kube, f"{CONFIG_URL}/kaiwo") is None and queue_config(kube) is None

    op = await operator()

    config = get(kube, f"{CONFIG_URL}/kaiwo")
    assert config is not None, "the default KaiwoConfig is created at start"
    assert config["spec"]["defaultClusterQueueName"] == "kaiwo"  # CRD defaults filled in by the apiserver
    qc = await eventually(lambda: queue_config(kube), what="default KaiwoQueueConfig")
    flavors = {f["name"]: f for f in qc["spec"]["resourceFlavors"]}
    assert set(flavors) == {CPU_FLAVOR, NVIDIA_FLAVOR, AMD_FLAVOR}
    assert flavors[AMD_FLAVOR]["nodeLabels"] == {"kaiwo/nodepool": AMD_FLAVOR}
    assert [t["metadata"]["name"] for t in qc["spec"]["topologies"]] == ["default-topology"]
    assert [q["name"] for q in qc["spec"]["clusterQueues"]] == ["kaiwo"]

    # Kueue objects (v1beta2) created from it
    cq = await eventually(lambda: get(kube, f"{KUEUE}/clusterqueues/kaiwo"), what="default ClusterQueue")
    assert cq["spec"]["cohortName"] == "kaiwo"
    group = cq["spec"]["resourceGroups"][0]
    assert group["coveredResources"] == ["cpu", "memory", "amd.com/gpu", "nvidia.com/gpu"]
    assert [f["name"] for f in group["flavors"]] == [CPU_FLAVOR, NVIDIA_FLAVOR, AMD_FLAVOR]
    assert quota(cq, AMD_FLAVOR, "amd.com/gpu") == 24
    assert quota(cq, AMD_FLAVOR, "cpu") == 3 * 57
    assert quota(cq, NVIDIA_FLAVOR, "nvidia.com/gpu") == 16
    assert quota(cq, NVIDIA_FLAVOR, "amd.com/gpu") == 0
    assert quota(cq, CPU_FLAVOR, "memory") == int(16 * Decimal("0.9") * 2**30)
    assert cq["metadata"]["labels"].items() >= OURS.items()
    owner = cq["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
        "KaiwoQueueConfig",
        "kaiwo",
        qc["metadata"]["uid"],
        True,
    )
    await eventually(lambda: set(names(kube, "resourceflavors")) == {CPU_FLAVOR, NVIDIA_FLAVOR, AMD_FLAVOR})
    rf = get(kube, f"{KUEUE}/resourceflavors/{NVIDIA_FLAVOR}")
    assert rf["spec"]["nodeLabels"] == {"kaiwo/nodepool": NVIDIA_FLAVOR}
    assert rf["spec"]["topologyName"] == "default-topology"
    topo = get(kube, f"{KUEUE}/topologies/default-topology")
    assert [lvl["nodeLabel"] for lvl in topo["spec"]["levels"]] == [
        "kaiwo/topology-block",
        "kaiwo/topology-rack",
        "kubernetes.io/hostname",
    ]

    # nodes labelled with their pool, GPU model and default topology labels; no taints by default
    amd = get(kube, "/api/v1/nodes/amd-1")
    labels = amd["metadata"]["labels"]
    assert labels["kaiwo/nodepool"] == AMD_FLAVOR and labels["kaiwo/gpu-model"] == "mi300x"
    assert labels["kaiwo/worker"] == "true"
    assert labels["kaiwo/topology-block"] == "block-a" and labels["kaiwo/topology-rack"] == "rack-a"
    assert not gpu_taints(amd)
    cpu_labels = get(kube, "/api/v1/nodes/cpu-0")["metadata"]["labels"]
    assert cpu_labels["kaiwo/nodepool"] == CPU_FLAVOR and "kaiwo/gpu-model" not in cpu_labels

    qc = await eventually(
        lambda: (q := queue_config(kube)) and (q.get("status") or {}).get("status") == "READY" and q,
        what="READY status",
    )
    assert condition(qc, "Ready")["status"] == "True"

    def reasons() -> set[str]:
        events = kube.get("/api/v1/namespaces/default/events").json()["items"]
        return {e["reason"] for e in events if e["involvedObject"].get("name") == "kaiwo"}

    await eventually(
        lambda: {"KaiwoQueueConfigClusterQueueCreated", "KaiwoQueueConfigResourceFlavorCreated"} <= reasons(),
        what="Normal events for the creates",
    )
    created = next(
        e for e in kube.get("/api/v1/namespaces/default/events").json()["items"]
        if e["reason"] == "KaiwoQueueConfigClusterQueueCreated"
    )
    assert created["message"] == "created cluster queue /kaiwo" and created["type"] == "Normal"
    assert created["source"]["component"] == "kaiwoqueueconfig-controller"
    await assert_idle_without_writes(op)


async def test_gpu_taints_and_control_plane_exclusion_follow_the_live_config(operator, kube):
    add_node(kube, "cpu-0")
    add_node(kube, "nv-0", "nvidia")
    add_node(kube, "master-0", "cpu", labels={"node-role.kubernetes.io/control-plane": ""})
    op = await operator()
    cq = await eventually(lambda: get(kube, f"{KUEUE}/clusterqueues/kaiwo"), what="default ClusterQueue")
    assert quota(cq, CPU_FLAVOR, "cpu") == 14  # the control-plane node counts while not excluded
    assert not gpu_taints(get(kube, "/api/v1/nodes/nv-0"))

    # a taint write made from a stale read hits a 409, re-reads the node and keeps the concurrent change
    from kaiwo_ctrl.nodes import NODES_TRANSFORM
    from kaiwo_ctrl.queues.nodepools import discover, node_patches

    stale = NODES_TRANSFORM(get(kube, "/api/v1/nodes/nv-0"))
    kube.patch("/api/v1/nodes/nv-0", json={"metadata": {"labels": {"team": "vision"}}}, headers=MERGE)
    taint_on = {"spec": {"nodes": {"addTaintsToGpuNodes": True}}}
    pools = [p for p in discover([stale]) if p.name == NVIDIA_FLAVOR]
    patches = node_patches(pools, [stale], taint_on)
    assert patches["nv-0"]["metadata"]["resourceVersion"] == stale["metadata"]["resourceVersion"]
    before = op.rec.stats.node_patches
    statuses: list[int] = []
    op.mgr.client.hooks.append(
        lambda method, path, status, _s: statuses.append(status) if (method, path) == ("PATCH", "/api/v1/nodes/nv-0") else None
    )
    await op.rec.patch_nodes(patches, pools, taint_on)
    assert statuses == [409, 200]
    assert op.rec.stats.node_patches == before + 1
    node = get(kube, "/api/v1/nodes/nv-0")
    assert len(gpu_taints(node)) == 1 and node["metadata"]["labels"]["team"] == "vision"

    # edit the live KaiwoConfig: no restart needed
    set_config(
        kube,
        {
            "dynamicallyUpdateDefaultClusterQueue": True,
            "nodes": {"addTaintsToGpuNodes": True, "excludeMasterNodesFromNodePools": True},
        },
    )
    taints = await eventually(lambda: gpu_taints(get(kube, "/api/v1/nodes/nv-0")), what="GPU taint")
    assert taints == [{"key": "kaiwo.silogen.ai/gpu", "value": "true", "effect": "NoSchedule"}]
    assert not gpu_taints(get(kube, "/api/v1/nodes/cpu-0"))
    await eventually(
        lambda: quota(get(kube, f"{KUEUE}/clusterqueues/kaiwo"), CPU_FLAVOR, "cpu") == 7,
        what="control-plane node excluded from the pool quota",
    )
    # an existing taint with the same key and effect is not duplicated
    await assert_idle_without_writes(op)
    assert len(gpu_taints(get(kube, "/api/v1/nodes/nv-0"))) == 1
    # the apiserver's own not-ready taint was kept next to ours
    assert any(t["key"] == "node.kubernetes.io/not-ready" for t in get(kube, "/api/v1/nodes/nv-0")["spec"]["taints"])


async def test_explicit_flavors_queues_priority_classes_and_namespace_local_queues(operator, kube):
    add_node(kube, "cpu-0")
    hand_made(kube)
    # a hand-made flavor the queue config will list: adopted (kept in sync) but, not being ours, never deleted
    r = kube.post(f"{KUEUE}/resourceflavors", json={"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
                                                   "metadata": {"name": "adopted", "labels": {"team": "infra"}}, "spec": {}})
    assert r.status_code == 201, r.text
    for ns in ("team-a", "team-b"):
        new_namespace(kube, ns)
    op = await operator()
    await eventually(lambda: "kaiwo" in names(kube, "clusterqueues"), what="default queue")

    spec = {
        "resourceFlavors": [
            {"name": "small", "nodeLabels": {"pool": "small"}},
            {"name": "big", "nodeLabels": {"pool": "big"}, "topologyName": "zones"},
            {"name": "adopted", "nodeLabels": {"pool": "adopted"}, "topologyName": "racks"},
        ],
        "topologies": [
            {"metadata": {"name": "racks"}, "spec": {"levels": [{"nodeLabel": "rack"}]}},
            {"metadata": {"name": "zones"}, "spec": {"levels": [{"nodeLabel": "zone"}]}},
        ],
        "workloadPriorityClasses": [
            {"metadata": {"name": "high"}, "value": 1000, "description": "important"},
            {"metadata": {"name": "low"}, "value": 10},
        ],
        "clusterQueues": [
            {
                "name": "research",
                "namespaces": ["team-a", "team-b"],
                "spec": {
                    "cohort": "lab",
                    "namespaceSelector": {},
                    "queueingStrategy": "StrictFIFO",
                    "preemption": {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"},
                    "resourceGroups": [
                        {
                            "coveredResources": ["cpu", "memory"],
                            # resources listed out of order are reordered to coveredResources
                            "flavors": [
                                {"name": "small", "resources": [
                                    {"name": "memory", "nominalQuota": "64Gi"},
                                    {"name": "cpu", "nominalQuota": 16, "borrowingLimit": 4},
                                ]},
                                {"name": "big", "resources": [
                                    {"name": "cpu", "nominalQuota": 64},
                                    {"name": "memory", "nominalQuota": "256Gi"},
                                ]},
                            ],
                        }
                    ],
                },
            },
            {
                "name": "batch",
                "spec": {
                    "cohort": "lab",
                    "namespaceSelector": {},
                    "resourceGroups": [
                        {"coveredResources": ["cpu"], "flavors": [{"name": "small", "resources": [{"name": "cpu", "nominalQuota": 8}]}]}
                    ],
                },
            },
        ],
    }
    r = put_queue_config_spec(kube, spec)
    assert r.status_code == 200, r.text

    await eventually(lambda: names(kube, "clusterqueues") == ["admin-cq", "batch", "research"], what="queues synced")
    research = get(kube, f"{KUEUE}/clusterqueues/research")
    assert research["spec"]["cohortName"] == "lab"
    assert research["spec"]["queueingStrategy"] == "StrictFIFO"
    assert research["spec"]["preemption"]["reclaimWithinCohort"] == "Any"
    assert research["spec"]["preemption"]["withinClusterQueue"] == "LowerPriority"
    small = research["spec"]["resourceGroups"][0]["flavors"][0]
    assert [r["name"] for r in small["resources"]] == ["cpu", "memory"]
    assert parse_quantity(small["resources"][0]["borrowingLimit"]) == 4
    assert names(kube, "resourceflavors") == ["admin-flavor", "adopted", "big", "small"]  # discovered one gone
    adopted = await eventually(
        lambda: (a := get(kube, f"{KUEUE}/resourceflavors/adopted")) and a["spec"].get("topologyName") == "racks" and a,
        what="hand-made flavor adopted",
    )
    assert adopted["spec"]["nodeLabels"] == {"pool": "adopted"}
    assert adopted["metadata"]["labels"] == {"team": "infra", **OURS}
    assert adopted["metadata"]["annotations"]["kaiwo.silogen.ai/adopted"] == "true"
    small_rf = get(kube, f"{KUEUE}/resourceflavors/small")
    assert small_rf["spec"] == {"nodeLabels": {"pool": "small"}, "topologyName": "default-topology"}
    assert get(kube, f"{KUEUE}/resourceflavors/big")["spec"]["topologyName"] == "zones"
    assert names(kube, "topologies") == ["admin-topology", "racks", "zones"]
    assert names(kube, "workloadpriorityclasses") == ["admin-prio", "high", "low"]
    assert get(kube, f"{KUEUE}/workloadpriorityclasses/high")["value"] == 1000
    lqs = await eventually(
        lambda: (lq := local_queues(kube)) == ["default/admin-lq", "team-a/research", "team-b/research"] and lq,
        what="LocalQueues in the listed namespaces",
    )
    assert lqs
    lq = get(kube, f"{KUEUE}/namespaces/team-a/localqueues/research")
    assert lq["spec"]["clusterQueue"] == "research"
    assert lq["metadata"]["ownerReferences"][0]["uid"] == research["metadata"]["uid"]
    qc = await eventually(
        lambda: (q := queue_config(kube)) and (q.get("status") or {}).get("status") == "READY" and q, what="READY"
    )
    assert condition(qc, "InSync")["status"] == "True"
    assert hand_made_present(kube)
    await assert_idle_without_writes(op)

    # drift on a managed object is repaired
    kube.patch(f"{KUEUE}/clusterqueues/batch", json={"spec": {"cohortName": "elsewhere"}}, headers=MERGE)
    await eventually(lambda: get(kube, f"{KUEUE}/clusterqueues/batch")["spec"]["cohortName"] == "lab", what="drift repaired")

    # shrink: one namespace dropped, one queue removed, a priority value changed, a flavor removed
    spec["clusterQueues"][0]["namespaces"] = ["team-a"]
    spec["clusterQueues"] = spec["clusterQueues"][:1]
    spec["workloadPriorityClasses"] = [{"metadata": {"name": "high"}, "value": 2000}]
    spec["clusterQueues"][0]["spec"]["resourceGroups"][0]["flavors"] = spec["clusterQueues"][0]["spec"]["resourceGroups"][0]["flavors"][:1]
    spec["resourceFlavors"] = spec["resourceFlavors"][:1]
    racks_uid = get(kube, f"{KUEUE}/topologies/racks")["metadata"]["uid"]
    zones_uid = get(kube, f"{KUEUE}/topologies/zones")["metadata"]["uid"]
    # immutable levels: zones, which only the removed flavor big used, is re-created;
    # racks, which the adopted flavor still names, is not (Kueue's resource-in-use
    # finalizer would hold the deleted Topology): the status says why instead
    spec["topologies"][0]["spec"]["levels"] = [{"nodeLabel": "block"}, {"nodeLabel": "rack"}]
    spec["topologies"][1]["spec"]["levels"] = [{"nodeLabel": "block"}, {"nodeLabel": "zone"}]
    assert put_queue_config_spec(kube, spec).status_code == 200
    await eventually(
        lambda: (t := get(kube, f"{KUEUE}/topologies/zones")) and t["metadata"]["uid"] != zones_uid
        and [lvl["nodeLabel"] for lvl in t["spec"]["levels"]] == ["block", "zone"],
        what="unused topology re-created with the new levels",
    )
    qc = await eventually(
        lambda: (q := queue_config(kube)) and condition(q, "InSync")["status"] == "False" and q, what="conflict reported"
    )
    assert qc["status"]["status"] == "FAILED"
    assert (
        "Topology racks: levels changed (immutable): not re-created while ResourceFlavor adopted uses it"
        in condition(qc, "InSync")["message"]
    ), condition(qc, "InSync")
    assert get(kube, f"{KUEUE}/topologies/racks")["metadata"]["uid"] == racks_uid
    await eventually(lambda: names(kube, "clusterqueues") == ["admin-cq", "research"], what="batch removed")
    await eventually(lambda: local_queues(kube) == ["default/admin-lq", "team-a/research"], what="team-b LocalQueue removed")
    await eventually(lambda: names(kube, "resourceflavors") == ["admin-flavor", "adopted", "small"], what="big removed")
    await eventually(lambda: names(kube, "workloadpriorityclasses") == ["admin-prio", "high"], what="low removed")
    await eventually(lambda: get(kube, f"{KUEUE}/workloadpriorityclasses/high")["value"] == 2000, what="value updated")
    await op.idle()
    assert hand_made_present(kube), "hand-made Kueue objects are never deleted"
    # (events past the recorder's per-object burst of 25 are dropped, so only the stats are exact here)
    stats = op.rec.stats.kueue
    assert stats.get("delete ClusterQueue", 0) >= 1 and stats.get("delete LocalQueue", 0) >= 1
    assert stats.get("update WorkloadPriorityClass", 0) >= 1 and stats.get("delete WorkloadPriorityClass", 0) >= 1

    # even an empty queue config never deletes hand-made objects
    assert put_queue_config_spec(kube, {}).status_code == 200
    await eventually(lambda: names(kube, "clusterqueues") == ["admin-cq"], what="managed queues removed")
    await op.idle()
    assert hand_made_present(kube)
    assert names(kube, "resourceflavors") == ["admin-flavor", "adopted"]  # the adopted one is not ours to delete


async def test_bad_items_fail_the_status_and_leave_working_objects_alone(operator, kube):
    add_node(kube, "cpu-0")
    op = await operator()
    await eventually(lambda: "kaiwo" in names(kube, "clusterqueues"), what="default queue")

    def cq(name: str, flavor: str, cpu: int) -> dict:
        return {
            "name": name,
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {"coveredResources": ["cpu"], "flavors": [{"name": flavor, "resources": [{"name": "cpu", "nominalQuota": cpu}]}]}
                ],
            },
        }

    good = {
        "resourceFlavors": [{"name": "small", "nodeLabels": {"pool": "small"}}],
        "clusterQueues": [cq("team", "small", 4), cq("other", "small", 2)],
    }
    assert put_queue_config_spec(kube, good).status_code == 200
    await eventually(lambda: names(kube, "clusterqueues") == ["other", "team"], what="good config synced")
    before = get(kube, f"{KUEUE}/clusterqueues/team")

    # 1. a queue referencing a missing flavor, plus a flavor over Kueue's nodeLabels limit,
    #    next to a good change (other: cpu 2 -> 3) and a new good priority class
    bad = {
        "resourceFlavors": [
            {"name": "small", "nodeLabels": {"pool": "small"}},
            {"name": "wide", "nodeLabels": {f"l{i}": "x" for i in range(9)}},
        ],
        "clusterQueues": [cq("team", "missing", 8), cq("other", "small", 3)],
        "workloadPriorityClasses": [{"metadata": {"name": "urgent"}, "value": 100}],
    }
    assert put_queue_config_spec(kube, bad).status_code == 200
    qc = await eventually(
        lambda: (q := queue_config(kube)) and (q.get("status") or {}).get("status") == "FAILED" and q, what="FAILED"
    )
    valid = condition(qc, "Valid")
    assert valid["status"] == "False" and valid["reason"] == "InvalidItems"
    assert "spec.clusterQueues[0]" in valid["message"] and "'missing'" in valid["message"]
    assert "spec.resourceFlavors[1]" in valid["message"]
    assert condition(qc, "Ready")["status"] == "False"
    # good items still synced; the working queue is neither deleted nor rewritten; the bad flavor not created
    await eventually(lambda: quota(get(kube, f"{KUEUE}/clusterqueues/other"), "small", "cpu") == 3, what="good change")
    await eventually(lambda: "urgent" in names(kube, "workloadpriorityclasses"), what="new priority class")
    team = get(kube, f"{KUEUE}/clusterqueues/team")
    assert team["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert "wide" not in names(kube, "resourceflavors")
    await assert_idle_without_writes(op)

    # a queue Kueue's own schema rejects (enum) cannot be written: InSync says which and why
    strict = cq("strict", "small", 1)
    strict["spec"]["preemption"] = {"withinClusterQueue": "Sometimes"}
    rejected = dict(bad, clusterQueues=bad["clusterQueues"] + [strict])
    assert put_queue_config_spec(kube, rejected).status_code == 200
    qc = await eventually(
        lambda: (q := queue_config(kube)) and "ClusterQueue strict: create failed: 422" in condition(q, "InSync").get("message", "") and q,
        what="out-of-sync ClusterQueue in the status",
    )
    assert qc["status"]["status"] == "FAILED" and condition(qc, "InSync")["reason"] == "OutOfSync"
    assert "strict" not in names(kube, "clusterqueues")
    warnings = await eventually(
        lambda: [
            e for e in kube.get("/api/v1/namespaces/default/events").json()["items"]
            if e["reason"] == "KaiwoQueueConfigClusterQueueCreateFailed"
        ],
        what="Warning event for the failed create",
    )
    assert warnings[0]["type"] == "Warning" and "Failed to create cluster queue /strict" in warnings[0]["message"]
    assert put_queue_config_spec(kube, bad).status_code == 200

    # 2. duplicate names and over-limit lists are refused by the CRD schema: the stored config is unchanged
    dup = dict(bad, clusterQueues=[cq("other", "small", 1), cq("other", "small", 1)])
    assert put_queue_config_spec(kube, dup).status_code == 422
    too_many = dict(bad, workloadPriorityClasses=[{"metadata": {"name": f"p{i}"}, "value": i} for i in range(6)])
    assert put_queue_config_spec(kube, too_many).status_code == 422

    # 3. fixing the input makes it READY again
    bad["clusterQueues"][0] = cq("team", "small", 8)
    bad["resourceFlavors"] = bad["resourceFlavors"][:1]
    assert put_queue_config_spec(kube, bad).status_code == 200
    qc = await eventually(
        lambda: (q := queue_config(kube)) and (q.get("status") or {}).get("status") == "READY" and q, what="READY again"
    )
    assert condition(qc, "Valid")["status"] == "True"
    assert quota(get(kube, f"{KUEUE}/clusterqueues/team"), "small", "cpu") == 8


async def test_dynamic_update_follows_node_add_remove_cordon_and_relabel(operator, kube):
    add_node(kube, "cpu-0")
    for i in range(4):
        add_node(kube, f"nv-{i}", "nvidia")
    op = await operator()
    set_config(kube, {"dynamicallyUpdateDefaultClusterQueue": True})

    def gpu_quota() -> Decimal | None:
        return quota(get(kube, f"{KUEUE}/clusterqueues/kaiwo"), NVIDIA_FLAVOR, "nvidia.com/gpu")

    await eventually(lambda: gpu_quota() == 32, what="32 GPUs")
    # cordon one GPU node -> 24; uncordon -> 32: cordoned nodes leave the pool quota
    kube.patch("/api/v1/nodes/nv-3", json={"spec": {"unschedulable": True}}, headers=MERGE)
    await eventually(lambda: gpu_quota() == 24, what="cordoned node left the pool")
    kube.patch("/api/v1/nodes/nv-3", json={"spec": {"unschedulable": False}}, headers=MERGE)
    await eventually(lambda: gpu_quota() == 32, what="uncordoned node back")
    # add and remove nodes
    add_node(kube, "nv-4", "nvidia")
    await eventually(lambda: gpu_quota() == 40, what="added node counted")
    assert get(kube, "/api/v1/nodes/nv-4")["metadata"]["labels"]["kaiwo/nodepool"] == NVIDIA_FLAVOR
    kube.delete("/api/v1/nodes/nv-0")
    await eventually(lambda: gpu_quota() == 32, what="removed node dropped")
    # a new pool from an AMD node: new flavor in the queue config, the ResourceFlavor and the queue
    add_node(kube, "amd-0", "amd")
    await eventually(lambda: AMD_FLAVOR in names(kube, "resourceflavors"), what="AMD flavor")
    await eventually(
        lambda: quota(get(kube, f"{KUEUE}/clusterqueues/kaiwo"), AMD_FLAVOR, "amd.com/gpu") == 8, what="AMD quota"
    )
    # relabel: a GPU node reporting 4 GPUs forms a new pool
    kube.patch("/api/v1/nodes/nv-1", json={"metadata": {"labels": {"nvidia.com/gpu.count": "4"}}}, headers=MERGE)
    relabelled = "nvidia-teslak80-4gpu-28core-230gi"
    await eventually(
        lambda: quota(get(kube, f"{KUEUE}/clusterqueues/kaiwo"), relabelled, "nvidia.com/gpu") == 4, what="relabelled pool"
    )
    await eventually(lambda: gpu_quota() == 24, what="old pool shrank")
    # a capacity change (status patch) moves the node to another pool too
    kube.patch(
        "/api/v1/nodes/cpu-0/status",
        json={"status": {"capacity": {"cpu": "16", "memory": "16Gi"}, "allocatable": {"cpu": "16", "memory": "16Gi"}}},
        headers=MERGE,
    )
    await eventually(
        lambda: quota(get(kube, f"{KUEUE}/clusterqueues/kaiwo"), "cpu-only-0gpu-14core-14gi", "cpu") == 14,
        what="capacity change",
    )
    qc = queue_config(kube)
    assert {f["name"] for f in qc["spec"]["resourceFlavors"]} >= {relabelled, AMD_FLAVOR, NVIDIA_FLAVOR}
    await assert_idle_without_writes(op)

    # a burst of 100 node events becomes a handful of queue-config writes
    stats = op.rec.stats
    qc_writes, cq_updates = stats.queue_config_writes, stats.kueue.get("update ClusterQueue", 0)
    for i in range(100):
        add_node(kube, f"burst-{i}", "cpu")
    await eventually(lambda: quota(get(kube, f"{KUEUE}/clusterqueues/kaiwo"), "cpu-only-0gpu-7core-14gi", "cpu") == 700,
                     what="100 new nodes in the default queue")
    await op.idle()
    qc_burst = stats.queue_config_writes - qc_writes
    cq_burst = stats.kueue.get("update ClusterQueue", 0) - cq_updates
    # how many depends on how fast the events arrive (bench/bench_nodepools.py measures it)
    print(f"burst of 100 nodes: {qc_burst} queue-config writes, {cq_burst} ClusterQueue updates")
    assert qc_burst >= 1 and cq_burst >= 1


async def test_without_dynamic_mode_new_nodes_are_labelled_but_quotas_stay(operator, kube):
    add_node(kube, "nv-0", "nvidia")
    op = await operator()
    await eventually(lambda: quota(get(kube, f"{KUEUE}/clusterqueues/kaiwo"), NVIDIA_FLAVOR, "nvidia.com/gpu") == 8)
    await op.idle()
    count = op.controller.reconciles
    add_node(kube, "nv-1", "nvidia")
    await eventually(lambda: op.controller.reconciles > count, what="node event reconciled")
    await op.idle(settle=NODE_SETTLE)
    assert quota(get(kube, f"{KUEUE}/clusterqueues/kaiwo"), NVIDIA_FLAVOR, "nvidia.com/gpu") == 8
    # the new node gets its pool label at once (so workloads see its GPUs); the quota waits for a restart
    await eventually(
        lambda: get(kube, "/api/v1/nodes/nv-1")["metadata"]["labels"].get("kaiwo/nodepool") == NVIDIA_FLAVOR,
        what="new node labelled",
    )
    # discovery runs on the next start
    await op.stop()
    await operator()
    await eventually(
        lambda: quota(get(kube, f"{KUEUE}/clusterqueues/kaiwo"), NVIDIA_FLAVOR, "nvidia.com/gpu") == 16,
        what="start-up discovery",
    )


async def test_deleted_queue_config_is_recreated_and_start_keeps_other_entries(operator, kube):
    add_node(kube, "cpu-0")
    op = await operator()
    qc = await eventually(lambda: queue_config(kube), what="default queue config")
    spec = dict(qc["spec"])
    spec["clusterQueues"] = spec["clusterQueues"] + [
        {"name": "extra", "spec": {"namespaceSelector": {}}},
    ]
    # a hand edit of the default queue entry is overwritten at the next start, the extra entry stays
    spec["clusterQueues"][0] = dict(spec["clusterQueues"][0], spec={"namespaceSelector": {}, "cohort": "edited"})
    assert put_queue_config_spec(kube, spec).status_code == 200
    await eventually(lambda: "extra" in names(kube, "clusterqueues"), what="extra queue")
    await op.stop()
    await operator()
    await eventually(
        lambda: get(kube, f"{KUEUE}/clusterqueues/kaiwo")["spec"].get("cohortName") == "kaiwo", what="default entry restored"
    )
    assert [q["name"] for q in queue_config(kube)["spec"]["clusterQueues"]] == ["kaiwo", "extra"]

    old_uid = queue_config(kube)["metadata"]["uid"]
    kube.delete(f"{QC_URL}/kaiwo")
    qc = await eventually(
        lambda: (q := queue_config(kube)) and q["metadata"]["uid"] != old_uid and q, what="queue config re-created"
    )
    assert [q["name"] for q in qc["spec"]["clusterQueues"]] == ["kaiwo"]
    await eventually(
        lambda: (q := queue_config(kube)) and (q.get("status") or {}).get("status") == "READY", what="READY"
    )
    cq = get(kube, f"{KUEUE}/clusterqueues/kaiwo")
    assert any(ref["uid"] == qc["metadata"]["uid"] for ref in cq["metadata"]["ownerReferences"])


async def test_name_constraint_and_missing_config(operator, kube):
    from kaiwo_ctrl.settings import ConfigMissing

    add_node(kube, "cpu-0")
    op = await operator()
    await eventually(lambda: (q := queue_config(kube)) and (q.get("status") or {}).get("status") == "READY")
    # the CRD only admits the name kaiwo; the reconciler refuses any other name too
    r = kube.post(QC_URL, json={"apiVersion": "kaiwo.silogen.ai/v1alpha1", "kind": "KaiwoQueueConfig",
                                "metadata": {"name": "other"}, "spec": {}})
    assert r.status_code == 422
    with pytest.raises(ValueError, match="only a KaiwoQueueConfig named 'kaiwo' is allowed"):
        await op.rec(Request("", "other"))
    # a missing KaiwoConfig fails the reconcile (retried) and is not re-created by it
    await op.idle()
    kube.delete(f"{CONFIG_URL}/kaiwo")
    await eventually(lambda: op.rec.settings.raw() is None, what="config gone from the cache")
    with pytest.raises(ConfigMissing):
        await op.rec(Request("", "kaiwo"))
    before = op.controller.reconciles
    op.controller.enqueue(Request("", "kaiwo"))
    await eventually(lambda: op.controller.reconciles > before, what="the enqueued reconcile ran")
    assert get(kube, f"{CONFIG_URL}/kaiwo") is None
    # once it is back, the controller picks it up without a restart
    r = kube.post(CONFIG_URL, json={"apiVersion": "config.kaiwo.silogen.ai/v1alpha1", "kind": "KaiwoConfig",
                                    "metadata": {"name": "kaiwo"}, "spec": {"dynamicallyUpdateDefaultClusterQueue": True}})
    assert r.status_code == 201, r.text
    add_node(kube, "cpu-1")
    await eventually(
        lambda: quota(get(kube, f"{KUEUE}/clusterqueues/kaiwo"), CPU_FLAVOR, "cpu") == 14, what="dynamic mode after config returns"
    )


async def test_local_queue_for_a_namespace_created_later(operator, kube):
    add_node(kube, "cpu-0")
    op = await operator()
    await eventually(lambda: "kaiwo" in names(kube, "clusterqueues"), what="default queue")
    spec = dict(queue_config(kube)["spec"])
    spec["clusterQueues"] = [dict(spec["clusterQueues"][0], namespaces=["arrives-later"])]
    assert put_queue_config_spec(kube, spec).status_code == 200
    qc = await eventually(
        lambda: (q := queue_config(kube))
        and "LocalQueue arrives-later/kaiwo: namespace arrives-later does not exist" in condition(q, "InSync").get("message", "")
        and q,
        what="missing namespace reported",
    )
    assert qc["status"]["status"] == "FAILED"
    # nothing is retried on a timer while the namespace is missing: no writes at all
    await assert_idle_without_writes(op)
    new_namespace(kube, "arrives-later")  # its create event triggers the sync
    await eventually(lambda: "arrives-later/kaiwo" in local_queues(kube), what="LocalQueue once the namespace exists")
    await eventually(
        lambda: (queue_config(kube).get("status") or {}).get("status") == "READY", what="READY once the namespace exists"
    )
    await assert_idle_without_writes(op)


async def test_migrated_config_with_default_topology_name_reads_back_and_names_the_generated_topology(operator, kube):
    """A KaiwoConfig written for upstream Kaiwo (April 2026) with ``defaultTopologyName``:
    the API server stores it as written (nothing pruned), and the operator's generated
    queue config defines that Topology, which the discovered flavors reference."""
    migrated = {
        "dynamicallyUpdateDefaultClusterQueue": False,
        "defaultTopologyName": "gpu-tas",
        "ray": {"headPodMemory": "16Gi"},
        "scheduling": {"pendingThresholdForPreemption": "1s"},
        "storage": {"defaultStorageClass": "rwx-nfs"},
    }
    body = {"apiVersion": "config.kaiwo.silogen.ai/v1alpha1", "kind": "KaiwoConfig",
            "metadata": {"name": "kaiwo"}, "spec": migrated}
    r = kube.post(CONFIG_URL, json=body)
    assert r.status_code == 201, r.text
    stored = get(kube, f"{CONFIG_URL}/kaiwo")["spec"]
    for key, value in migrated.items():
        if isinstance(value, dict):
            assert {k: stored[key].get(k) for k in value} == value, key
        else:
            assert stored[key] == value, key
    add_node(kube, "nv-0", "nvidia")
    op = await operator()
    await eventually(lambda: "gpu-tas" in names(kube, "topologies"), what="Topology gpu-tas")
    topo = get(kube, f"{KUEUE}/topologies/gpu-tas")
    assert [lvl["nodeLabel"] for lvl in topo["spec"]["levels"]] == [
        "kaiwo/topology-block", "kaiwo/topology-rack", "kubernetes.io/hostname"]
    assert "default-topology" not in names(kube, "topologies")
    await eventually(lambda: NVIDIA_FLAVOR in names(kube, "resourceflavors"), what="flavor")
    assert get(kube, f"{KUEUE}/resourceflavors/{NVIDIA_FLAVOR}")["spec"]["topologyName"] == "gpu-tas"
    qc = queue_config(kube)
    assert [t["metadata"]["name"] for t in qc["spec"]["topologies"]] == ["gpu-tas"]
    assert get(kube, f"{CONFIG_URL}/kaiwo")["spec"]["defaultTopologyName"] == "gpu-tas"  # still as written
    await assert_idle_without_writes(op)


async def test_config_without_default_topology_name_gets_upstreams_default(operator, kube):
    r = kube.post(CONFIG_URL, json={"apiVersion": "config.kaiwo.silogen.ai/v1alpha1", "kind": "KaiwoConfig",
                                    "metadata": {"name": "kaiwo"}, "spec": {}})
    assert r.status_code == 201, r.text
    assert get(kube, f"{CONFIG_URL}/kaiwo")["spec"]["defaultTopologyName"] == "default-topology"
