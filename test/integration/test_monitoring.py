"""GPU utilization monitoring on the real kube-apiserver: the resource
monitor scrapes a local Prometheus exposition server (standing in for the GPU
metrics exporter, an external system), maps samples to Pods created with the
Kaiwo labels, sets the ResourceUnderutilization condition and emits
GpuUtilizationLow events, flags underutilised workloads for termination (the
workload controller in the same manager then terminates them), and writes
nothing when nothing changed."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web

from kaiwo_ctrl import monitoring
from kaiwo_ctrl.runtime.api.client import Client
from kaiwo_ctrl.runtime.manager.manager import LEADER, Manager
from kaiwo_ctrl.runtime.observe.metrics import Metrics
from kaiwo_ctrl.runtime.control.ratelimit import ItemExponentialFailureRateLimiter
from kaiwo_ctrl.settings import ensure_config
from kaiwo_ctrl.workloads.reconcile import controller as workloads
from test_workloads_support import (
    MERGE,
    TEST_IMAGE,
    conditions,
    create_kaiwo,
    ensure_queue_config,
    eventually,
    events_for,
    get,
    status_of,
    wait_status,
)

pytestmark = pytest.mark.integration

CONFIG_URL = "/apis/config.kaiwo.silogen.ai/v1alpha1/kaiwoconfigs/kaiwo"
INTERVAL = "200ms"


class Exporter:
    """A local HTTP server answering /metrics with whatever text is set."""

    def __init__(self) -> None:
        self.text = ""
        self.status = 200
        self.scrapes = 0
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def start(self) -> None:
        async def metrics(_req: web.Request) -> web.Response:
            self.scrapes += 1
            return web.Response(status=self.status, text=self.text, content_type="text/plain")

        app = web.Application()
        app.add_routes([web.get("/metrics", metrics)])
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}/metrics"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def set(self, *samples: tuple[str, str, float, str]) -> None:
        """(namespace, pod, value, gpu_id) samples of gpu_gfx_activity."""
        lines = ["# HELP gpu_gfx_activity GPU activity (percent)", "# TYPE gpu_gfx_activity gauge"]
        for ns, pod, value, gpu in samples:
            lines.append(f'gpu_gfx_activity{{gpu_id="{gpu}",gpu_partition_id="0",namespace="{ns}",pod="{pod}",'
                         f'container="main",hostname="node-1"}} {value}')
        lines += ["# TYPE gpu_power_usage gauge", 'gpu_power_usage{gpu_id="0"} 320.0']
        self.text = "\n".join(lines) + "\n"


@pytest.fixture
async def exporter():
    e = Exporter()
    await e.start()
    yield e
    await e.stop()


@pytest.fixture
def monitoring_config(admin):
    """Set ``spec.resourceMonitoring`` of the session's KaiwoConfig for one
    test; the original is put back afterwards."""
    original = None

    def set_(**fields) -> None:
        nonlocal original
        current = admin.get(CONFIG_URL).json()
        if original is None:
            original = dict(current["spec"].get("resourceMonitoring") or {})
        r = admin.patch(CONFIG_URL, json={"spec": {"resourceMonitoring": fields}}, headers=MERGE)
        assert r.status_code == 200, r.text

    yield set_
    if original is not None:
        current = admin.get(CONFIG_URL).json()["spec"].get("resourceMonitoring") or {}
        restore = {**{k: None for k in current if k not in original}, **original}
        r = admin.patch(CONFIG_URL, json={"spec": {"resourceMonitoring": restore}}, headers=MERGE)
        assert r.status_code == 200, r.text


@pytest.fixture
async def operator_with_monitor(control_plane, admin, monkeypatch, exporter):
    """Workload controllers and the resource monitor in one Manager, the way
    ``build_operator`` wires them (without the queue-config controller)."""
    monkeypatch.setenv(workloads.IMAGE_ENV, TEST_IMAGE)
    ensure_queue_config(admin)
    client = await Client.from_kubeconfig(str(control_plane.kubeconfig))
    await ensure_config(client)
    mgr = Manager(client, metrics=Metrics(), metrics_addr="127.0.0.1:0", health_addr="127.0.0.1:0")
    workloads.setup(mgr, workers=4, rate_limiter=lambda: ItemExponentialFailureRateLimiter(base=0.05, cap=2))
    monitor = monitoring.setup(mgr, environ={
        "RESOURCE_MONITORING_ENABLED": "true",
        "RESOURCE_MONITORING_METRICS_ENDPOINT": exporter.url,
        "RESOURCE_MONITORING_POLLING_INTERVAL": INTERVAL,
    })
    assert monitor is not None
    stop = asyncio.Event()
    task = asyncio.create_task(mgr.run(stop))
    await asyncio.wait_for(mgr.is_leader.wait(), 60)
    await eventually(lambda: monitor.ticks > 0, what="first monitor tick")
    yield mgr, monitor
    stop.set()
    await asyncio.wait_for(task, 60)


def create_pod(admin, ns: str, name: str, workload: dict, type_: str = "job") -> dict:
    meta = workload["metadata"]
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {
            "kaiwo.silogen.ai/run-id": meta["uid"],
            "kaiwo.silogen.ai/type": type_,
            "kaiwo.silogen.ai/name": meta["name"],
        }},
        "spec": {"containers": [{"name": "main", "image": "busybox"}]},
    }
    r = admin.post(f"/api/v1/namespaces/{ns}/pods", json=body)
    assert r.status_code == 201, r.text
    return r.json()


async def wait_ticks(monitor, n: int) -> None:
    start = monitor.ticks
    await eventually(lambda: monitor.ticks >= start + n, what=f"{n} monitor ticks")


async def wait_config(monitor, **fields) -> None:
    """The monitor reads the KaiwoConfig from the cache: wait until it shows the change."""

    def seen() -> bool:
        rm = ((monitor.settings.raw() or {}).get("spec") or {}).get("resourceMonitoring") or {}
        return all(rm.get(k) == v for k, v in fields.items())

    await eventually(seen, what=f"KaiwoConfig resourceMonitoring {fields} in the cache")


def monitor_events(admin, ns: str, name: str, reason: str) -> list[dict]:
    return [e for e in events_for(admin, ns, name)
            if e["reason"] == reason and e["source"].get("component") == "KaiwoResourceMonitor"]


class WriteLog:
    """Every write request the manager's client makes (method, path)."""

    def __init__(self, client: Client) -> None:
        self.calls: list[tuple[str, str]] = []
        client.hooks.append(self)

    def __call__(self, method: str, path: str, status: int, seconds: float) -> None:
        if method in ("POST", "PUT", "PATCH", "DELETE"):
            self.calls.append((method, path))


