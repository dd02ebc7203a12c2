"""Idle-GPU reclaim (GpuWorkload) on the real kube-apiserver, with the simulated GPU metrics
exporter on loopback: records are made for opted-in workloads only; an idle Job under Always
is deleted after its grace period and its record goes after its TTL; under OnPressure an idle
Job is deleted only while a GPU workload waits for GPUs; an active one never; an exporter
outage reclaims nothing; a migrated KaiwoConfig with gpuPreemption reads back unchanged.

There is no kubelet or scheduler here: Pods are created with their owner references and
their status (Running, or Unschedulable for lack of GPUs) is written as the kubelet and the
scheduler would."""

from __future__ import annotations

import asyncio

import pytest

from kaiwo_ctrl.monitoring import owners
from kaiwo_ctrl.monitoring.reclaimer import setup as reclaim_setup
from kaiwo_ctrl.monitoring.reclaimsettings import read_env
from kaiwo_ctrl.runtime.api.client import Client
from kaiwo_ctrl.runtime.manager.manager import Manager
from kaiwo_ctrl.runtime.observe.metrics import Metrics
from kaiwo_ctrl.settings import ensure_config
from support.gpuexporter import GpuExporter
from test_workloads_support import MERGE, eventually, events_for, get

pytestmark = pytest.mark.integration

PREFIX = "kaiwo.silogen.ai/gpu-preemption."
CONFIG_URL = "/apis/config.kaiwo.silogen.ai/v1alpha1/kaiwoconfigs/kaiwo"
GW = "/apis/kaiwo.silogen.ai/v1alpha1/namespaces/{ns}/gpuworkloads"


@pytest.fixture
async def exporter():
    e = GpuExporter()
    await e.start()
    yield e
    await e.stop()


@pytest.fixture
async def reclaimer(control_plane, exporter):
    client = await Client.from_kubeconfig(str(control_plane.kubeconfig))
    await ensure_config(client)
    mgr = Manager(client, metrics=Metrics(), metrics_addr="127.0.0.1:0", health_addr="127.0.0.1:0")
    r = reclaim_setup(mgr, read_env({
        "GPU_PREEMPTION_ENABLED": "true", "GPU_PREEMPTION_METRICS_ENDPOINT": exporter.url,
        "GPU_PREEMPTION_POLLING_INTERVAL": "200ms",
    }))
    assert r is not None
    stop = asyncio.Event()
    task = asyncio.create_task(mgr.run(stop))
    await asyncio.wait_for(mgr.is_leader.wait(), 60)
    await eventually(lambda: r.passes > 0, what="first reclaim pass")
    yield r
    stop.set()
    await asyncio.wait_for(task, 60)
    await client.close()


def gpu_container(n: int = 1) -> dict:
    return {"name": "main", "image": "busybox", "resources": {"limits": {"amd.com/gpu": str(n)}}}


def make_job(admin, ns: str, name: str, annotations: dict[str, str], gpus: int = 1) -> dict:
    body = {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "annotations": {PREFIX + k: v for k, v in annotations.items()}},
        "spec": {"suspend": True, "template": {"spec": {"restartPolicy": "Never", "containers": [gpu_container(gpus)]}}},
    }
    r = admin.post(f"/apis/batch/v1/namespaces/{ns}/jobs", json=body)
    assert r.status_code == 201, r.text
    return r.json()


def make_pod(admin, ns: str, owner: dict, name: str, gpus: int = 1, *, running: bool = True, unschedulable: str = "") -> dict:
    meta = owner["metadata"]
    body = {
        "metadata": {"name": name, "ownerReferences": [{
            "apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": meta["name"], "uid": meta["uid"], "controller": True}]},
        "spec": {"containers": [gpu_container(gpus)]},
    }
    r = admin.post(f"/api/v1/namespaces/{ns}/pods", json=body)
    assert r.status_code == 201, r.text
    if running:
        status = {"phase": "Running"}
    else:
        status = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": unschedulable}]}
    r = admin.patch(f"/api/v1/namespaces/{ns}/pods/{name}/status", json={"status": status}, headers=MERGE)
    assert r.status_code == 200, r.text
    return r.json()


def record_of(admin, ns: str, job: dict) -> dict | None:
    name = owners.record_name("Job", job["metadata"]["name"], job["metadata"]["uid"])
    return get(admin, f"{GW.format(ns=ns)}/{name}")


async def wait_phase(admin, ns: str, job: dict, *phases: str, timeout: float = 30) -> dict:
    async def seen():
        rec = record_of(admin, ns, job)
        return rec if rec and (rec.get("status") or {}).get("phase") in phases else None
    return await eventually(seen, timeout=timeout, what=f"GpuWorkload of {job['metadata']['name']} in {phases}")


