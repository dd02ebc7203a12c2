"""The autoscaler finds the proxy replicas as Pods (the in-cluster default) and sums their load.

Two managers with a proxy each run in this process; their metrics servers
listen on 127.0.0.31 and 127.0.0.32 with the same port, and two Pods labelled
like the operator's, made Ready with those podIPs, stand for them.
"""

from __future__ import annotations

import asyncio
import uuid

import aiohttp
import pytest

from kaiwo_ctrl.runtime.api.client import Client
from kaiwo_ctrl.runtime.manager.manager import Manager
from kaiwo_ctrl.runtime.observe.metrics import Metrics
from kaiwo_ctrl.serving.autoscale.autoscaler import AutoscalerConfig
from kaiwo_ctrl.serving.autoscale.setup import setup_autoscaler
from kaiwo_ctrl.serving.command import DEFAULT_PEER_SELECTOR
from kaiwo_ctrl.serving.proxy.server import setup_proxy
from proxy_support import backends, create_model, free_port, get_model, server_pod, set_pod_ready  # noqa: F401
from support import eventually

pytestmark = pytest.mark.integration


async def test_peers_are_discovered_from_pods(control_plane, admin, namespace, backends):
    hosts = ["127.0.0.31", "127.0.0.32"]
    port = free_port(hosts[0])
    b = await backends("disc")
    b.hold.clear()
    create_model(admin, namespace, "disc", replicas=1, minReplicas=1, maxReplicas=4, targetRequests=1, scaleDownDelaySeconds=0)
    server_pod(admin, namespace, "disc", b)
    for i, h in enumerate(hosts):
        name = f"kaiwo-ctrl-{i}"
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "namespace": namespace, "labels": {"app.kubernetes.io/name": "kaiwo-ctrl"}},
               "spec": {"containers": [{"name": "manager", "image": "kaiwo-ctrl"}]}}
        assert admin.post(f"/api/v1/namespaces/{namespace}/pods", json=pod).status_code == 201
        set_pod_ready(admin, namespace, name, h)

    mgrs, tasks, stop = [], [], asyncio.Event()
    servers = []
    for i, h in enumerate(hosts):
        client = await Client.from_kubeconfig(str(control_plane.kubeconfig))
        mgr = Manager(client, metrics=Metrics(), metrics_addr=f"{h}:{port}", health_addr="127.0.0.1:0")
        server = setup_proxy(mgr, "127.0.0.1:0", auth=None)  # not about callers: the open proxy (--proxy-auth none)
        if i == 0:
            cfg = AutoscalerConfig(interval=0.5, time_window=2, state_configmap=f"st-{uuid.uuid4().hex[:6]}", namespace=namespace)
            setup_autoscaler(mgr, cfg, peer_selector=DEFAULT_PEER_SELECTOR, peer_port=port, self_proxy=True)
        mgrs.append(mgr)
        servers.append(server)
        tasks.append(asyncio.create_task(mgr.run(stop)))
    http = aiohttp.ClientSession()
    held: list[asyncio.Task] = []
    try:
        for s in servers:
            await asyncio.wait_for(s.started.wait(), 60)
        for s in servers:
            await eventually(lambda s=s: s.handler.tracker.groups.get((namespace, "disc")) and
                             s.handler.tracker.groups[(namespace, "disc")].endpoints, what="endpoint seen")

        async def call(p: int) -> int:
            async with http.post(f"http://127.0.0.1:{p}/openai/v1/completions", json={"model": "disc", "prompt": "x"}) as r:
                await r.read()
                return r.status

        for s in servers:
            held += [asyncio.create_task(call(s.port)) for _ in range(2)]
        await eventually(lambda: b.held == 4, what="4 requests held")
        # 2 active at each proxy, 1 request per replica: only both together give 4
        await eventually(lambda: get_model(admin, namespace, "disc")["spec"]["replicas"] == 4, timeout=60,
                         what="scaled to 4 from the load of both discovered proxies", interval=0.3)
        b.hold.set()
        assert [await t for t in held] == [200] * 4
        await eventually(lambda: get_model(admin, namespace, "disc")["spec"]["replicas"] == 1, timeout=60,
                         what="scaled back down", interval=0.3)
    finally:
        b.hold.set()
        await asyncio.gather(*held, return_exceptions=True)
        await http.close()
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
