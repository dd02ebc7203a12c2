"""Shared arrangement for the KaiwoJob / KaiwoService integration tests.

Everything runs against the session's real kube-apiserver. There is no
controller-manager, Kueue or KubeRay, so the tests play those parts by
patching child statuses and creating Kueue Workloads by hand.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import httpx
import pytest

from kaiwo_ctrl.local.controlplane import Process, free_port

from kaiwo_ctrl.runtime.api.client import Client
from kaiwo_ctrl.runtime.manager.manager import Manager
from kaiwo_ctrl.runtime.observe.metrics import Metrics
from kaiwo_ctrl.runtime.control.ratelimit import ItemExponentialFailureRateLimiter
from kaiwo_ctrl.settings import ensure_config
from kaiwo_ctrl.workloads.reconcile import controller as workloads
from support import eventually

MERGE = {"Content-Type": "application/merge-patch+json"}
KAIWO = "/apis/kaiwo.silogen.ai/v1alpha1"
KUEUE = "/apis/kueue.x-k8s.io/v1beta2"
TEST_IMAGE = "registry.example/kaiwo-ctrl:test"
TEAM_QUEUE = "team-only"


def ensure(admin, url: str, body: dict) -> dict:
    r = admin.post(url, json=body)
    assert r.status_code in (201, 409), r.text
    name = body["metadata"]["name"]
    return admin.get(f"{url}/{name}").json()


def ensure_queue_config(admin) -> None:
    """KaiwoQueueConfig ``kaiwo`` listing ClusterQueue ``kaiwo`` (any namespace)
    and ``team-only`` (restricted to a namespace no test uses), plus the
    ClusterQueue ``kaiwo`` a LocalQueue can point at. Shared by the session:
    created if missing, entries added if missing, never deleted."""
    url = f"{KAIWO}/kaiwoqueueconfigs"
    qc = ensure(admin, url, {"apiVersion": "kaiwo.silogen.ai/v1alpha1", "kind": "KaiwoQueueConfig",
                             "metadata": {"name": "kaiwo"}, "spec": {}})
    entries = list((qc.get("spec") or {}).get("clusterQueues") or [])
    names = {e.get("name") for e in entries}
    wanted = [{"name": "kaiwo", "spec": {}}, {"name": TEAM_QUEUE, "namespaces": ["team-namespace"], "spec": {}}]
    missing = [e for e in wanted if e["name"] not in names]
    if missing:
        r = admin.patch(f"{url}/kaiwo", json={"spec": {"clusterQueues": entries + missing}}, headers=MERGE)
        assert r.status_code == 200, r.text
    ensure(admin, f"{KUEUE}/clusterqueues", {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
                                             "metadata": {"name": "kaiwo"}, "spec": {}})


@pytest.fixture
async def operator(control_plane, admin, monkeypatch, request):
    """The workload controllers in a Manager, as ``kaiwo-ctrl run`` wires them.
    A test module may set ``WORKLOAD_KINDS`` to run kinds of its own."""
    monkeypatch.setenv(workloads.IMAGE_ENV, TEST_IMAGE)
    ensure_queue_config(admin)
    client = await Client.from_kubeconfig(str(control_plane.kubeconfig))
    await ensure_config(client)
    mgr = Manager(client, metrics=Metrics(), metrics_addr="127.0.0.1:0", health_addr="127.0.0.1:0")
    recs = workloads.setup(mgr, workers=4, rate_limiter=lambda: ItemExponentialFailureRateLimiter(base=0.05, cap=2),
                           kinds=getattr(request.module, "WORKLOAD_KINDS", None))
    stop = asyncio.Event()
    task = asyncio.create_task(mgr.run(stop))
    await asyncio.wait_for(mgr.is_leader.wait(), 60)
    await eventually(lambda: all(c._tasks for c in mgr.controllers), what="controllers started")
    mgr.reconcilers = recs  # type: ignore[attr-defined]
    yield mgr
    stop.set()
    await asyncio.wait_for(task, 60)


@pytest.fixture
async def garbage_collector(control_plane):
    """Kubernetes' garbage collector (kube-controller-manager with only that
    controller), started for one test and stopped after it; ready once its
    health endpoint answers."""
    port = free_port()
    kubeconfig = control_plane.add_user("gc-test", ("system:masters",))
    proc = Process(
        "gc-test",
        [
            str(control_plane.assets.binary("kube-controller-manager")),
            f"--kubeconfig={kubeconfig}",
            "--leader-elect=false",
            "--controllers=garbage-collector-controller,persistentvolumeclaim-protection-controller",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
        ],
        control_plane.directory / "logs" / "gc-test.log",
    )
    proc.start()

    async def healthy() -> bool:
        assert proc.alive(), proc.log_tail()
        try:
            async with httpx.AsyncClient(verify=False, timeout=2) as c:  # its own self-signed cert
                return (await c.get(f"https://127.0.0.1:{port}/healthz")).status_code == 200
        except httpx.HTTPError:
            return False

    await eventually(healthy, timeout=60, interval=0.2, what="kube-controller-manager healthy")
    yield proc
    proc.stop()


def make_gpu_nodes(admin, vendor: str = "amd", count: int = 2) -> list[str]:
    """Simulated 8-GPU nodes of a vendor, labelled as node-pool discovery would."""
    pool, key, product = {
        "amd": ("amd-mi300x-8gpu-128core-1024gi", "amd.com/gpu", ("amd.com/gpu.product-name", "AMD_Instinct_MI300X")),
        "nvidia": ("nvidia-a100-8gpu-96core-1024gi", "nvidia.com/gpu", ("nvidia.com/gpu.product", "NVIDIA-A100")),
    }[vendor]
    names = []
    for i in range(count):
        name = f"{vendor}-gpu-{uuid.uuid4().hex[:6]}-{i}"
        labels = {"kaiwo/nodepool": pool, "kaiwo/gpu-model": pool.split("-")[1], product[0]: product[1],
                  "kubernetes.io/hostname": name}
        r = admin.post("/api/v1/nodes", json={"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}})
        assert r.status_code == 201, r.text
        cap = {key: "8", "cpu": "128", "memory": "1024Gi", "pods": "110"}
        r = admin.patch(f"/api/v1/nodes/{name}/status", json={"status": {"capacity": cap, "allocatable": cap}}, headers=MERGE)
        assert r.status_code == 200, r.text
        names.append(name)
    return names


@pytest.fixture
def gpu_nodes(admin):
    """Two simulated AMD MI300X nodes with 8 GPUs each (deleted afterwards)."""
    names = make_gpu_nodes(admin)
    yield names
    for name in names:
        admin.delete(f"/api/v1/nodes/{name}")


# --------------------------------------------------------------------------- objects


def kaiwo_url(kind: str, ns: str, name: str | None = None) -> str:
    plural = {"KaiwoJob": "kaiwojobs", "KaiwoService": "kaiwoservices"}[kind]
    base = f"{KAIWO}/namespaces/{ns}/{plural}"
    return f"{base}/{name}" if name else base


def create_kaiwo(admin, kind: str, ns: str, name: str, **spec: Any) -> dict:
    spec.setdefault("user", "test@amd.com")
    body = {"apiVersion": "kaiwo.silogen.ai/v1alpha1", "kind": kind, "metadata": {"name": name}, "spec": spec}
    r = admin.post(kaiwo_url(kind, ns), json=body)
    assert r.status_code == 201, r.text
    return r.json()


def get(admin, url: str) -> dict | None:
    r = admin.get(url)
    return r.json() if r.status_code == 200 else None


def status_of(admin, kind: str, ns: str, name: str) -> dict:
    return (get(admin, kaiwo_url(kind, ns, name)) or {}).get("status") or {}


def conditions(status: dict) -> dict[str, tuple[str, str, str]]:
    return {c["type"]: (c["status"], c["reason"], c["message"]) for c in status.get("conditions") or []}


async def wait_status(admin, kind: str, ns: str, name: str, want: str, timeout: float = 30) -> dict:
    return await eventually(
        lambda: (s := status_of(admin, kind, ns, name)).get("status") == want and s,
        timeout=timeout,
        what=f"{kind} {name} status {want} (now {status_of(admin, kind, ns, name).get('status')!r})",
    )


async def wait_object(admin, url: str, timeout: float = 30, what: str = "") -> dict:
    return await eventually(lambda: get(admin, url), timeout=timeout, what=what or url)


def events_for(admin, ns: str, name: str) -> list[dict]:
    items = admin.get(f"/api/v1/namespaces/{ns}/events").json()["items"]
    return [e for e in items if e["involvedObject"]["name"] == name]


async def wait_event(admin, ns: str, name: str, reason: str, timeout: float = 20) -> dict:
    found = await eventually(
        lambda: [e for e in events_for(admin, ns, name) if e["reason"] == reason],
        timeout=timeout,
        what=f"event {reason} on {name}",
    )
    return found[0]


def patch_status(admin, url: str, status: dict) -> dict:
    r = admin.patch(url + "/status", json={"status": status}, headers=MERGE)
    assert r.status_code == 200, r.text
    return r.json()


def admit(admin, ns: str, owner: dict, *, admitted: bool = True, name: str | None = None) -> dict:
    """Play Kueue: a Workload for ``owner`` (labelled with its UID, owned by
    it) whose Admitted condition is set as asked."""
    meta = owner["metadata"]
    name = name or f"{owner['kind'].lower()}-{meta['name']}-{meta['uid'][:5]}"
    body = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": name,
            "labels": {"kueue.x-k8s.io/job-uid": meta["uid"]},
            "ownerReferences": [
                {"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": meta["name"], "uid": meta["uid"],
                 "controller": True, "blockOwnerDeletion": True}
            ],
        },
        "spec": {
            "queueName": "kaiwo",
            "podSets": [{"name": "main", "count": 1,
                         "template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}}],
        },
    }
    url = f"{KUEUE}/namespaces/{ns}/workloads"
    r = admin.post(url, json=body)
    assert r.status_code in (201, 409), r.text
    cond = {
        "type": "Admitted",
        "status": "True" if admitted else "False",
        "reason": "Admitted" if admitted else "Pending",
        "message": "by test",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }
    return patch_status(admin, f"{url}/{name}", {"conditions": [cond]})


def job_condition(type_: str) -> dict:
    return {"type": type_, "status": "True", "reason": "ByTest", "message": "by test",
            "lastTransitionTime": "2026-01-01T00:00:00Z", "lastProbeTime": "2026-01-01T00:00:00Z"}


def complete_job(admin, url: str) -> dict:
    """Play the Job controller: a succeeded Job (the API server requires
    SuccessCriteriaMet before Complete, and start/completion times)."""
    return patch_status(admin, url, {
        "startTime": "2026-01-01T00:00:00Z",
        "completionTime": "2026-01-01T00:01:00Z",
        "succeeded": 1,
        "active": 0,
        "ready": 0,
        "conditions": [job_condition("SuccessCriteriaMet"), job_condition("Complete")],
    })


def fail_job(admin, url: str) -> dict:
    return patch_status(admin, url, {
        "startTime": "2026-01-01T00:00:00Z",
        "failed": 1,
        "active": 0,
        "ready": 0,
        "conditions": [job_condition("FailureTarget"), job_condition("Failed")],
    })


__all__ = [
    "KAIWO",
    "KUEUE",
    "MERGE",
    "TEAM_QUEUE",
    "TEST_IMAGE",
    "admit",
    "complete_job",
    "conditions",
    "create_kaiwo",
    "ensure_queue_config",
    "eventually",
    "events_for",
    "fail_job",
    "get",
    "gpu_nodes",
    "kaiwo_url",
    "make_gpu_nodes",
    "operator",
    "patch_status",
    "status_of",
    "wait_event",
    "wait_object",
    "wait_status",
]


def job_url(ns: str, name: str) -> str:
    return f"/apis/batch/v1/namespaces/{ns}/jobs/{name}"


def dep_url(ns: str, name: str) -> str:
    return f"/apis/apps/v1/namespaces/{ns}/deployments/{name}"


def container(obj: dict) -> dict:
    """The first container of a Job's or Deployment's pod template."""
    return obj["spec"]["template"]["spec"]["containers"][0]


def env_of(c: dict) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in c.get("env") or []}