def job_exists(admin, ns: str, name: str) -> bool:
    return get(admin, f"/apis/batch/v1/namespaces/{ns}/jobs/{name}") is not None


async def test_always_reclaims_idle_after_grace_and_record_goes_after_ttl(reclaimer, admin, namespace, exporter):
    idle = make_job(admin, namespace, "idle", {"policy": "Always", "grace-period": "1s", "ttl": "3s"})
    busy = make_job(admin, namespace, "busy", {"policy": "Always", "grace-period": "1s"})
    plain = make_job(admin, namespace, "plain", {})  # not opted in
    for job, value in ((idle, 1.0), (busy, 80.0), (plain, 0.0)):
        make_pod(admin, namespace, job, f"{job['metadata']['name']}-0")
        exporter.set(namespace, f"{job['metadata']['name']}-0", value)

    rec = await wait_phase(admin, namespace, idle, "Idle", "Preempting", "Preempted")
    assert rec["spec"]["workloadRef"]["uid"] == idle["metadata"]["uid"] and rec["spec"]["gpuResources"] == {"amd.com/gpu": 1}
    assert rec["spec"]["preemptionPolicy"] == "Always" and rec["spec"]["gracePeriod"] == "1s"
    done = await wait_phase(admin, namespace, idle, "Preempted")
    assert "Always" in done["status"]["preemptionReason"] and done["status"]["finishedAt"]
    await eventually(lambda: not job_exists(admin, namespace, "idle"), what="idle Job deleted")
    await eventually(lambda: {"Tracking", "WorkloadIdle", "PreemptionStarted", "WorkloadPreempted"}
                     <= {e["reason"] for e in events_for(admin, namespace, done["metadata"]["name"])}, what="the record's events")
    await eventually(lambda: "GpuReclaimed" in {e["reason"] for e in events_for(admin, namespace, "idle")}, what="event on the Job")

    # the active one is kept, the unannotated one is not tracked
    assert (await wait_phase(admin, namespace, busy, "Active"))["status"]["aggregatedUtilization"] == 80.0
    assert job_exists(admin, namespace, "busy") and job_exists(admin, namespace, "plain")
    assert record_of(admin, namespace, plain) is None

    # the record goes after its TTL (3s from finishedAt)
    await eventually(lambda: record_of(admin, namespace, idle) is None, timeout=30, what="record deleted after its TTL")
    assert (record_of(admin, namespace, busy) or {}).get("status", {}).get("phase") == "Active"


async def test_on_pressure_reclaims_only_for_a_pending_gpu_workload(reclaimer, admin, namespace, exporter):
    admin.patch(f"/api/v1/namespaces/{namespace}", json={"metadata": {"annotations": {PREFIX + "grace-period": "1s"}}}, headers=MERGE)
    old = make_job(admin, namespace, "old-idle", {}, gpus=2)  # opted in by the namespace annotation, OnPressure
    make_pod(admin, namespace, old, "old-idle-0", gpus=2)
    exporter.set(namespace, "old-idle-0", 0.5, gpus=2)
    await wait_phase(admin, namespace, old, "Idle")
    young = make_job(admin, namespace, "young-idle", {}, gpus=2)
    make_pod(admin, namespace, young, "young-idle-0", gpus=2)
    exporter.set(namespace, "young-idle-0", 0.5, gpus=2)
    await wait_phase(admin, namespace, young, "Idle")

    # idle past the grace period but nobody waits: both kept
    start = reclaimer.passes
    await eventually(lambda: reclaimer.passes >= start + 10, what="ten passes")
    assert job_exists(admin, namespace, "old-idle") and job_exists(admin, namespace, "young-idle")

    # a workload waiting for 2 GPUs: only the oldest idle one goes
    demand = make_job(admin, namespace, "demand", {}, gpus=2)
    make_pod(admin, namespace, demand, "demand-0", gpus=2, running=False,
             unschedulable="0/2 nodes are available: 2 Insufficient amd.com/gpu.")
    await wait_phase(admin, namespace, demand, "PendingGpu")
    done = await wait_phase(admin, namespace, old, "Preempted")
    assert done["status"]["preemptedFor"].endswith(owners.record_name("Job", "demand", demand["metadata"]["uid"]))
    await eventually(lambda: not job_exists(admin, namespace, "old-idle"), what="oldest idle Job deleted")
    start = reclaimer.passes
    await eventually(lambda: reclaimer.passes >= start + 5, what="five passes")
    assert job_exists(admin, namespace, "young-idle")
    assert (record_of(admin, namespace, young) or {})["status"]["phase"] == "Idle"


