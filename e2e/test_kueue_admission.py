"""The real Kueue admitting what kaiwo-ctrl writes, on the simulated cluster.

Two 8-GPU kwok nodes (16 GPUs, config/samples/nodes_kwok.yaml) and the sample
KaiwoQueueConfig; every KaiwoJob here asks for 8 GPUs, so GPUs are the quota
that binds. Simulated Job Pods run for ``E2E_POD_RUN_MS`` (see conftest)
before kwok completes them, long enough to act while they hold quota.

The tests build on each other in file order: quota, then priorities (the
queue config gains two WorkloadPriorityClasses and in-queue preemption), then
node pools (dynamic mode, a third GPU node), then Ray.
"""

from __future__ import annotations

import uuid

import pytest

from e2e.conftest import ROOT, condition, get, wait_for

pytestmark = pytest.mark.e2e

NS = "kueue-e2e"
KAIWO = "/apis/kaiwo.silogen.ai/v1alpha1"
KUEUE = "/apis/kueue.x-k8s.io/v1beta2"
QUEUE_CONFIG = f"{KAIWO}/kaiwoqueueconfigs/kaiwo"
KAIWO_CONFIG = "/apis/config.kaiwo.silogen.ai/v1alpha1/kaiwoconfigs/kaiwo"
GPU = "amd.com/gpu"


EXTRA_NODE = "sim-gpu-2"  # the third GPU node the node-pool test adds


def sample_queues(admin, kubectl) -> None:
    """The world these tests and the Ray ones start from: static queues (not dynamic mode, which
    rewrites ClusterQueue kaiwo from the node pools and so drops a test's preemption setting), the
    two sample GPU nodes only, and the sample queue config with its 16 GPUs."""
    cfg = get(admin, KAIWO_CONFIG)
    if cfg and cfg["spec"].get("dynamicallyUpdateDefaultClusterQueue"):
        r = admin.patch(KAIWO_CONFIG, json={"spec": {"dynamicallyUpdateDefaultClusterQueue": False}},
                        headers={"Content-Type": "application/merge-patch+json"})
        assert r.status_code == 200, r.text
    r = admin.delete(f"/api/v1/nodes/{EXTRA_NODE}")
    assert r.status_code in (200, 404), r.text
    kubectl("apply", "-f", str(ROOT / "config" / "samples" / "kaiwo_v1alpha1_kaiwoqueueconfig.yaml"))
    wait_for(lambda: gpu_quota(admin) == 16, 60, "ClusterQueue kaiwo with 16 GPUs")


@pytest.fixture(scope="module")
def queue_ready(operator, kubectl, admin):
    """The sample queue config (ClusterQueue kaiwo with 16 GPUs) and a namespace for
    these tests (not READY: see test_deploy.py::test_queue_config_becomes_ready). The
    module leaves the queues as it found them."""
    sample_queues(admin, kubectl)
    r = admin.post("/api/v1/namespaces", json={"metadata": {"name": NS}})
    assert r.status_code in (201, 409), r.text
    yield admin
    sample_queues(admin, kubectl)


def gpu_quota(admin) -> int:
    cq = get(admin, f"{KUEUE}/clusterqueues/kaiwo") or {"spec": {"resourceGroups": []}}
    return sum(
        int(r["nominalQuota"])
        for g in cq["spec"]["resourceGroups"]
        for f in g["flavors"]
        for r in f["resources"]
        if r["name"] == GPU
    )


def submit(admin, prefix: str, gpus: int = 8, priority: str = "", **spec) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:5]}"
    body = {
        "apiVersion": "kaiwo.silogen.ai/v1alpha1",
        "kind": "KaiwoJob",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"user": "e2e@example.com", "image": "busybox:1.36", "gpus": gpus, "entrypoint": "sleep 1", **spec},
    }
    if priority:
        body["spec"]["priorityClass"] = priority
    r = admin.post(f"{KAIWO}/namespaces/{NS}/kaiwojobs", json=body)
    assert r.status_code == 201, r.text
    return name


def status(admin, name: str) -> str:
    return ((get(admin, f"{KAIWO}/namespaces/{NS}/kaiwojobs/{name}") or {}).get("status") or {}).get("status") or ""


def workload(admin, job_name: str) -> dict | None:
    """The Workload Kueue made for the KaiwoJob's batch Job (named job-<job>-<hash>)."""
    items = get(admin, f"{KUEUE}/namespaces/{NS}/workloads")["items"]
    mine = [w for w in items if w["metadata"]["name"].startswith(f"job-{job_name}-")]
    return mine[0] if mine else None


