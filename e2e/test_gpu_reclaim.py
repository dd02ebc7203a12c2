"""Idle-GPU reclaim on the simulated cluster with the real Kueue: two 8-GPU KaiwoJobs hold
the 16-GPU quota, one idle and one busy (activity from the simulated GPU exporter), and a third
waits in Kueue for GPUs. Under OnPressure the idle one is reclaimed for it, the busy one is
kept, and Kueue then admits the waiting one. The reclaim runnable runs in this process with the
operator ServiceAccount's token (exactly the generated RBAC); the operator of config/default
makes the Jobs, Kueue admits them, kwok runs their Pods."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator

import pytest

from e2e.conftest import ROOT, condition, get, service_account_kubeconfig
from kaiwo_ctrl.monitoring import owners
from kaiwo_ctrl.monitoring.reclaimer import setup as reclaim_setup
from kaiwo_ctrl.monitoring.reclaimsettings import read_env
from kaiwo_ctrl.runtime.api.client import Client
from kaiwo_ctrl.runtime.manager.manager import Manager
from kaiwo_ctrl.runtime.observe.metrics import Metrics
from support import eventually
from support.gpuexporter import GpuExporter

pytestmark = pytest.mark.e2e

NS = f"reclaim-e2e-{uuid.uuid4().hex[:4]}"
KAIWO = "/apis/kaiwo.silogen.ai/v1alpha1"
KUEUE = "/apis/kueue.x-k8s.io/v1beta2"
PREFIX = "kaiwo.silogen.ai/gpu-preemption."


@pytest.fixture(scope="module")
def reclaim_ns(operator, kubectl, admin):
    kubectl("apply", "-f", str(ROOT / "config" / "samples" / "kaiwo_v1alpha1_kaiwoqueueconfig.yaml"))
    # the namespace opts every GPU workload in (OnPressure by default), grace period 1s
    r = admin.post("/api/v1/namespaces", json={"metadata": {"name": NS, "annotations": {PREFIX + "grace-period": "1s"}}})
    assert r.status_code == 201, r.text
    return NS


def submit(admin, name: str) -> dict:
    body = {"apiVersion": "kaiwo.silogen.ai/v1alpha1", "kind": "KaiwoJob", "metadata": {"name": name, "namespace": NS},
            "spec": {"user": "e2e@example.com", "image": "busybox:1.36", "gpus": 8, "entrypoint": "sleep 1"}}
    r = admin.post(f"{KAIWO}/namespaces/{NS}/kaiwojobs", json=body)
    assert r.status_code == 201, r.text
    return r.json()


def running_pod(admin, job: str) -> str | None:
    pods = admin.get(f"/api/v1/namespaces/{NS}/pods").json()["items"]
    mine = [p for p in pods if p["metadata"]["name"].startswith(f"{job}-") and p.get("status", {}).get("phase") == "Running"]
    return mine[0]["metadata"]["name"] if mine else None


def record(admin, kj: dict) -> dict:
    name = owners.record_name("KaiwoJob", kj["metadata"]["name"], kj["metadata"]["uid"])
    return get(admin, f"{KAIWO}/namespaces/{NS}/gpuworkloads/{name}") or {}


def phase(admin, kj: dict) -> str:
    return (record(admin, kj).get("status") or {}).get("phase") or ""


def admitted(admin, job: str) -> bool:
    items = get(admin, f"{KUEUE}/namespaces/{NS}/workloads")["items"]
    return any(w["metadata"]["name"].startswith(f"job-{job}-") and condition(w, "QuotaReserved").get("status") == "True" for w in items)


@contextlib.asynccontextmanager
async def running_reclaimer(sim_plane, admin, deployed, tmp_path) -> AsyncIterator[GpuExporter]:
    """The reclaim runnable in this process as the operator's ServiceAccount, reading the simulated exporter."""
    exporter = GpuExporter()
    await exporter.start()
    sa = deployed["service_account"]["metadata"]
    client = await Client.from_kubeconfig(str(service_account_kubeconfig(sim_plane, admin, sa["namespace"], sa["name"], tmp_path / "kc")))
    mgr = Manager(client, metrics=Metrics(), metrics_addr="127.0.0.1:0", health_addr="127.0.0.1:0")
    reclaimer = reclaim_setup(mgr, read_env({"GPU_PREEMPTION_ENABLED": "true", "GPU_PREEMPTION_METRICS_ENDPOINT": exporter.url,
                                             "GPU_PREEMPTION_POLLING_INTERVAL": "200ms"}))
    assert reclaimer is not None
    stop = asyncio.Event()
    task = asyncio.create_task(mgr.run(stop))
    try:
        yield exporter
    finally:
        stop.set()
        await asyncio.wait_for(task, 60)
        await client.close()
        await exporter.stop()


def delete_kaiwojobs(admin, ns: str) -> None:
    """Free the ClusterQueue's GPUs for the other tests (the quota is cluster-wide)."""
    for kj in (get(admin, f"{KAIWO}/namespaces/{ns}/kaiwojobs") or {"items": []})["items"]:
        admin.delete(f"{KAIWO}/namespaces/{ns}/kaiwojobs/{kj['metadata']['name']}", params={"propagationPolicy": "Background"})


async def test_on_pressure_reclaims_the_idle_job_for_a_kueue_pending_one(sim_plane, admin, deployed, reclaim_ns, tmp_path):
    async with running_reclaimer(sim_plane, admin, deployed, tmp_path) as exporter:
        await _on_pressure(admin, exporter)