async def test_exporter_outage_reclaims_nothing(reclaimer, admin, namespace, exporter):
    exporter.fail(503)
    job = make_job(admin, namespace, "blind", {"policy": "Always", "grace-period": "1s"})
    make_pod(admin, namespace, job, "blind-0")
    rec = await wait_phase(admin, namespace, job, "Active")  # no samples: not idle (upstream: 0% -> Idle)
    assert "aggregatedUtilization" not in rec["status"]
    start = reclaimer.passes
    await eventually(lambda: reclaimer.passes >= start + 10, what="ten passes")
    assert job_exists(admin, namespace, "blind")
    exporter.fail(200)
    exporter.set(namespace, "blind-0", 0.0)
    await wait_phase(admin, namespace, job, "Preempted")


async def test_migrated_kaiwo_config_gpu_preemption_reads_back_unchanged(admin, client):
    await ensure_config(client)  # the KaiwoConfig the operator makes at start-up
    upstream = {"defaultThreshold": 10, "defaultGracePeriod": "15m", "defaultPolicy": "OnPressure",
                "defaultAggregation": "Max", "defaultTTL": "12h"}
    before = admin.get(CONFIG_URL).json()["spec"].get("gpuPreemption") or {}
    try:
        r = admin.patch(CONFIG_URL, json={"spec": {"gpuPreemption": upstream}}, headers=MERGE)
        assert r.status_code == 200, r.text
        assert admin.get(CONFIG_URL).json()["spec"]["gpuPreemption"] == upstream
        bad = admin.patch(CONFIG_URL, json={"spec": {"gpuPreemption": {"defaultPolicy": "Sometimes", "defaultThreshold": 101}}}, headers=MERGE)
        assert bad.status_code == 422 and "defaultPolicy" in bad.text and "defaultThreshold" in bad.text
    finally:
        restore = {**{k: None for k in upstream if k not in before}, **before}
        assert admin.patch(CONFIG_URL, json={"spec": {"gpuPreemption": restore}}, headers=MERGE).status_code == 200


def create(admin, path: str, body: dict) -> dict:
    r = admin.post(path, json=body)
    assert r.status_code == 201, r.text
    return r.json()


def owned(owner: dict) -> list[dict]:
    m = owner["metadata"]
    return [{"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": m["name"], "uid": m["uid"], "controller": True}]


TEMPLATE = {"metadata": {"labels": {"app": "x"}}, "spec": {"containers": [gpu_container()]}}


async def test_deployment_rayjob_and_bare_pod_owners_are_discovered_and_deletion_seen(reclaimer, admin, namespace, exporter):
    admin.patch(f"/api/v1/namespaces/{namespace}", json={"metadata": {"annotations": {PREFIX + "enabled": "true"}}}, headers=MERGE)
    dep = create(admin, f"/apis/apps/v1/namespaces/{namespace}/deployments", {
        "metadata": {"name": "web"}, "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "x"}}, "template": TEMPLATE}})
    rs = create(admin, f"/apis/apps/v1/namespaces/{namespace}/replicasets", {
        "metadata": {"name": "web-abc", "ownerReferences": owned(dep)},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "x"}}, "template": TEMPLATE}})
    make_pod(admin, namespace, rs, "web-abc-0")
    rayjob = create(admin, f"/apis/ray.io/v1/namespaces/{namespace}/rayjobs", {
        "apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": "rj"}, "spec": {"entrypoint": "python x.py"}})
    cluster = create(admin, f"/apis/ray.io/v1/namespaces/{namespace}/rayclusters", {
        "apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "rj-cluster", "ownerReferences": owned(rayjob)},
        "spec": {"headGroupSpec": {"rayStartParams": {}, "template": {"spec": {"containers": [gpu_container()]}}}}})
    make_pod(admin, namespace, cluster, "rj-head")
    bare = create(admin, f"/api/v1/namespaces/{namespace}/pods", {"metadata": {"name": "bare"}, "spec": {"containers": [gpu_container(2)]}})
    for pod in ("web-abc-0", "rj-head"):
        exporter.set(namespace, pod, 50.0)

    async def record_named(kind: str, name: str, uid: str) -> dict:
        url = f"{GW.format(ns=namespace)}/{owners.record_name(kind, name, uid)}"
        return await eventually(lambda: (get(admin, url) or {}).get("status", {}).get("phase") and get(admin, url), what=f"record of {kind}/{name}")

    web = await record_named("Deployment", "web", dep["metadata"]["uid"])
    assert web["status"]["ownerChain"] == "Pod/web-abc-0 -> ReplicaSet/web-abc -> Deployment/web"
    assert web["spec"]["workloadRef"]["apiVersion"] == "apps/v1"
    ray = await record_named("RayJob", "rj", rayjob["metadata"]["uid"])
    assert ray["status"]["ownerChain"] == "Pod/rj-head -> RayCluster/rj-cluster -> RayJob/rj"
    lone = await record_named("Pod", "bare", bare["metadata"]["uid"])
    assert lone["spec"]["gpuResources"] == {"amd.com/gpu": 2} and lone["status"]["phase"] == "PendingOther"

    # the Deployment goes away on its own (no garbage collector here: its children too)
    for path in (f"/api/v1/namespaces/{namespace}/pods/web-abc-0", f"/apis/apps/v1/namespaces/{namespace}/replicasets/web-abc",
                 f"/apis/apps/v1/namespaces/{namespace}/deployments/web"):
        assert admin.delete(path).status_code == 200
    url = f"{GW.format(ns=namespace)}/{web['metadata']['name']}"
    gone = await eventually(lambda: (get(admin, url) or {}).get("status", {}).get("phase") == "Deleted" and get(admin, url), what="Deleted")
    assert gone["status"]["finishedAt"] and "trackedPods" not in gone["status"]
    await eventually(lambda: "WorkloadDeleted" in {e["reason"] for e in events_for(admin, namespace, web["metadata"]["name"])},
                     what="WorkloadDeleted event")