def holds_quota(wl: dict | None) -> bool:
    return condition(wl, "QuotaReserved").get("status") == "True" and condition(wl, "Finished").get("status") != "True"


class Watch:
    """Every status each KaiwoJob showed while polled (transitions in order)."""

    def __init__(self, admin, *names: str) -> None:
        self.admin, self.seen = admin, {n: [] for n in names}

    def poll(self) -> dict[str, str]:
        now = {n: status(self.admin, n) for n in self.seen}
        for n, s in now.items():
            if not self.seen[n] or self.seen[n][-1] != s:
                self.seen[n].append(s)
        return now


def test_quota_two_run_third_waits_until_one_finishes(queue_ready):
    admin = queue_ready
    names = [submit(admin, f"quota-{i}") for i in range(3)]
    watch = Watch(admin, *names)

    def two_hold_one_waits():
        watch.poll()
        wls = {n: workload(admin, n) for n in names}
        holding = [n for n, w in wls.items() if holds_quota(w)]
        assert len(holding) <= 2, f"Kueue admitted more than 16 GPUs: {holding}"
        # Kueue's verdict on the third: a fresh Workload has no status yet, so wait
        # until it says QuotaReserved=False because the quota is used up.
        waiting = [n for n, w in wls.items() if w and condition(w, "QuotaReserved").get("reason") == "Pending"]
        return len(holding) == 2 and len(waiting) == 1 and (holding, waiting[0], wls[waiting[0]])

    holding, waiting, wl = wait_for(two_hold_one_waits, 120, "two Workloads admitted and the third pending")
    assert condition(wl, "QuotaReserved").get("status") == "False", wl["status"]
    assert GPU in condition(wl, "QuotaReserved").get("message", ""), condition(wl, "QuotaReserved")

    def waiting_job_shown_pending():
        watch.poll()
        return "PENDING" in watch.seen[waiting]

    wait_for(waiting_job_shown_pending, 30, f"KaiwoJob {waiting} PENDING")

    def third_runs_after_one_finished():
        watch.poll()
        finished = [n for n in holding if condition(workload(admin, n), "Finished").get("status") == "True"]
        if holds_quota(workload(admin, waiting)):
            assert finished, "the third was admitted while both others still held the quota"
            return True
        return False

    wait_for(third_runs_after_one_finished, 180, "the third Workload admitted once one finished")
    wait_for(lambda: all(s == "COMPLETE" for s in watch.poll().values()), 180, "all three KaiwoJobs COMPLETE")
    assert "PENDING" in watch.seen[waiting] and "RUNNING" in watch.seen[waiting], watch.seen


def test_priority_preempts_lower_priority_job(queue_ready):
    admin = queue_ready
    queues = get(admin, QUEUE_CONFIG)["spec"]["clusterQueues"]
    for cq in queues:
        cq["spec"]["preemption"] = {"withinClusterQueue": "LowerPriority"}
    priorities = [
        {"metadata": {"name": "e2e-low"}, "value": 10, "description": "can wait"},
        {"metadata": {"name": "e2e-high"}, "value": 1000, "description": "urgent"},
    ]
    # a merge patch, not a PUT of what was read: the operator may write the object's status in between
    r = admin.patch(QUEUE_CONFIG, json={"spec": {"workloadPriorityClasses": priorities, "clusterQueues": queues}},
                    headers={"Content-Type": "application/merge-patch+json"})
    assert r.status_code == 200, r.text
    for name in ("e2e-low", "e2e-high"):
        wait_for(lambda name=name: get(admin, f"{KUEUE}/workloadpriorityclasses/{name}"), 60, f"WorkloadPriorityClass {name}")
    wait_for(
        lambda: (get(admin, f"{KUEUE}/clusterqueues/kaiwo")["spec"].get("preemption") or {}).get("withinClusterQueue") == "LowerPriority",
        60,
        "ClusterQueue kaiwo with in-queue preemption",
    )

    lows = [submit(admin, f"low-{i}", priority="e2e-low") for i in range(2)]
    watch = Watch(admin, *lows)
    wait_for(lambda: all(holds_quota(workload(admin, n)) for n in lows), 120, "both low-priority Workloads admitted")
    assert all(workload(admin, n)["spec"]["priority"] == 10 for n in lows)
    # seen running before the high-priority job exists, so the victim's history shows it was preempted from there
    wait_for(lambda: all(s in ("STARTING", "RUNNING") for s in watch.poll().values()), 120, "both low-priority KaiwoJobs started")
    high = submit(admin, "high", priority="e2e-high")
    watch.seen[high] = []

    victim = preempted_for(lambda n: workload(admin, n), lows, high, "Workload", on_poll=watch.poll)
    wait_for(lambda: watch.poll()[victim] == "PENDING", 120, "the preempted KaiwoJob back to PENDING")
    assert "RUNNING" in watch.seen[victim] or "STARTING" in watch.seen[victim], watch.seen[victim]
    preempted_at = len(watch.seen[victim])
    job = next(j for j in get(admin, f"/apis/batch/v1/namespaces/{NS}/jobs")["items"] if j["metadata"]["name"] == victim)
    assert job["spec"]["suspend"] is True, "Kueue suspended the preempted Job again"
    wait_for(lambda: all(s == "COMPLETE" for s in watch.poll().values()), 240, "all KaiwoJobs COMPLETE, the preempted one after running again")
    assert "RUNNING" in watch.seen[victim][preempted_at:], f"the preempted job ran again: {watch.seen[victim]}"


