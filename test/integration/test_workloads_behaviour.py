"""Reconciler behaviour beyond one workload's life: no writes when nothing
changed (counted API calls), spec edits, bad input, termination and
deletion through owner references, on the real kube-apiserver."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from kaiwo_ctrl.runtime.control.handler import Request
from test_workloads_support import (  # noqa: F401 - fixtures
    job_url,
    MERGE,
    TEAM_QUEUE,
    conditions,
    create_kaiwo,
    eventually,
    garbage_collector,
    get,
    gpu_nodes,
    kaiwo_url,
    make_gpu_nodes,
    operator,
    patch_status,
    status_of,
    wait_event,
    wait_object,
    wait_status,
)

pytestmark = pytest.mark.integration



def api_calls(mgr) -> Counter:
    return Counter({m: n for m, n in mgr.client.counts.items() if m != "WATCH"})


async def settled(mgr) -> None:
    """Every controller idle and every queued event written."""

    def idle() -> bool:
        return all(len(c.queue) == 0 and c.active == 0 for c in mgr.controllers) and mgr.recorder.backlog == 0

    for _ in range(3):  # idle three times in a row, 0.3 s apart
        await eventually(idle, timeout=60, what="controllers idle")
        await asyncio.sleep(0.3)


async def test_reconciling_200_unchanged_kaiwojobs_makes_no_api_call(operator, admin, namespace):
    mgr = operator
    n = 200
    for i in range(n):
        create_kaiwo(admin, "KaiwoJob", namespace, f"idle-{i:03d}", image="busybox", entrypoint="sleep 1")
    shared = mgr.reconcilers["KaiwoJob"].shared

    def all_done() -> bool:
        objs = shared.own["KaiwoJob"].list(namespace)
        jobs = shared.children["Job"].list(namespace)
        return len(objs) == n and len(jobs) == n and all(o.get("status", {}).get("status") == "PENDING" for o in objs)

    await eventually(all_done, timeout=120, what="200 KaiwoJobs with Jobs and PENDING status in the cache")
    await settled(mgr)
    ctl = next(c for c in mgr.controllers if c.name == "kaiwojob")
    before_calls, before_reconciles = api_calls(mgr), ctl.reconciles
    for i in range(n):
        ctl.enqueue(Request(namespace, f"idle-{i:03d}"))
    await eventually(lambda: ctl.reconciles >= before_reconciles + n, timeout=120, what="200 reconciles")
    await settled(mgr)
    delta = api_calls(mgr) - before_calls
    print(f"\n{ctl.reconciles - before_reconciles} reconciles of unchanged KaiwoJobs made {sum(delta.values())} API calls {dict(delta)}")
    assert sum(delta.values()) == 0, f"an unchanged world must cause no request, got {dict(delta)}"


# --------------------------------------------------------------------------- spec edits


async def test_job_pod_template_change_is_reported_not_ignored(operator, admin, namespace):
    create_kaiwo(admin, "KaiwoJob", namespace, "edited", image="busybox:1.36", entrypoint="sleep 1")
    job = await wait_object(admin, job_url(namespace, "edited"))
    await wait_status(admin, "KaiwoJob", namespace, "edited", "PENDING")
    r = admin.patch(kaiwo_url("KaiwoJob", namespace, "edited"), json={"spec": {"image": "busybox:1.37"}}, headers=MERGE)
    assert r.status_code == 200, r.text
    st = await eventually(
        lambda: (s := status_of(admin, "KaiwoJob", namespace, "edited"))
        and "SpecChangeNotApplied" in conditions(s)
        and s,
        what="SpecChangeNotApplied condition",
    )
    value, reason, message = conditions(st)["SpecChangeNotApplied"]
    assert (value, reason) == ("True", "ImmutableFieldChanged")
    assert "spec.template.spec.containers[workload].image" in message
    assert st["observedGeneration"] == 2
    ev = await wait_event(admin, namespace, "edited", "ImmutableFieldChanged")
    assert ev["type"] == "Warning" and "containers[workload].image" in ev["message"]
    # the Job was not forced (nor recreated)
    now = get(admin, job_url(namespace, "edited"))
    assert now["metadata"]["uid"] == job["metadata"]["uid"]
    assert now["spec"]["template"]["spec"]["containers"][0]["image"] == "busybox:1.36"
    # reverting the spec clears the condition
    admin.patch(kaiwo_url("KaiwoJob", namespace, "edited"), json={"spec": {"image": "busybox:1.36"}}, headers=MERGE)
    await eventually(
        lambda: "SpecChangeNotApplied" not in conditions(status_of(admin, "KaiwoJob", namespace, "edited")),
        what="condition cleared",
    )


async def test_job_mutable_fields_reach_the_job(operator, admin, namespace):
    create_kaiwo(admin, "KaiwoJob", namespace, "relabel", image="busybox", entrypoint="sleep 1",
                 job={"spec": {"ttlSecondsAfterFinished": 100,
                               "template": {"spec": {"restartPolicy": "Never",
                                                     "containers": [{"name": "c", "image": "busybox"}]}}}})
    await wait_object(admin, job_url(namespace, "relabel"))
    admin.patch(kaiwo_url("KaiwoJob", namespace, "relabel"),
                json={"spec": {"job": {"spec": {"ttlSecondsAfterFinished": 200}}}}, headers=MERGE)
    await eventually(lambda: get(admin, job_url(namespace, "relabel"))["spec"]["ttlSecondsAfterFinished"] == 200,
                     what="ttl updated on the Job")
    assert "SpecChangeNotApplied" not in conditions(status_of(admin, "KaiwoJob", namespace, "relabel"))


# --------------------------------------------------------------------------- bad input


async def test_bad_input_gives_error_condition_and_event_and_others_keep_working(operator, admin, namespace):
    mgr = operator
    # contradictory: GPUs of a vendor no node pool offers; an invalid size
    create_kaiwo(admin, "KaiwoJob", namespace, "contra", image="busybox", gpus=2, gpuVendor="intel")
    create_kaiwo(admin, "KaiwoJob", namespace, "badsize", image="busybox",
                 storage={"storageEnabled": True, "data": {"storageSize": "lots"}})
    # invalid: an entrypoint with an interpreter line and no script
    create_kaiwo(admin, "KaiwoJob", namespace, "noscript", image="busybox", entrypoint="#!/bin/bash")
    # a queue that does not exist / a queue this namespace may not use
    create_kaiwo(admin, "KaiwoJob", namespace, "noqueue", image="busybox", clusterQueue="does-not-exist")
    create_kaiwo(admin, "KaiwoService", namespace, "wrongns", image="busybox", clusterQueue=TEAM_QUEUE)

    st = await wait_status(admin, "KaiwoJob", namespace, "contra", "ERROR")
    value, reason, message = conditions(st)["SpecValid"]
    assert (value, reason) == ("False", "InvalidSpec") and message.startswith("spec.gpuVendor:")
    ev = await wait_event(admin, namespace, "contra", "InvalidSpec")
    assert ev["type"] == "Warning" and "spec.gpuVendor" in ev["message"]

    st = await wait_status(admin, "KaiwoJob", namespace, "badsize", "ERROR")
    assert conditions(st)["SpecValid"][2].startswith("spec.storage.data.storageSize:")

    st = await wait_status(admin, "KaiwoJob", namespace, "noscript", "ERROR")
    assert conditions(st)["SpecValid"][2].startswith("spec.entrypoint:")
    await wait_event(admin, namespace, "noscript", "InvalidSpec")

    st = await wait_status(admin, "KaiwoJob", namespace, "noqueue", "ERROR")
    assert conditions(st)["Schedulable"] == (
        "False", "ClusterQueueNotFound", "Cluster queue 'does-not-exist' is not defined in KaiwoQueueConfig 'kaiwo'")
    await wait_event(admin, namespace, "noqueue", "ClusterQueueNotFound")

    st = await wait_status(admin, "KaiwoService", namespace, "wrongns", "ERROR")
    assert conditions(st)["Schedulable"][1] == "WrongQueueNamespace"

    # a user Job the API server refuses (a Job pod needs restartPolicy Never/OnFailure)
    create_kaiwo(admin, "KaiwoJob", namespace, "refused", image="busybox",
                 job={"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}}})
    st = await wait_status(admin, "KaiwoJob", namespace, "refused", "ERROR")
    value, reason, message = conditions(st)["SpecValid"]
    assert (value, reason) == ("False", "ChildRejected")
    assert "spec.template.spec.restartPolicy" in message
    ev = await wait_event(admin, namespace, "refused", "ChildRejected")
    assert ev["type"] == "Warning" and "restartPolicy" in ev["message"]

    # nothing was created for them
    assert get(admin, f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/badsize-data") is None
    for name in ("contra", "noscript", "noqueue", "refused"):
        assert get(admin, job_url(namespace, name)) is None
    assert get(admin, f"/apis/apps/v1/namespaces/{namespace}/deployments/wrongns") is None

    # the operator keeps going: a good workload next to them is reconciled
    create_kaiwo(admin, "KaiwoJob", namespace, "fine", image="busybox", entrypoint="true")
    await wait_object(admin, job_url(namespace, "fine"))
    await wait_status(admin, "KaiwoJob", namespace, "fine", "PENDING")
    assert all(c._tasks and not any(t.done() for t in c._tasks) for c in mgr.controllers), "workers alive"

    # fixing the spec recovers (ERROR is not terminal)
    r = admin.patch(kaiwo_url("KaiwoJob", namespace, "contra"), json={"spec": {"gpuVendor": "amd", "gpus": 0}},
                    headers=MERGE)
    assert r.status_code == 200, r.text
    st = await wait_status(admin, "KaiwoJob", namespace, "contra", "PENDING")
    assert "SpecValid" not in conditions(st)
    await wait_object(admin, job_url(namespace, "contra"))


# --------------------------------------------------------------------------- termination and deletion


async def test_terminating_workload_is_terminated_and_its_children_deleted(operator, admin, namespace):
    storage = {"storageEnabled": True, "data": {"storageSize": "1Gi"}}
    create_kaiwo(admin, "KaiwoJob", namespace, "doomed", image="busybox", entrypoint="sleep 100", storage=storage)
    await wait_object(admin, job_url(namespace, "doomed"))
    pvc_url = f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/doomed-data"
    await wait_object(admin, pvc_url)
    await wait_status(admin, "KaiwoJob", namespace, "doomed", "PENDING")
    # what the duration sweep or the resource monitor does: flag for termination
    patch_status(admin, kaiwo_url("KaiwoJob", namespace, "doomed"), {"status": "TERMINATING"})
    st = await wait_status(admin, "KaiwoJob", namespace, "doomed", "TERMINATED")
    assert conditions(st)["WorkloadTerminatedEarly"] == (
        "True", "EarlyTermination", "Workload terminated early (check events and other conditions for likely causes)")

    def gone_or_deleting(url: str) -> bool:
        obj = get(admin, url)
        return obj is None or bool(obj["metadata"].get("deletionTimestamp"))

    await eventually(lambda: gone_or_deleting(job_url(namespace, "doomed")), what="Job deleted")
    await eventually(lambda: gone_or_deleting(pvc_url), what="PVC deleted")
    job = get(admin, job_url(namespace, "doomed"))
    # no garbage collector here: the foreground deletion waits on it, so the Job stays, marked
    assert job is not None and job["metadata"].get("deletionTimestamp")
    assert "foregroundDeletion" in job["metadata"].get("finalizers", [])
    await wait_event(admin, namespace, "doomed", "WorkloadTerminated")
    ev = await wait_event(admin, namespace, "doomed", "EarlyTermination")
    assert ev["type"] == "Warning"
    # the Kaiwo object itself stays for inspection
    assert get(admin, kaiwo_url("KaiwoJob", namespace, "doomed")) is not None


async def test_deleting_the_workload_deletes_what_it_owns(operator, admin, namespace, garbage_collector):
    storage = {"storageEnabled": True, "data": {"storageSize": "1Gi", "download": {
        "git": [{"repository": "https://example.invalid/r.git", "targetPath": "repo"}]}}}
    kj = create_kaiwo(admin, "KaiwoJob", namespace, "owner", image="busybox", entrypoint="true", storage=storage)
    ks = create_kaiwo(admin, "KaiwoService", namespace, "svcowner", image="nginx")
    urls = [
        f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/owner-data",
        f"/api/v1/namespaces/{namespace}/configmaps/owner-download",
        job_url(namespace, "owner-download"),
    ]
    dep_url = f"/apis/apps/v1/namespaces/{namespace}/deployments/svcowner"
    for url in urls + [dep_url]:
        await wait_object(admin, url)
    assert kj["metadata"].get("finalizers") is None and ks["metadata"].get("finalizers") is None
    # no finalizer on the Kaiwo objects: nothing to clean up beyond what GC does
    for kind, name in (("KaiwoJob", "owner"), ("KaiwoService", "svcowner")):
        assert not get(admin, kaiwo_url(kind, namespace, name))["metadata"].get("finalizers")
        r = admin.delete(kaiwo_url(kind, namespace, name))
        assert r.status_code == 200, r.text
    for url in urls + [dep_url]:
        await eventually(lambda url=url: get(admin, url) is None, timeout=60, what=f"{url} garbage-collected")
    # the LocalQueue belongs to the ClusterQueue and survives
    assert get(admin, f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{namespace}/localqueues/kaiwo") is not None


# ---------------------------------------------------- re-evaluation and duration-based preemption


async def test_error_is_re_evaluated_when_gpu_nodes_appear(operator, admin, namespace):
    create_kaiwo(admin, "KaiwoJob", namespace, "waits-for-gpus", image="cuda", gpus=8, gpuVendor="nvidia")
    st = await wait_status(admin, "KaiwoJob", namespace, "waits-for-gpus", "ERROR")
    assert conditions(st)["Schedulable"][:2] == ("False", "NoGPUs")
    assert get(admin, job_url(namespace, "waits-for-gpus")) is None
    names = make_gpu_nodes(admin, "nvidia", 1)
    try:
        st = await wait_status(admin, "KaiwoJob", namespace, "waits-for-gpus", "PENDING")
        assert conditions(st)["Schedulable"] == ("True", "Schedulable", "Cluster has sufficient GPU resources")
        job = await wait_object(admin, job_url(namespace, "waits-for-gpus"))
        assert job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "8"
    finally:
        for name in names:
            admin.delete(f"/api/v1/nodes/{name}")


@pytest.fixture
def no_pending_threshold(admin):
    """KaiwoConfig scheduling.pendingThresholdForPreemption = 0s for one test."""
    url = "/apis/config.kaiwo.silogen.ai/v1alpha1/kaiwoconfigs/kaiwo"
    before = get(admin, url)["spec"].get("scheduling", {}).get("pendingThresholdForPreemption", "5m")
    r = admin.patch(url, json={"spec": {"scheduling": {"pendingThresholdForPreemption": "0s"}}}, headers=MERGE)
    assert r.status_code == 200, r.text
    yield
    admin.patch(url, json={"spec": {"scheduling": {"pendingThresholdForPreemption": before}}}, headers=MERGE)


async def test_expired_duration_under_gpu_demand_terminates(operator, admin, namespace, gpu_nodes, no_pending_threshold):
    from test_workloads_support import admit

    create_kaiwo(admin, "KaiwoJob", namespace, "long", image="rocm", gpus=8, duration="1s", entrypoint="sleep 1000")
    job = await wait_object(admin, job_url(namespace, "long"))
    admit(admin, namespace, job)
    patch_status(admin, job_url(namespace, "long"), {"active": 1, "ready": 1, "startTime": "2026-01-01T00:00:00Z"})
    await wait_status(admin, "KaiwoJob", namespace, "long", "RUNNING")
    # Preemptable becomes True once the duration ran out (a requeue, no other trigger)
    st = await eventually(
        lambda: (s := status_of(admin, "KaiwoJob", namespace, "long"))
        and conditions(s).get("Preemptable", ("",))[0] == "True" and s,
        timeout=20,
        what="Preemptable=True",
    )
    assert conditions(st)["Preemptable"] == ("True", "DurationExceeded", "Workload duration has exceeded")
    assert st["status"] == "RUNNING", "no GPU demand yet: keeps running"
    await wait_event(admin, namespace, "long", "Preemptable")

    # GPU demand: another GPU workload waits for admission
    create_kaiwo(admin, "KaiwoJob", namespace, "hungry", image="rocm", gpus=8)
    await wait_status(admin, "KaiwoJob", namespace, "hungry", "PENDING")
    st = await wait_status(admin, "KaiwoJob", namespace, "long", "TERMINATED")
    value, reason, _ = conditions(st)["WorkloadTerminatedEarly"]
    assert value == "True" and reason in ("DurationExceeded", "DurationExceededWithActiveGpuDemand")
    await eventually(
        lambda: (j := get(admin, job_url(namespace, "long"))) is None or bool(j["metadata"].get("deletionTimestamp")),
        what="Job of the terminated workload deleted",
    )
    await wait_event(admin, namespace, "long", "WorkloadTerminated")


async def test_pvc_size_changes_the_api_server_refuses_are_reported(operator, admin, namespace):
    storage = {"storageEnabled": True, "data": {"storageSize": "1Gi"}}
    create_kaiwo(admin, "KaiwoJob", namespace, "grow", image="busybox", entrypoint="true", storage=storage)
    pvc_url = f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/grow-data"
    await wait_object(admin, pvc_url)
    await wait_object(admin, job_url(namespace, "grow"))
    # larger: applicable in principle (expansion), but this PVC is not bound and has no resizable class
    admin.patch(kaiwo_url("KaiwoJob", namespace, "grow"),
                json={"spec": {"storage": {"data": {"storageSize": "2Gi"}}}}, headers=MERGE)
    st = await eventually(
        lambda: (s := status_of(admin, "KaiwoJob", namespace, "grow")) and "SpecChangeNotApplied" in conditions(s) and s,
        what="refused resize reported",
    )
    assert "PersistentVolumeClaim/grow-data" in conditions(st)["SpecChangeNotApplied"][2]
    ev = await wait_event(admin, namespace, "grow", "SpecChangeRejected")
    assert ev["type"] == "Warning"
    assert get(admin, pvc_url)["spec"]["resources"]["requests"]["storage"] == "1Gi"
    # smaller: never applicable, reported from the spec alone
    admin.patch(kaiwo_url("KaiwoJob", namespace, "grow"),
                json={"spec": {"storage": {"data": {"storageSize": "512Mi"}}}}, headers=MERGE)
    await eventually(
        lambda: "spec.resources.requests.storage"
        in conditions(status_of(admin, "KaiwoJob", namespace, "grow")).get("SpecChangeNotApplied", ("", "", ""))[2],
        what="shrink reported",
    )