async def test_a_hand_written_record_or_an_opted_out_owner_deletes_nothing(reclaimer, admin, namespace, exporter):
    """Attack: someone who may create GpuWorkloads (not the owner's author) writes a record with
    policy Always for a Job that never opted in, hoping the operator deletes it; or an owner opts
    out after its record was made. The operator checks the owner's annotations with the API
    server before deleting: the Job stays, the record is removed."""
    victim = make_job(admin, namespace, "victim", {})
    make_pod(admin, namespace, victim, "victim-0")
    exporter.set(namespace, "victim-0", 0.0)
    forged = create(admin, GW.format(ns=namespace), {
        "apiVersion": "kaiwo.silogen.ai/v1alpha1", "kind": "GpuWorkload", "metadata": {"name": "forged"},
        "spec": {"workloadRef": {"apiVersion": "batch/v1", "kind": "Job", "name": "victim", "uid": victim["metadata"]["uid"]},
                 "gpuResources": {"amd.com/gpu": 1}, "preemptionPolicy": "Always", "gracePeriod": "0s"}})
    leaver = make_job(admin, namespace, "leaver", {"policy": "Always", "grace-period": "4s"})
    make_pod(admin, namespace, leaver, "leaver-0")
    exporter.set(namespace, "leaver-0", 0.0)
    await wait_phase(admin, namespace, leaver, "Idle")
    r = admin.patch(f"/apis/batch/v1/namespaces/{namespace}/jobs/leaver",
                    json={"metadata": {"annotations": {PREFIX + "enabled": "false"}}}, headers=MERGE)
    assert r.status_code == 200, r.text

    await eventually(lambda: get(admin, f"{GW.format(ns=namespace)}/forged") is None, what="the forged record removed")
    await eventually(lambda: record_of(admin, namespace, leaver) is None, what="the opted-out record removed")
    assert forged["metadata"]["uid"]
    start = reclaimer.passes
    await eventually(lambda: reclaimer.passes >= start + 5, what="five passes")
    assert job_exists(admin, namespace, "victim") and job_exists(admin, namespace, "leaver")


async def test_a_steady_world_writes_nothing(reclaimer, admin, namespace, exporter):
    steady = make_job(admin, namespace, "steady", {"enabled": "true"})
    make_pod(admin, namespace, steady, "steady-0")
    exporter.set(namespace, "steady-0", 60.0)
    await wait_phase(admin, namespace, steady, "Active")
    exporter.set(namespace, "steady-0", 60.4)  # moves less than a point: no rewrite
    start = reclaimer.passes
    await eventually(lambda: reclaimer.passes >= start + 2, what="two passes")
    writes, start = reclaimer.writes, reclaimer.passes
    await eventually(lambda: reclaimer.passes >= start + 10, what="ten passes")
    assert reclaimer.writes == writes
    exporter.set(namespace, "steady-0", 2.0)
    await wait_phase(admin, namespace, steady, "Idle")
    # the record can show Idle before the reclaimer's coroutine resumes from its PATCH and counts it
    await eventually(lambda: reclaimer.writes > writes, what="the Idle write counted")