def submit_service(admin, prefix: str, gpus: int = 8) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:5]}"
    body = {
        "apiVersion": "kaiwo.silogen.ai/v1alpha1",
        "kind": "KaiwoService",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"user": "e2e@example.com", "image": "nginx:1.27", "gpus": gpus, "replicas": 1},
    }
    r = admin.post(f"{KAIWO}/namespaces/{NS}/kaiwoservices", json=body)
    assert r.status_code == 201, r.text
    return name


def test_dynamic_node_pool_raises_quota_and_admits_pending_job(queue_ready, kubectl):
    """Two 8-GPU KaiwoServices hold the 16 GPUs for as long as they run (their Pods
    never complete), so an 8-GPU KaiwoJob can only be admitted on more quota: the
    operator's, once a third GPU node joins in dynamic mode."""
    admin = queue_ready
    cfg = get(admin, KAIWO_CONFIG)
    cfg["spec"]["dynamicallyUpdateDefaultClusterQueue"] = True
    assert admin.put(KAIWO_CONFIG, json=cfg).status_code == 200
    wait_for(lambda: gpu_quota(admin) == 16, 60, "dynamic ClusterQueue kaiwo with the 16 GPUs of two nodes")

    services = [submit_service(admin, f"hold-{i}") for i in range(2)]
    try:
        wait_for(
            lambda: all(
                ((get(admin, f"{KAIWO}/namespaces/{NS}/kaiwoservices/{n}") or {}).get("status") or {}).get("status") == "READY"
                for n in services
            ),
            180,
            "two 8-GPU KaiwoServices READY (admitted through Kueue's pod integration)",
        )
        job = submit(admin, "pool")
        wl = wait_for(lambda: workload(admin, job), 90, "the KaiwoJob's Workload")
        assert not holds_quota(wl)
        wait_for(lambda: condition(workload(admin, job), "QuotaReserved").get("reason") == "Pending", 60, "the Workload pending on quota")
        assert status(admin, job) == "PENDING"
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": EXTRA_NODE,
                "annotations": {"kwok.x-k8s.io/node": "fake"},
                "labels": {
                    "kubernetes.io/hostname": "sim-gpu-2",
                    "kubernetes.io/os": "linux",
                    "type": "kwok",
                    "amd.com/gpu.product-name": "AMD_Instinct_MI300X_OAM",
                    "beta.amd.com/gpu.family.AI": "8",
                },
            },
            "status": {
                "capacity": {"cpu": "64", "memory": "512Gi", "pods": "110", GPU: "8"},
                "allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110", GPU: "8"},
            },
        }
        r = admin.post("/api/v1/nodes", json=node)
        assert r.status_code == 201, r.text
        wait_for(lambda: gpu_quota(admin) == 24, 90, "the operator to raise ClusterQueue kaiwo to 24 GPUs")
        try:
            wait_for(lambda: holds_quota(workload(admin, job)), 120, "the pending Workload admitted on the raised quota")
        except AssertionError as e:
            cq = get(admin, f"{KUEUE}/clusterqueues/kaiwo")
            node = get(admin, "/api/v1/nodes/sim-gpu-2")
            raise AssertionError(
                f"{e}\nWorkload: {(workload(admin, job) or {}).get('status')}\nClusterQueue: {cq['spec']} {cq.get('status')}"
                f"\nsim-gpu-2: {node['metadata'].get('labels')} {node['spec']}"
                f"\nflavors: {[(f['metadata'], f['spec']) for f in get(admin, f'{KUEUE}/resourceflavors')['items']]}"
            ) from None
        wait_for(lambda: status(admin, job) == "COMPLETE", 180, "the KaiwoJob COMPLETE")
        pods = get(admin, f"/api/v1/namespaces/{NS}/pods")["items"]
        assert any(p["spec"].get("nodeName") == "sim-gpu-2" for p in pods), "one of them runs on the new node"
    finally:
        for n in services:
            admin.delete(f"{KAIWO}/namespaces/{NS}/kaiwoservices/{n}")


