"""A burst of KaiwoJobs into a new namespace creates its LocalQueue with one POST."""

from __future__ import annotations

import asyncio

import pytest

from kaiwo_ctrl.kinds import KAIWOJOBS
from kaiwo_ctrl.runtime.api.client import Client
from kaiwo_ctrl.runtime.manager.manager import Manager
from kaiwo_ctrl.runtime.observe.metrics import Metrics
from kaiwo_ctrl.settings import ensure_config
from kaiwo_ctrl.workloads.reconcile import controller as workloads
from test_workloads_support import TEST_IMAGE, ensure_queue_config, eventually

pytestmark = pytest.mark.integration

N = 500


async def test_burst_of_500_kaiwojobs_makes_one_local_queue_post(control_plane, admin, namespace, monkeypatch):
    monkeypatch.setenv(workloads.IMAGE_ENV, TEST_IMAGE)
    ensure_queue_config(admin)
    client = await Client.from_kubeconfig(str(control_plane.kubeconfig))
    await ensure_config(client)
    sem = asyncio.Semaphore(64)

    async def create(i: int) -> None:
        body = {"apiVersion": "kaiwo.silogen.ai/v1alpha1", "kind": "KaiwoJob", "metadata": {"name": f"burst-{i:03d}"},
                "spec": {"user": "t@example.com", "image": "busybox", "entrypoint": "sleep 1"}}
        async with sem:
            await client.create(KAIWOJOBS, body, namespace)

    # all present before the operator starts: every worker meets the missing LocalQueue at once
    await asyncio.gather(*(create(i) for i in range(N)))

    posts: list[int] = []
    client.hooks.append(lambda m, p, status, _s: posts.append(status) if m == "POST" and "/localqueues" in p
                        and f"/namespaces/{namespace}/" in p else None)
    mgr = Manager(client, metrics=Metrics(), metrics_addr="127.0.0.1:0", health_addr="127.0.0.1:0")
    recs = workloads.setup(mgr, workers=32)
    stop = asyncio.Event()
    task = asyncio.create_task(mgr.run(stop))
    try:
        jobs = recs["KaiwoJob"].shared.children["Job"]
        await eventually(lambda: len(jobs.list(namespace)) >= N, timeout=240, what=f"{N} Jobs")
        assert posts == [201], f"LocalQueue POSTs (status codes): {posts}"
        lq = admin.get(f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{namespace}/localqueues/kaiwo")
        assert lq.status_code == 200
    finally:
        stop.set()
        await asyncio.wait_for(task, 60)
        # The control plane is shared by the session and runs no garbage collector: remove the
        # burst, so later tests' operators do not start with 500 workloads to reconcile.
        for path in (f"/apis/kaiwo.silogen.ai/v1alpha1/namespaces/{namespace}/kaiwojobs",
                     f"/apis/batch/v1/namespaces/{namespace}/jobs"):
            r = admin.delete(path)
            assert r.status_code == 200, r.text
        await client.close()
