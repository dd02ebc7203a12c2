"""Priority and duration preemption for Ray KaiwoJobs on the simulated cluster, as for batch
ones (test_kueue_admission.py, test/integration/test_workloads_behaviour.py): the real Kueue
preempts a low-priority RayJob for a high-priority one (KubeRay suspends it, the KaiwoJob goes
back to PENDING), and the operator terminates a Ray KaiwoJob past its duration once another
GPU workload waits."""

from __future__ import annotations

import uuid

import pytest

from e2e.conftest import condition, get, wait_for
from e2e.test_kueue_admission import KAIWO_CONFIG, QUEUE_CONFIG, holds_quota, preempted_for
from e2e.test_ray_workloads import KAIWO, KUEUE, NS, ray_ns  # noqa: F401 - fixture

pytestmark = pytest.mark.e2e
MERGE = {"Content-Type": "application/merge-patch+json"}


def ray_job(admin, prefix: str, gpus: int, **spec) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:5]}"
    body = {"apiVersion": "kaiwo.silogen.ai/v1alpha1", "kind": "KaiwoJob", "metadata": {"name": name, "namespace": NS},
            "spec": {"user": "e2e@example.com", "image": "rayproject/ray:2.40.0", "gpus": gpus, "ray": True,
                     "entrypoint": "python -c 'print(1)'", **spec}}
    r = admin.post(f"{KAIWO}/namespaces/{NS}/kaiwojobs", json=body)
    assert r.status_code == 201, r.text
    return name


def status(admin, name: str) -> dict:
    return (get(admin, f"{KAIWO}/namespaces/{NS}/kaiwojobs/{name}") or {}).get("status") or {}


def ray_workload(admin, name: str) -> dict | None:
    items = get(admin, f"{KUEUE}/namespaces/{NS}/workloads")["items"]
    return next((w for w in items if w["metadata"]["name"].startswith(f"rayjob-{name}-")), None)


def delete_jobs(admin, names: list[str]) -> None:
    for n in names:
        admin.delete(f"{KAIWO}/namespaces/{NS}/kaiwojobs/{n}", params={"propagationPolicy": "Background"})
    wait_for(lambda: not [n for n in names if get(admin, f"/apis/ray.io/v1/namespaces/{NS}/rayjobs/{n}")], 120,
             "the RayJobs gone (the GPU quota free again)")


def test_high_priority_ray_job_preempts_a_low_priority_one(ray_ns):
    admin = ray_ns
    priorities = [{"metadata": {"name": "e2e-low"}, "value": 10, "description": "can wait"},
                  {"metadata": {"name": "e2e-high"}, "value": 1000, "description": "urgent"}]

    def configured() -> bool:
        """The precondition, applied again until Kueue shows it: a queue config recreated by an earlier
        module is rewritten from the node pools once more right after, and that write may land on ours."""
        if get(admin, f"{KUEUE}/workloadpriorityclasses/e2e-high") and (
                ((get(admin, f"{KUEUE}/clusterqueues/kaiwo") or {}).get("spec") or {}).get("preemption") or {}
        ).get("withinClusterQueue") == "LowerPriority":
            return True
        queues = get(admin, QUEUE_CONFIG)["spec"]["clusterQueues"]
        for cq in queues:
            cq["spec"]["preemption"] = {"withinClusterQueue": "LowerPriority"}
        r = admin.patch(QUEUE_CONFIG, json={"spec": {"workloadPriorityClasses": priorities, "clusterQueues": queues}}, headers=MERGE)
        assert r.status_code in (200, 409), r.text
        return False

    wait_for(configured, 90, "priority classes and in-queue preemption", interval=2.0)
    lows = [ray_job(admin, f"rlow{i}", 8, priorityClass="e2e-low") for i in range(2)]
    names = list(lows)
    try:
        wait_for(lambda: all(holds_quota(ray_workload(admin, n)) for n in lows), 120, "both low-priority RayJobs admitted")
        assert all(ray_workload(admin, n)["spec"]["priority"] == 10 for n in lows)
        high = ray_job(admin, "rhigh", 8, priorityClass="e2e-high")
        names.append(high)

        victim = preempted_for(lambda n: ray_workload(admin, n), lows, high, "RayJob")
        rj = get(admin, f"/apis/ray.io/v1/namespaces/{NS}/rayjobs/{victim}")
        assert rj["spec"].get("suspend") is True, "Kueue suspended the preempted RayJob"
        wait_for(lambda: status(admin, victim).get("status") == "PENDING", 120, "the preempted Ray KaiwoJob back to PENDING")
    finally:
        delete_jobs(admin, names)


@pytest.fixture
def no_pending_threshold(ray_ns):
    before = (get(ray_ns, KAIWO_CONFIG)["spec"].get("scheduling") or {}).get("pendingThresholdForPreemption", "5m")
    r = ray_ns.patch(KAIWO_CONFIG, json={"spec": {"scheduling": {"pendingThresholdForPreemption": "0s"}}}, headers=MERGE)
    assert r.status_code == 200, r.text
    yield
    ray_ns.patch(KAIWO_CONFIG, json={"spec": {"scheduling": {"pendingThresholdForPreemption": before}}}, headers=MERGE)


def test_ray_job_past_its_duration_is_terminated_for_gpu_demand(ray_ns, no_pending_threshold):
    admin = ray_ns
    long = ray_job(admin, "rlong", 16, duration="1s")
    names = [long]
    try:
        wait_for(lambda: holds_quota(ray_workload(admin, long)) and status(admin, long).get("status") == "RUNNING", 120,
                 "the 16-GPU Ray KaiwoJob RUNNING")
        hungry = ray_job(admin, "rhungry", 8)  # waits for the GPUs the long one holds
        names.append(hungry)
        st = wait_for(lambda: (s := status(admin, long)).get("status") == "TERMINATED" and s, 120, "the Ray KaiwoJob past its duration TERMINATED")
        ended = condition({"status": st}, "WorkloadTerminatedEarly")
        assert ended.get("status") == "True" and ended["reason"] in ("DurationExceeded", "DurationExceededWithActiveGpuDemand"), st
        wait_for(lambda: (r := get(admin, f"/apis/ray.io/v1/namespaces/{NS}/rayjobs/{long}")) is None or r["metadata"].get("deletionTimestamp"),
                 60, "its RayJob deleted")
        wait_for(lambda: holds_quota(ray_workload(admin, hungry)), 120, "the waiting Ray KaiwoJob admitted")
    finally:
        delete_jobs(admin, names)
