"""KaiwoJob reconciler on the real kube-apiserver (§5, §8, §11, §12, §13).

The operator runs in-process exactly as ``kaiwo-ctrl run`` wires it
(``kaiwo_ctrl.workloads.controller.setup``). Kueue, KubeRay and the Job
controller are played by hand: the tests patch child statuses and create
Kueue Workloads, and watch the Kaiwo status go through the machine.
"""

from __future__ import annotations

import pytest

from test_workloads_support import (  # noqa: F401 - fixtures
    KUEUE,
    MERGE,
    TEST_IMAGE,
    admit,
    complete_job,
    conditions,
    create_kaiwo,
    eventually,
    events_for,
    fail_job,
    get,
    gpu_nodes,
    kaiwo_url,
    operator,
    patch_status,
    status_of,
    wait_event,
    wait_object,
    wait_status,
)

pytestmark = pytest.mark.integration


def job_url(ns: str, name: str) -> str:
    return f"/apis/batch/v1/namespaces/{ns}/jobs/{name}"


def container(job: dict) -> dict:
    return job["spec"]["template"]["spec"]["containers"][0]


def env_of(c: dict) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in c.get("env") or []}


async def test_plain_job_goes_through_the_status_machine(operator, admin, namespace):
    kj = create_kaiwo(admin, "KaiwoJob", namespace, "plain", image="busybox:1.36", entrypoint="echo hello")
    uid = kj["metadata"]["uid"]
    job = await wait_object(admin, job_url(namespace, "plain"), what="child Job")
    # §8.1: suspended for Kueue, labelled with the queue, owned by the KaiwoJob
    assert job["spec"]["suspend"] is True
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "kaiwo"
    assert job["metadata"]["labels"]["kaiwo.silogen.ai/run-id"] == uid
    (ref,) = job["metadata"]["ownerReferences"]
    assert (ref["kind"], ref["uid"], ref["controller"], ref["blockOwnerDeletion"]) == ("KaiwoJob", uid, True, True)
    c = container(job)
    assert c["image"] == "busybox:1.36" and c["command"] == ["/bin/sh", "-c", "echo hello"]
    assert job["spec"]["backoffLimit"] == 0 and job["spec"]["ttlSecondsAfterFinished"] == 3600

    st = await wait_status(admin, "KaiwoJob", namespace, "plain", "PENDING")
    conds = conditions(st)
    assert conds["Schedulable"] == ("True", "Schedulable", "Workload does not require GPU resources")
    assert conds["Admitted"] == ("False", "Pending", "Workload is pending admission into 'kaiwo'")
    assert st["observedGeneration"] == kj["metadata"]["generation"]

    # §5.8: LocalQueue kaiwo made in the namespace, owned (not controlled) by the ClusterQueue
    lq = await wait_object(admin, f"{KUEUE}/namespaces/{namespace}/localqueues/kaiwo", what="LocalQueue")
    assert lq["spec"]["clusterQueue"] == "kaiwo"
    assert [r["kind"] for r in lq["metadata"]["ownerReferences"]] == ["ClusterQueue"]
    assert not lq["metadata"]["ownerReferences"][0].get("controller")

    created = await wait_event(admin, namespace, "plain", "ResourceCreated")
    assert created["message"] in ("Created batch/v1, Kind=Job: plain", f"Created kueue.x-k8s.io/v1beta2, Kind=LocalQueue: kaiwo")
    await wait_event(admin, namespace, "plain", "WorkloadPending")

    # Kueue admits; the Job has no pods yet (§8.2: still PENDING) ...
    admit(admin, namespace, job)
    await eventually(
        lambda: conditions(status_of(admin, "KaiwoJob", namespace, "plain")).get("Admitted")
        == ("True", "Admitted", "Workload is admitted"),
        what="Admitted=True",
    )
    assert status_of(admin, "KaiwoJob", namespace, "plain")["status"] == "PENDING"
    # ... then a pod is active: STARTING
    patch_status(admin, job_url(namespace, "plain"), {"active": 1, "startTime": "2026-01-01T00:00:00Z"})
    await wait_status(admin, "KaiwoJob", namespace, "plain", "STARTING")
    await wait_event(admin, namespace, "plain", "WorkloadStarting")

    # pods ready: RUNNING with a start time
    patch_status(admin, job_url(namespace, "plain"), {"active": 1, "ready": 1, "startTime": "2026-01-01T00:00:00Z"})
    st = await wait_status(admin, "KaiwoJob", namespace, "plain", "RUNNING")
    assert st["startTime"]
    await wait_event(admin, namespace, "plain", "WorkloadRunning")

    # Kueue's suspend flip belongs to Kueue: an unsuspended Job is not suspended again
    admin.patch(job_url(namespace, "plain"), json={"spec": {"suspend": False}}, headers=MERGE)
    complete_job(admin, job_url(namespace, "plain"))
    st = await wait_status(admin, "KaiwoJob", namespace, "plain", "COMPLETE")
    assert st["completionTime"] and "duration" in st
    assert get(admin, job_url(namespace, "plain"))["spec"]["suspend"] is False
    await wait_event(admin, namespace, "plain", "WorkloadComplete")


async def test_failed_job_is_failed_and_terminal(operator, admin, namespace):
    create_kaiwo(admin, "KaiwoJob", namespace, "boom", image="busybox", entrypoint="exit 1")
    job = await wait_object(admin, job_url(namespace, "boom"))
    admit(admin, namespace, job)
    patch_status(admin, job_url(namespace, "boom"), {"active": 1, "startTime": "2026-01-01T00:00:00Z"})
    await wait_status(admin, "KaiwoJob", namespace, "boom", "STARTING")
    fail_job(admin, job_url(namespace, "boom"))
    st = await wait_status(admin, "KaiwoJob", namespace, "boom", "FAILED")
    assert st["completionTime"]
    ev = await wait_event(admin, namespace, "boom", "WorkloadFailed")
    assert ev["type"] == "Warning"