async def test_low_then_normal_utilisation_and_no_writes_when_nothing_changes(
    operator_with_monitor, admin, namespace, exporter, monitoring_config
):
    mgr, monitor = operator_with_monitor
    monitoring_config(lowUtilizationThreshold=10, targetNamespaces=[namespace], terminateUnderutilized=False)
    await wait_config(monitor, lowUtilizationThreshold=10, targetNamespaces=[namespace])
    kj = create_kaiwo(admin, "KaiwoJob", namespace, "gpu-job", image="busybox", entrypoint="sleep 100")
    await wait_status(admin, "KaiwoJob", namespace, "gpu-job", "PENDING")
    create_pod(admin, namespace, "gpu-job-0", kj)
    create_pod(admin, namespace, "gpu-job-1", kj)
    # a pod of no Kaiwo workload and one outside targetNamespaces: ignored
    r = admin.post(f"/api/v1/namespaces/{namespace}/pods", json={
        "metadata": {"name": "stranger"}, "spec": {"containers": [{"name": "main", "image": "busybox"}]}})
    assert r.status_code == 201, r.text
    await eventually(lambda: monitor.pods.get("gpu-job-1", namespace), what="pods in the shared cache")

    # low: one GPU of one pod below the threshold
    exporter.set((namespace, "gpu-job-0", 55.0, "0"), (namespace, "gpu-job-1", 3.5, "1"),
                 (namespace, "stranger", 0.0, "2"), ("kube-system", "gpu-job-0", 0.0, "3"))
    st = await eventually(
        lambda: (s := status_of(admin, "KaiwoJob", namespace, "gpu-job"))
        and conditions(s).get("ResourceUnderutilization", ("",))[0] == "True" and s,
        what="ResourceUnderutilization=True",
    )
    assert conditions(st)["ResourceUnderutilization"] == (
        "True", "GpuUtilizationLow", "One or more GPUs are underutilizing requested resources")
    assert st["status"] == "PENDING", "the monitor only adds its condition"
    assert conditions(st)["Admitted"][0] == "False", "the workload controller's conditions are kept"
    ev = (await eventually(lambda: monitor_events(admin, namespace, "gpu-job", "GpuUtilizationLow"),
                           what="GpuUtilizationLow event"))[0]
    assert ev["type"] == "Warning"
    assert ev["message"] == "Pod 'gpu-job-1' is underutilizing GPU 1/0"
    assert ev["involvedObject"]["kind"] == "KaiwoJob" and ev["involvedObject"]["uid"] == kj["metadata"]["uid"]
    assert not [e for e in monitor_events(admin, namespace, "gpu-job", "GpuUtilizationLow")
                if "gpu-job-0" in e["message"]], "a pod above the threshold is not reported"

    # normal
    exporter.set((namespace, "gpu-job-0", 55.0, "0"), (namespace, "gpu-job-1", 80.0, "1"))
    st = await eventually(
        lambda: (s := status_of(admin, "KaiwoJob", namespace, "gpu-job"))
        and conditions(s).get("ResourceUnderutilization", ("",))[0] == "False" and s,
        what="ResourceUnderutilization=False",
    )
    assert conditions(st)["ResourceUnderutilization"] == ("False", "GpuUtilizationNormal", "GPU utilization is normal")

    # nothing changes: ticks read the caches and write nothing at all
    await wait_ticks(monitor, 2)  # the cache has caught up with the last write
    await asyncio.sleep(0.5)
    writes, before = WriteLog(mgr.client), monitor.status_writes
    scrapes = exporter.scrapes
    await wait_ticks(monitor, 8)
    assert exporter.scrapes >= scrapes + 8
    assert monitor.status_writes == before
    mine = [c for c in writes.calls if "/kaiwojobs/" in c[1] or "/events" in c[1]]
    assert mine == [], f"an unchanged world must write nothing, got {mine}"
    assert monitor.last_error is None
    # the stored status still holds the workload controller's status untouched
    assert status_of(admin, "KaiwoJob", namespace, "gpu-job")["status"] == "PENDING"