def preempted_for(workload_of, lows: list[str], high: str, what: str, on_poll=None) -> str:
    """Wait until Kueue evicts one of ``lows`` (reason Preempted) and admits ``high`` at its
    priority (1000); the victim's name. ``workload_of`` finds a job's Workload by its name."""

    def one_low_preempted():
        if on_poll:
            on_poll()
        for n in lows:
            ev = condition(workload_of(n), "Evicted")
            if ev.get("status") == "True":
                return n, ev
        return None

    victim, evicted = wait_for(one_low_preempted, 120, f"Kueue to preempt a low-priority {what}")
    assert evicted["reason"] == "Preempted", evicted
    wait_for(lambda: holds_quota(workload_of(high)), 120, f"the high-priority {what} admitted")
    assert workload_of(high)["spec"]["priority"] == 1000
    return victim


def ray_job_name(admin) -> str:
    names = [r["metadata"]["name"] for r in get(admin, f"/apis/ray.io/v1/namespaces/{NS}/rayjobs")["items"] if r["metadata"]["name"].startswith("ray-")]
    return names[0] if names else ""


def test_ray_job_is_admitted_by_kueue(queue_ready):
    """Kueue's RayJob integration validates the RayJob (its webhook), creates the
    Workload from the head and worker groups, and admits it. (What KubeRay then
    runs: e2e/test_ray_workloads.py.)"""
    admin = queue_ready
    name = submit(admin, "ray", gpus=8, ray=True)
    ray_job = wait_for(lambda: get(admin, f"/apis/ray.io/v1/namespaces/{NS}/rayjobs/{name}"), 90, "the KaiwoJob's RayJob")
    assert ray_job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "kaiwo"

    def admitted():
        items = get(admin, f"{KUEUE}/namespaces/{NS}/workloads")["items"]
        mine = [w for w in items if w["metadata"]["name"].startswith(f"rayjob-{name}-")]
        return mine and condition(mine[0], "Admitted").get("status") == "True" and mine[0]

    wl = wait_for(admitted, 120, "Kueue to admit the RayJob's Workload")
    assert {ps["name"] for ps in wl["spec"]["podSets"]} >= {"head"}, wl["spec"]["podSets"]
    assert status(admin, name) in ("PENDING", "STARTING"), status(admin, name)


def test_ray_job_suspend_is_lifted_after_admission(queue_ready):
    """Kueue's webhook suspends the RayJob on create (the operator never sends
    ``spec.suspend``: it is Kueue's); on admission Kueue starts it. Kueue's write
    leaves ``false`` out, so a started RayJob has no ``spec.suspend`` at all: absent
    means false (the earlier xfail read the missing field as "still suspended")."""
    admin = queue_ready
    name = ray_job_name(admin)
    assert name, "test_ray_job_is_admitted_by_kueue made one"

    def started():
        events = get(admin, f"/api/v1/namespaces/{NS}/events")["items"]
        return any(
            e["involvedObject"].get("kind") == "RayJob" and e["involvedObject"]["name"] == name and e["reason"] == "Started"
            for e in events
        )

    wait_for(started, 60, "Kueue's Started event on the RayJob")
    ray_job = wait_for(
        lambda: (r := get(admin, f"/apis/ray.io/v1/namespaces/{NS}/rayjobs/{name}")) and not r["spec"].get("suspend") and r,
        60,
        "Kueue to lift the RayJob's suspend",
    )
    head = ray_job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    assert head.get("nodeSelector", {}).get("kaiwo/nodepool"), "Kueue injected the admitted flavor's node labels"
