"""An InferencePool kaiwo-ctrl exports, routed by the real endpoint picker through a real Envoy (issue 44).

The Model controller and the InferencePool controller run in a Manager against the real API server, with
``KaiwoConfig.spec.models.inferencePools`` on; the Models' server Pods are stood in for by fake vLLM engines
on loopback addresses (their ``podIP``), on the port the pool names, reporting vLLM's metrics. One picker
and one Envoy per pool, as a Gateway runs them. Asserted by who received what: a request to a pool's Envoy
reaches a Ready Pod of that Model and never another Model's, and a Pod the Model scales up to is picked.

Opt-in (``-m real_gateway``, ``./hack/test.sh --real-gateway``): the parts are built and installed by
``hack/real-gateway.sh``.
"""

from __future__ import annotations

import uuid

import httpx
import pytest

from kaiwo_ctrl.kinds import KAIWOCONFIGS
from kaiwo_ctrl.serving import inferencepool
from kaiwo_ctrl.serving.model.engines import PORT
from proxy_support import FakeOpenAI, set_pod_ready
from support import eventually
from support.gateway import binaries, picker_crds, start_envoy, start_picker
from test_serving_support import TEST_CONFIG, serving_manager, create_model, list_pods, models_url, patch_model

pytestmark = [pytest.mark.integration, pytest.mark.real_gateway]

CONFIG = f"{KAIWOCONFIGS.path(None)}/kaiwo"
POOLS = "/apis/inference.networking.k8s.io/v1/namespaces/{ns}/inferencepools"


@pytest.fixture
async def pools_on(control_plane, admin, tmp_path):
    """The Model and InferencePool controllers in a Manager, with the KaiwoConfig's inferencePools on
    (restored after)."""
    import yaml

    before = admin.get(CONFIG)
    if before.status_code == 404:
        r = admin.post(KAIWOCONFIGS.path(None), json={"apiVersion": KAIWOCONFIGS.api_version, "kind": "KaiwoConfig",
                                                      "metadata": {"name": "kaiwo"}, "spec": {"models": {"inferencePools": True}}})
    else:
        r = admin.patch(CONFIG, json={"spec": {"models": {"inferencePools": True}}},
                        headers={"Content-Type": "application/merge-patch+json"})
    assert r.status_code in (200, 201), r.text
    path = tmp_path / "model-config.yaml"
    path.write_text(yaml.safe_dump(TEST_CONFIG))
    async with serving_manager(control_plane, path, also=inferencepool.setup) as mgr:
        yield mgr.also
    if before.status_code == 404:
        admin.delete(CONFIG)
    else:
        admin.patch(CONFIG, json={"spec": {"models": {"inferencePools": (before.json()["spec"].get("models") or {}).get("inferencePools")}}},
                    headers={"Content-Type": "application/merge-patch+json"})


async def _stand_in(admin, ns: str, model: str, pod: dict, host: str) -> FakeOpenAI:
    """A fake vLLM engine on ``host`` at the pool's port, as the Ready server Pod ``pod`` of ``model``."""
    engine = FakeOpenAI(f"{model}@{host}", host)
    engine.engine = True  # answers /metrics with vLLM's series, as the picker scrapes them
    await engine.start(port=PORT)
    set_pod_ready(admin, ns, pod["metadata"]["name"], host)
    return engine


async def _complete(port: int, model: str) -> httpx.Response:
    """A completion through Envoy (async: the fake engines answer on this test's event loop)."""
    async with httpx.AsyncClient(timeout=30) as c:
        return await c.post(f"http://127.0.0.1:{port}/v1/completions", json={"model": model, "prompt": "hello", "max_tokens": 4})


async def _ok(port: int, model: str) -> httpx.Response | None:
    r = await _complete(port, model)
    return r if r.status_code == 200 else None


async def test_a_pool_routes_only_to_its_models_ready_pods_and_sees_a_new_one(pools_on, control_plane, admin, namespace, tmp_path):
    epp_bin, envoy_bin = binaries()
    control_plane.install_crds(picker_crds(epp_bin))
    ns = namespace
    a, b = f"alpha-{uuid.uuid4().hex[:4]}", f"beta-{uuid.uuid4().hex[:4]}"
    create_model(admin, ns, a, minReplicas=1)
    create_model(admin, ns, b, minReplicas=1)
    for m in (a, b):  # the pools kaiwo-ctrl exported
        pool = await eventually(lambda m=m: (r := admin.get(f"{POOLS.format(ns=ns)}/{m}")).status_code == 200 and r.json(),
                                timeout=60, what=f"InferencePool {m}")
        assert pool["spec"]["selector"]["matchLabels"] == {"app": "model", "model": m}
        assert pool["spec"]["targetPorts"] == [{"number": PORT}]
    pods = {m: await eventually(lambda m=m: list_pods(admin, ns, m) or None, timeout=60, what=f"server Pod of {m}")
            for m in (a, b)}
    hosts = iter(f"127.0.0.{i}" for i in range(231, 240))
    engines = {m: [await _stand_in(admin, ns, m, pods[m][0], next(hosts))] for m in (a, b)}
    started = []
    try:
        picker_a, grpc_a = start_picker(epp_bin, control_plane.kubeconfig, ns, a, tmp_path)
        started.append(picker_a)
        envoy_a, port_a = start_envoy(envoy_bin, grpc_a, tmp_path, a)
        started.append(envoy_a)
        picker_b, grpc_b = start_picker(epp_bin, control_plane.kubeconfig, ns, b, tmp_path)
        started.append(picker_b)
        envoy_b, port_b = start_envoy(envoy_bin, grpc_b, tmp_path, b)
        started.append(envoy_b)

        # the picker needs a moment to list the pool's Pods and scrape them: a request before answers 5xx
        r = await eventually(lambda: _ok(port_a, a), timeout=60, what=f"a request through Envoy to pool {a}")
        assert r.json()["server"] == engines[a][0].name
        r = await eventually(lambda: _ok(port_b, b), timeout=60, what=f"a request through Envoy to pool {b}")
        assert r.json()["server"] == engines[b][0].name
        for _ in range(10):
            assert (await _complete(port_a, a)).json()["server"] == engines[a][0].name
        # who received what: pool a's requests only at a's Pod, pool b's only at b's
        assert engines[a][0].requests and engines[b][0].requests
        assert len(engines[a][0].requests) == 11 and len(engines[b][0].requests) == 1
        assert all(r["path"] == "/v1/completions" for e in (*engines[a], *engines[b]) for r in e.requests)

        # the Model scales to 2: the picker sees the new Pod once it is Ready, and sends it requests
        patch_model(admin, ns, a, {"spec": {"replicas": 2, "minReplicas": 2}})
        known = {pods[a][0]["metadata"]["name"]}
        new = await eventually(lambda: [p for p in list_pods(admin, ns, a) if p["metadata"]["name"] not in known] or None,
                               timeout=60, what="the second Pod of the scaled Model")
        engines[a].append(await _stand_in(admin, ns, a, new[0], next(hosts)))

        async def reached_new() -> bool:
            await _complete(port_a, a)
            return bool(engines[a][1].requests)

        await eventually(reached_new, timeout=60, interval=0.2, what="a request at the new Pod")
        assert not engines[b][0].requests[1:], "pool b's Pod got pool a's traffic"
        assert {(await _complete(port_b, b)).json()["server"] for _ in range(5)} == {engines[b][0].name}
    finally:
        for p in reversed(started):
            p.stop()
        for es in engines.values():
            for e in es:
                await e.stop()
    assert admin.get(models_url(ns, a)).status_code == 200