async def test_underutilised_workload_is_flagged_and_terminated(
    operator_with_monitor, admin, namespace, exporter, monitoring_config
):
    mgr, monitor = operator_with_monitor
    monitoring_config(lowUtilizationThreshold=5, targetNamespaces=[namespace], terminateUnderutilized=True,
                      terminateUnderutilizedAfter="1s")
    await wait_config(monitor, terminateUnderutilized=True, terminateUnderutilizedAfter="1s")
    kj = create_kaiwo(admin, "KaiwoJob", namespace, "idle-gpu", image="busybox", entrypoint="sleep 100")
    job_url = f"/apis/batch/v1/namespaces/{namespace}/jobs/idle-gpu"
    await eventually(lambda: get(admin, job_url), what="the Job of the KaiwoJob")
    await wait_status(admin, "KaiwoJob", namespace, "idle-gpu", "PENDING")
    create_pod(admin, namespace, "idle-gpu-0", kj)
    await eventually(lambda: monitor.pods.get("idle-gpu-0", namespace), what="pod in the shared cache")
    # a busy workload next to it is left running
    busy = create_kaiwo(admin, "KaiwoJob", namespace, "busy-gpu", image="busybox", entrypoint="sleep 100")
    create_pod(admin, namespace, "busy-gpu-0", busy)
    await eventually(lambda: monitor.pods.get("busy-gpu-0", namespace), what="busy pod in the shared cache")

    exporter.set((namespace, "idle-gpu-0", 0.0, "0"), (namespace, "busy-gpu-0", 97.0, "1"))
    st = await wait_status(admin, "KaiwoJob", namespace, "idle-gpu", "TERMINATED", timeout=60)
    c = conditions(st)
    assert c["WorkloadTerminatedEarly"] == (
        "True", "GpuUtilizationLow", "Terminating workload due to underutilized GPU resources")
    assert c["ResourceUnderutilization"][:2] == ("True", "GpuUtilizationLow")
    # the monitor flagged it (TERMINATING), the workload controller terminated it
    flagged = await eventually(lambda: monitor_events(admin, namespace, "idle-gpu", "WorkloadTermination"),
                               what="WorkloadTermination event from the monitor")
    assert flagged[0]["type"] == "Normal"
    terminated = await eventually(
        lambda: [e for e in events_for(admin, namespace, "idle-gpu")
                 if e["reason"] == "GpuUtilizationLow" and e["source"].get("component") == "kaiwojob-controller"],
        what="Warning event from the workload controller",
    )
    assert terminated[0]["type"] == "Warning"
    assert terminated[0]["message"] == "Terminating workload due to underutilized GPU resources"

    def deleted_or_deleting() -> bool:
        job = get(admin, job_url)
        return job is None or bool(job["metadata"].get("deletionTimestamp"))

    await eventually(deleted_or_deleting, what="the Job deleted")

    # terminal: the monitor leaves it alone from now on
    await wait_ticks(monitor, 3)
    writes = WriteLog(mgr.client)
    await wait_ticks(monitor, 5)
    assert not [w for w in writes.calls if "/kaiwojobs/idle-gpu" in w[1]]
    busy_st = status_of(admin, "KaiwoJob", namespace, "busy-gpu")
    assert busy_st["status"] != "TERMINATED"
    assert conditions(busy_st)["ResourceUnderutilization"][:2] == ("False", "GpuUtilizationNormal")