async def _on_pressure(admin, exporter: GpuExporter) -> None:
    try:
        idle, busy = submit(admin, "idle"), submit(admin, "busy")
        pods = await eventually(lambda: (p, q) if (p := running_pod(admin, "idle")) and (q := running_pod(admin, "busy")) else None,
                                timeout=120, what="both KaiwoJobs' Pods running (16 GPUs in use)")
        waiting = submit(admin, "waiting")
        await eventually(lambda: phase(admin, waiting) == "PendingGpu", timeout=60, what="the third KaiwoJob PendingGpu (Kueue quota)")
        exporter.set(NS, pods[0], 1.0, gpus=8)
        exporter.set(NS, pods[1], 90.0, gpus=8)

        await eventually(lambda: phase(admin, idle) == "Preempted", timeout=60, what="the idle KaiwoJob reclaimed")
        rec = record(admin, idle)
        assert rec["status"]["preemptedFor"] == f"{NS}/{owners.record_name('KaiwoJob', 'waiting', waiting['metadata']['uid'])}"
        assert get(admin, f"{KAIWO}/namespaces/{NS}/kaiwojobs/idle") is None or \
            (get(admin, f"{KAIWO}/namespaces/{NS}/kaiwojobs/idle") or {})["metadata"].get("deletionTimestamp")
        assert phase(admin, busy) == "Active" and get(admin, f"{KAIWO}/namespaces/{NS}/kaiwojobs/busy") is not None
        assert record(admin, busy)["status"]["ownerChain"].endswith(" -> Job/busy -> KaiwoJob/busy")
        await eventually(lambda: admitted(admin, "waiting"), timeout=120, what="Kueue admits the waiting KaiwoJob")
        assert phase(admin, busy) != "Preempted"
    finally:
        delete_kaiwojobs(admin, NS)


def owner_record(admin, ns: str, kind: str, obj: dict) -> dict | None:
    rec = get(admin, f"{KAIWO}/namespaces/{ns}/gpuworkloads/{owners.record_name(kind, obj['metadata']['name'], obj['metadata']['uid'])}")
    return rec if rec and (rec.get("status") or {}).get("ownerChain") else None


async def test_kaiwoservice_deployment_and_ray_kaiwojob_owners_are_discovered(sim_plane, admin, deployed, reclaim_ns, tmp_path):
    """The root owner of Pods made by the real controllers: the operator's Deployment for a
    KaiwoService, kube-controller-manager's ReplicaSet for a plain Deployment, KubeRay's
    RayCluster for a Ray KaiwoJob's RayJob. Each gets its GpuWorkload, named after the root."""
    ns = f"{NS}-own"
    r = admin.post("/api/v1/namespaces", json={"metadata": {"name": ns, "annotations": {PREFIX + "grace-period": "1h"}}})
    assert r.status_code == 201, r.text
    meta = {"namespace": ns, "labels": {"app": "gpu-web"}}
    pod = {"metadata": {"labels": {"app": "gpu-web"}}, "spec": {"containers": [
        {"name": "web", "image": "nginx:1.27", "resources": {"limits": {"amd.com/gpu": "1"}}}]}}
    bodies = {
        "KaiwoService": (f"{KAIWO}/namespaces/{ns}/kaiwoservices", {"apiVersion": "kaiwo.silogen.ai/v1alpha1", "kind": "KaiwoService",
            "metadata": {"name": "svc", "namespace": ns}, "spec": {"user": "e2e@example.com", "image": "nginx:1.27", "gpus": 1, "replicas": 1}}),
        "Deployment": (f"/apis/apps/v1/namespaces/{ns}/deployments", {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", **meta}, "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "gpu-web"}}, "template": pod}}),
        "KaiwoJob": (f"{KAIWO}/namespaces/{ns}/kaiwojobs", {"apiVersion": "kaiwo.silogen.ai/v1alpha1", "kind": "KaiwoJob",
            "metadata": {"name": "rayjob", "namespace": ns}, "spec": {"user": "e2e@example.com", "image": "rayproject/ray:2.40.0",
                                                                         "gpus": 1, "ray": True, "entrypoint": "python -c 'print(1)'"}}),
    }
    async with running_reclaimer(sim_plane, admin, deployed, tmp_path):
        try:
            created = {}
            for kind, (path, body) in bodies.items():
                r = admin.post(path, json=body)
                assert r.status_code == 201, r.text
                created[kind] = r.json()
            chains = {}
            for kind, obj in created.items():
                rec = await eventually(lambda kind=kind, obj=obj: owner_record(admin, ns, kind, obj), timeout=180, interval=0.5,
                                       what=f"the GpuWorkload of the {kind}")
                assert rec["spec"]["workloadRef"]["kind"] == kind and rec["spec"]["workloadRef"]["uid"] == obj["metadata"]["uid"], rec["spec"]
                chains[kind] = rec["status"]["ownerChain"]
            assert chains["KaiwoService"].endswith(" -> Deployment/svc -> KaiwoService/svc"), chains
            assert chains["Deployment"].startswith("Pod/web-") and chains["Deployment"].endswith(" -> Deployment/web"), chains
            assert " -> RayCluster/rayjob" in chains["KaiwoJob"] and chains["KaiwoJob"].endswith(" -> RayJob/rayjob -> KaiwoJob/rayjob"), chains
        finally:
            delete_kaiwojobs(admin, ns)
            admin.delete(f"/api/v1/namespaces/{ns}")
