"""Controller + manager on a real kube-apiserver, with the demo mirror controller."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from kaiwo_ctrl.runtime.api.client import Client
from kaiwo_ctrl.runtime.control.handler import Request
from kaiwo_ctrl.runtime.manager.manager import Manager
from kaiwo_ctrl.runtime.observe.metrics import Metrics
from kaiwo_ctrl.runtime.control.ratelimit import ItemExponentialFailureRateLimiter
from support import eventually
from support.demo import FAIL, LABEL, add_demo_controller

pytestmark = pytest.mark.integration


@pytest.fixture
async def manager(control_plane):
    client = await Client.from_kubeconfig(str(control_plane.kubeconfig))
    mgr = Manager(client, metrics=Metrics(), metrics_addr="127.0.0.1:0", health_addr="127.0.0.1:0")
    rec = add_demo_controller(mgr, rate_limiter=ItemExponentialFailureRateLimiter(base=0.1, cap=10))
    stop = asyncio.Event()
    task = asyncio.create_task(mgr.run(stop))
    await asyncio.wait_for(mgr.is_leader.wait(), 60)
    yield mgr, rec
    stop.set()
    await asyncio.wait_for(task, 60)


def source(name: str, **annotations: str) -> dict:
    return {
        "metadata": {"name": name, "labels": {LABEL: "mirror"}, "annotations": annotations},
        "data": {"k": "v"},
    }


async def test_reconciles_and_unchanged_reconcile_writes_nothing(manager, admin, namespace):
    mgr, rec = manager
    admin.post(f"/api/v1/namespaces/{namespace}/configmaps", json=source("src"))
    url = f"/api/v1/namespaces/{namespace}/configmaps/src-mirror"
    mirror = await eventually(lambda: admin.get(url).status_code == 200 and admin.get(url).json(), what="mirror created")
    assert mirror["data"] == {"k": "v"}
    assert mirror["metadata"]["ownerReferences"][0]["name"] == "src"
    assert mirror["metadata"]["ownerReferences"][0]["controller"] is True
    ctl = mgr.controllers[0]
    await eventually(lambda: mgr.cache.informers[0].get("src-mirror", namespace), what="mirror cached")

    def idle() -> bool:
        return len(ctl.queue) == 0 and ctl.queue.waiting_count() == 0 and ctl.active == 0

    await eventually(idle, what="the owner event's reconcile settled")
    writes, count, rv = mgr.client.writes, ctl.reconciles, mirror["metadata"]["resourceVersion"]
    for _ in range(5):
        before = ctl.reconciles
        ctl.enqueue(Request(namespace, "src"))
        await eventually(lambda before=before: ctl.reconciles > before and idle(), what="the enqueued reconcile ran")
    assert ctl.reconciles >= count + 5
    assert mgr.client.writes == writes, "an unchanged world must cause no write"
    assert admin.get(url).json()["metadata"]["resourceVersion"] == rv
    # a real change is applied
    admin.patch(
        f"/api/v1/namespaces/{namespace}/configmaps/src",
        json={"data": {"k": "v2"}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    await eventually(lambda: admin.get(url).json()["data"] == {"k": "v2"}, what="mirror updated")
    # someone edits the child: the owner is reconciled and the drift repaired
    admin.patch(url, json={"data": {"k": "tampered"}}, headers={"Content-Type": "application/merge-patch+json"})
    await eventually(lambda: admin.get(url).json()["data"] == {"k": "v2"}, what="drift repaired")
    # events are visible the way kubectl describe finds them
    events = await eventually(
        lambda: [
            e
            for e in admin.get(f"/api/v1/namespaces/{namespace}/events").json()["items"]
            if e["involvedObject"]["name"] == "src" and e["reason"] == "Mirrored"
        ],
        what="Mirrored event",
    )
    assert events[0]["type"] == "Normal" and events[0]["source"]["component"] == "demo-mirror"


async def test_failing_reconcile_is_retried_with_growing_delays(manager, admin, namespace):
    mgr, rec = manager
    admin.post(f"/api/v1/namespaces/{namespace}/configmaps", json=source("flaky", **{FAIL: "4"}))
    url = f"/api/v1/namespaces/{namespace}/configmaps/flaky-mirror"
    await eventually(lambda: admin.get(url).status_code == 200, timeout=30, what="mirror after retries")
    # four failures, then the success that wrote the mirror (the mirror's own
    # creation event may add one more, no-op, reconcile after that)
    times = rec.attempts[f"{namespace}/flaky"][:5]
    assert len(times) == 5
    gaps = [b - a for a, b in zip(times, times[1:])]
    # 0.1, 0.2, 0.4, 0.8 s of backoff: each retry waits at least its delay (a
    # slow machine only adds to a gap, so no bound above and no ordering)
    assert all(gap >= 0.1 * 2**i for i, gap in enumerate(gaps)), gaps
    body = mgr.metrics.render().decode()
    assert 'controller_runtime_reconcile_errors_total{controller="demo-mirror"}' in body
    # success forgot the failure history (forget runs once the successful reconcile returns,
    # which can be a moment after the mirror it wrote is visible)
    await eventually(lambda: mgr.controllers[0].queue.num_requeues(Request(namespace, "flaky")) == 0, what="forgotten")


async def test_probes_and_metrics(manager):
    mgr, _ = manager
    async with httpx.AsyncClient() as h:
        hz = await h.get(f"http://127.0.0.1:{mgr.bound['health']}/healthz")
        rz = await h.get(f"http://127.0.0.1:{mgr.bound['health']}/readyz?verbose")
        one = await h.get(f"http://127.0.0.1:{mgr.bound['health']}/readyz/informers-synced")
        metrics = (await h.get(f"http://127.0.0.1:{mgr.bound['metrics']}/metrics")).text
    assert hz.status_code == 200 and hz.text == "ok"
    assert rz.status_code == 200 and "[+]informers-synced ok" in rz.text
    assert one.status_code == 200
    for name in (
        'controller_runtime_reconcile_total{controller="demo-mirror",result="success"}',
        'controller_runtime_max_concurrent_reconciles{controller="demo-mirror"} 4.0',
        'workqueue_depth{controller="demo-mirror",name="demo-mirror"}',
        "rest_client_requests_total{",
        'informer_objects{kind="ConfigMap"}',
    ):
        assert name in metrics, name