async def test_failing_or_broken_exporter_skips_ticks_and_keeps_running(
    operator_with_monitor, admin, namespace, exporter, monitoring_config
):
    mgr, monitor = operator_with_monitor
    monitoring_config(targetNamespaces=[namespace])
    await wait_config(monitor, targetNamespaces=[namespace])
    kj = create_kaiwo(admin, "KaiwoJob", namespace, "w", image="busybox", entrypoint="sleep 100")
    await wait_status(admin, "KaiwoJob", namespace, "w", "PENDING")
    create_pod(admin, namespace, "w-0", kj)
    await eventually(lambda: monitor.pods.get("w-0", namespace), what="pod in the shared cache")

    exporter.set((namespace, "w-0", 0.0, "0"))
    exporter.status = 503
    await wait_ticks(monitor, 3)
    assert monitor.last_error == "scrape answered 503"
    exporter.status = 200
    exporter.text = "gpu_gfx_activity{namespace=broken 1\n"
    await wait_ticks(monitor, 3)
    assert "unparseable" in (monitor.last_error or "")
    assert "ResourceUnderutilization" not in conditions(status_of(admin, "KaiwoJob", namespace, "w"))

    exporter.set((namespace, "w-0", 0.0, "0"))
    await eventually(
        lambda: "ResourceUnderutilization" in conditions(status_of(admin, "KaiwoJob", namespace, "w")),
        what="the monitor recovers once the exporter answers properly",
    )
    assert not any(t.done() for t in mgr._tasks[LEADER]), "the runnable is still alive"


async def test_build_operator_registers_the_monitor_only_when_enabled(control_plane, monkeypatch):
    from kaiwo_ctrl.operator import build_operator

    async def build(env: dict[str, str]) -> Manager:
        for k in ("RESOURCE_MONITORING_ENABLED", "RESOURCE_MONITORING_METRICS_ENDPOINT",
                  "RESOURCE_MONITORING_POLLING_INTERVAL"):
            monkeypatch.delenv(k, raising=False)
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        client = await Client.from_kubeconfig(str(control_plane.kubeconfig))
        mgr = Manager(client, metrics=Metrics(), metrics_addr=None, health_addr=None)
        try:
            await build_operator(mgr, workers=1)
        finally:
            await client.close()
        return mgr

    off = await build({})
    assert "resource-monitor" not in [n for n, _ in off._runnables[LEADER]]
    on = await build({"RESOURCE_MONITORING_ENABLED": "true",
                      "RESOURCE_MONITORING_METRICS_ENDPOINT": "http://127.0.0.1:5000/metrics",
                      "RESOURCE_MONITORING_POLLING_INTERVAL": "10s"})
    assert "resource-monitor" in [n for n, _ in on._runnables[LEADER]]
    assert on.resource_monitor.interval == 10.0
    with pytest.raises(monitoring.MonitoringConfigError, match="RESOURCE_MONITORING_METRICS_ENDPOINT"):
        await build({"RESOURCE_MONITORING_ENABLED": "true", "RESOURCE_MONITORING_POLLING_INTERVAL": "10s"})
