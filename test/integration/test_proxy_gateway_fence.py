"""The proxy's Gateway listener on a real apiserver: the route the operator makes
for namespace A reaches A's Model; whatever a tenant B's own HTTPRoute could send
(A's paths, the body-named /openai/v1 route, B's token with A's namespace, A's
model named in the body) never does, and tells nothing of what A has."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid

import aiohttp

import orjson
import pytest

from kaiwo_ctrl.aim.routes import desired_route
from kaiwo_ctrl.runtime.api.client import Client
from kaiwo_ctrl.runtime.manager.manager import Manager
from kaiwo_ctrl.runtime.observe.metrics import Metrics
from kaiwo_ctrl.aim import fence
from kaiwo_ctrl.serving.proxy.server import setup_proxy
from support import eventually
from proxy_support import Proxy, backends, create_model, server_pod  # noqa: F401 - fixtures

pytestmark = pytest.mark.integration

#: Model names of their own: other tests resolve unqualified names across every namespace
M, BM, TWIN = "fence-m", "fence-bm", "fence-twin"
NOT_FOUND = {"error": {"message": "not found", "type": "not_found_error", "code": 404}}


def _namespace(admin, prefix: str) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    assert admin.post("/api/v1/namespaces", json={"metadata": {"name": name}}).status_code == 201
    return name


@pytest.fixture
async def fenced(control_plane, admin):
    """The proxy with its Gateway listener; its route key made in a fresh operator namespace."""
    op_ns = _namespace(admin, "op")
    client = await Client.from_kubeconfig(str(control_plane.kubeconfig))
    mgr = Manager(client, metrics=Metrics(), metrics_addr="127.0.0.1:0", health_addr="127.0.0.1:0")
    server = setup_proxy(mgr, "127.0.0.1:0", gateway_bind="127.0.0.1:0", operator_ns=op_ns, auth=None)  # the route token only
    stop = asyncio.Event()
    task = asyncio.create_task(mgr.run(stop))
    await asyncio.wait_for(server.gateway_started.wait(), 60)
    p = Proxy(mgr, server, f"http://127.0.0.1:{server.gateway_port}")
    p.op_ns = op_ns  # type: ignore[attr-defined]
    p.inner = f"http://127.0.0.1:{server.port}"  # type: ignore[attr-defined]
    yield p
    await p.http.close()
    stop.set()
    await asyncio.wait_for(task, 60)


def _key(admin, op_ns: str) -> bytes:
    r = admin.get(f"/api/v1/namespaces/{op_ns}/secrets/{fence.KEY_SECRET}")
    assert r.status_code == 200, r.text
    return fence.key_of(r.json())


def _uid(admin, ns: str) -> str:
    return admin.get(f"/api/v1/namespaces/{ns}").json()["metadata"]["uid"]


def _route_headers(key: bytes, ns: str, model: str, uid: str) -> dict[str, str]:
    """The headers the operator's HTTPRoute for ``ns/model`` makes a Gateway set (``uid``: the namespace's)."""
    m = {"apiVersion": "kubeai.org/v1", "kind": "Model", "metadata": {"name": model, "namespace": ns, "uid": "u"}}
    config = {"metadata": {"name": "aim", "namespace": ns}, "spec": {"gateway": {"name": "gw"}}}
    route = desired_route(m, config, "kaiwo-system", fence.route_token(key, ns, uid))
    (rule,) = route["spec"]["rules"]
    assert rule["matches"][0]["path"]["value"] == f"/{ns}/{model}"
    return {h["name"]: h["value"] for f in rule["filters"] for h in f["requestHeaderModifier"]["set"]}


async def test_a_tenant_route_aimed_at_another_namespace_is_refused(fenced, admin, backends):
    a, b = _namespace(admin, "ta"), _namespace(admin, "tb")
    for ns, name in ((a, M), (b, BM), (b, TWIN), (a, TWIN)):
        create_model(admin, ns, name, autoscalingDisabled=True)
    back = {(ns, name): await backends(f"{ns}-{name}") for ns, name in ((a, M), (b, BM), (a, TWIN), (b, TWIN))}
    for (ns, name), srv in back.items():
        server_pod(admin, ns, name, srv)
        await fenced.wait_endpoints(ns, name, 1)

    # the key was made once by the proxy; a second reader gets the same one
    key = _key(admin, fenced.op_ns)
    assert await fence.ensure_route_key(fenced.mgr.client, fenced.op_ns) == key
    ua, ub = _uid(admin, a), _uid(admin, b)
    a_route, b_route = _route_headers(key, a, M, ua), _route_headers(key, b, BM, ub)

    # the operator-made route for A reaches A's Model; the token goes no further than the proxy
    code, _, raw = await fenced.post(f"/{a}/{M}/v1/chat/completions", {"model": M, "messages": []}, headers=dict(a_route))
    assert code == 200 and orjson.loads(raw)["server"] == f"{a}-{M}", raw
    assert fence.TOKEN_HEADER.lower() not in {h.lower() for h in back[(a, M)].requests[-1]["headers"]}
    # and B's reaches B's
    code, _, raw = await fenced.post(f"/{b}/{BM}/v1/completions", {"model": BM, "prompt": "x"}, headers=dict(b_route))
    assert code == 200 and orjson.loads(raw)["server"] == f"{b}-{BM}", raw

    served_a = len(back[(a, M)].requests)
    hostile = {
        # B's own route, rewritten to A's path: without a token, or with B's
        "A's path, no token": (f"/{a}/{M}/v1/chat/completions", {"model": M}, {}),
        "A's path, B's token": (f"/{a}/{M}/v1/chat/completions", {"model": M}, b_route),
        "A's path, B's token, A's model qualified": (f"/{a}/{M}/v1/chat/completions", {"model": f"{a}/{M}"}, b_route),
        # rewritten to the body-named route, with A's model in the body
        "/openai/v1, A's model in the body, B's token": ("/openai/v1/chat/completions", {"model": f"{a}/{M}"}, b_route),
        "/openai/v1, A's model in the body, A's token": ("/openai/v1/chat/completions", {"model": f"{a}/{M}"}, a_route),
        "/openai/v1, A's model unqualified": ("/openai/v1/completions", {"model": M}, b_route),
        "token of a namespace named like the path": (f"/{a}/{M}/v1/completions", {"model": M},
                                                     {fence.TOKEN_HEADER: fence.route_token(key, b, ub)}),
        "A's name with B's UID": (f"/{a}/{M}/v1/completions", {"model": M}, {fence.TOKEN_HEADER: fence.route_token(key, a, ub)}),
        "A's token as two values": (f"/{a}/{M}/v1/completions", {"model": M},
                                    {fence.TOKEN_HEADER: fence.route_token(key, a, ua) + ", " + fence.route_token(key, a, ua)}),
    }
    for label, (path, body, headers) in hostile.items():
        code, _, raw = await fenced.post(path, {**body, "messages": [], "prompt": "x"}, headers=dict(headers))
        assert code == 404 and orjson.loads(raw) == NOT_FOUND, (label, code, raw)

    assert fenced.metric("kaiwo_proxy_gateway_refused_total") == len(hostile)
    # no hint whether A has the Model: a Model that exists and one that does not get the same answer
    answers = set()
    for model in (M, "no-such-model"):
        code, _, raw = await fenced.post(f"/{a}/{model}/v1/completions", {"model": model, "prompt": "x"}, headers=dict(b_route))
        answers.add((code, raw))
    assert answers == {(404, orjson.dumps(NOT_FOUND))}

    # B's own path with A's model named in the body: still B's Model, or nothing
    code, _, raw = await fenced.post(f"/{b}/{BM}/v1/completions", {"model": f"{a}/{M}", "prompt": "x"}, headers=dict(b_route))
    assert code == 200 and orjson.loads(raw)["server"] == f"{b}-{BM}", raw
    code, _, raw = await fenced.post(f"/{b}/{M}/v1/completions", {"model": M, "prompt": "x"}, headers=dict(b_route))
    assert code == 404, raw  # B has no Model m; A's is not found through B's namespace
    assert len(back[(a, M)].requests) == served_a, "no refused request reached A's Model"

    # listing: B's token shows nothing of A; A's shows only A's twin, not B's
    async with fenced.http.get(f"{fenced.url}/{a}/{TWIN}/v1/models", headers=b_route) as r:
        assert r.status == 404 and orjson.loads(await r.read()) == NOT_FOUND
    async with fenced.http.get(f"{fenced.url}/openai/v1/models", headers=a_route) as r:
        assert r.status == 404
    twin_a = _route_headers(key, a, TWIN, ua)
    async with fenced.http.get(f"{fenced.url}/{a}/{TWIN}/v1/models", headers=twin_a) as r:
        assert r.status == 200
        assert [d["id"] for d in orjson.loads(await r.read())["data"]] == [f"{a}/{TWIN}"]
    code, _, raw = await fenced.post(f"/{a}/{TWIN}/v1/completions", {"model": TWIN, "prompt": "x"}, headers=twin_a)
    assert code == 200 and orjson.loads(raw)["server"] == f"{a}-{TWIN}", raw

    # the in-cluster listener keeps today's routes for direct clients
    async with fenced.http.post(f"{fenced.inner}/openai/v1/completions", data=orjson.dumps({"model": f"{a}/{M}", "prompt": "x"}),
                                headers={"Content-Type": "application/json"}) as r:
        assert r.status == 200 and orjson.loads(await r.read())["server"] == f"{a}-{M}"


async def test_a_bad_key_secret_keeps_the_gateway_listener_closed(control_plane, admin, caplog):
    """A key Secret too short to be a key: the in-cluster listener serves, the Gateway one stays shut."""
    op_ns = _namespace(admin, "op")
    r = admin.post(f"/api/v1/namespaces/{op_ns}/secrets",
                   json={"metadata": {"name": fence.KEY_SECRET}, "data": {fence.KEY_FIELD: "c2hvcnQ="}})
    assert r.status_code == 201, r.text
    client = await Client.from_kubeconfig(str(control_plane.kubeconfig))
    mgr = Manager(client, metrics=Metrics(), metrics_addr="127.0.0.1:0", health_addr="127.0.0.1:0")
    server = setup_proxy(mgr, "127.0.0.1:0", gateway_bind="127.0.0.1:0", operator_ns=op_ns, auth=None)  # the route token only
    assert server is not None
    stop = asyncio.Event()
    task = asyncio.create_task(mgr.run(stop))
    try:
        await asyncio.wait_for(server.started.wait(), 60)
        caplog.set_level(logging.ERROR, logger="kaiwo_ctrl.serving.proxy")
        await eventually(lambda: sum("route key unavailable" in r.getMessage() for r in caplog.records) >= 2,
                         what="the key read tried, refused and tried again")
        assert server.gateway_port is None and not server.gateway_started.is_set() and not task.done()
        assert not any("c2hvcnQ" in r.getMessage() or "c2hvcnQ" in str(r.__dict__) for r in caplog.records)
        async with aiohttp.ClientSession() as http:  # the in-cluster listener serves meanwhile
            async with http.get(f"http://127.0.0.1:{server.port}/openai/v1/models") as r:
                assert r.status == 200
    finally:
        stop.set()
        await asyncio.wait_for(task, 60)


async def _serve_model(fenced, admin, backends, ns: str, model: str):
    create_model(admin, ns, model, autoscalingDisabled=True)
    srv = await backends(f"{ns}-{model}-{uuid.uuid4().hex[:4]}")
    server_pod(admin, ns, model, srv)
    await fenced.wait_endpoints(ns, model, 1)
    return srv


async def test_a_recreated_namespace_gets_a_new_token(fenced, admin, backends):
    """The token binds the namespace's UID: routes (or a copied token) of a deleted namespace do not
    reach the Models of a namespace made again under the same name."""
    ns = _namespace(admin, "tr")
    key = _key(admin, fenced.op_ns)
    await _serve_model(fenced, admin, backends, ns, M)
    old = _route_headers(key, ns, M, _uid(admin, ns))
    code, _, raw = await fenced.post(f"/{ns}/{M}/v1/completions", {"model": M, "prompt": "x"}, headers=old)
    assert code == 200, raw
    # the namespace goes and comes back under the same name (someone else's now)
    # (no namespace controller may run in this plane: its contents are removed here and the
    # namespace finalized by hand, which is what that controller would do)
    for pod in admin.get(f"/api/v1/namespaces/{ns}/pods").json()["items"]:
        admin.request("DELETE", f"/api/v1/namespaces/{ns}/pods/{pod['metadata']['name']}", json={"gracePeriodSeconds": 0})
    assert admin.delete(f"/apis/kubeai.org/v1/namespaces/{ns}/models/{M}").status_code == 200
    assert admin.delete(f"/api/v1/namespaces/{ns}").status_code == 200
    body = admin.get(f"/api/v1/namespaces/{ns}").json()
    if body.get("kind") == "Namespace":
        body["spec"]["finalizers"] = []
        admin.put(f"/api/v1/namespaces/{ns}/finalize", json=body)
    await eventually(lambda: admin.get(f"/api/v1/namespaces/{ns}").status_code == 404, timeout=90, what="namespace deleted")
    assert admin.post("/api/v1/namespaces", json={"metadata": {"name": ns}}).status_code == 201
    srv = await _serve_model(fenced, admin, backends, ns, M)
    new = _route_headers(key, ns, M, _uid(admin, ns))
    assert new != old
    # the old token: refused, and the new namespace's Model receives nothing
    await eventually(lambda: fenced.server.route_fence.namespaces.get(ns) is not None
                     and fenced.server.route_fence.namespaces.get(ns)["metadata"]["uid"] == _uid(admin, ns), what="new UID seen")
    code, _, raw = await fenced.post(f"/{ns}/{M}/v1/completions", {"model": M, "prompt": "x"}, headers=old)
    assert code == 404 and orjson.loads(raw) == NOT_FOUND, raw
    assert srv.requests == []
    code, _, raw = await fenced.post(f"/{ns}/{M}/v1/completions", {"model": M, "prompt": "x"}, headers=new)
    assert code == 200 and len(srv.requests) == 1, raw


async def test_a_rotated_key_is_picked_up_without_a_restart(fenced, admin, backends):
    """Rotation as the operator does it (fence.rotated, here written by the admin): the running proxy
    accepts the new key's tokens, the old key's only until the overlap ends."""
    ns = _namespace(admin, "rk")
    srv = await _serve_model(fenced, admin, backends, ns, M)
    uid, url = _uid(admin, ns), f"/api/v1/namespaces/{fenced.op_ns}/secrets/{fence.KEY_SECRET}"
    secret = admin.get(url).json()
    old_key = fence.key_of(secret)
    old = _route_headers(old_key, ns, M, uid)
    overlap = 15
    secret["metadata"].setdefault("annotations", {})[fence.ROTATE_ANNOTATION] = str(overlap)
    rotated = fence.rotated(secret, time.time())
    assert rotated is not None and fence.ROTATE_ANNOTATION not in rotated["metadata"]["annotations"]
    r = admin.put(url, json=rotated)
    assert r.status_code == 200, r.text
    new_key = fence.key_of(r.json())
    assert new_key != old_key
    new = _route_headers(new_key, ns, M, uid)

    async def accepted(headers) -> bool:
        code, _, _ = await fenced.post(f"/{ns}/{M}/v1/completions", {"model": M, "prompt": "x"}, headers=headers)
        return code == 200
    await eventually(lambda: accepted(new), timeout=30, interval=0.2, what="the new key's token accepted (no restart)")
    t_seen = time.time()
    # during the overlap both are accepted (the routes are being re-rendered meanwhile)
    if time.time() < fence.keys_of(rotated).previous_until - 2:
        assert await accepted(old)
    async def old_refused() -> bool:
        return not await accepted(old)
    await eventually(old_refused, timeout=overlap + 30, interval=0.5, what="the old key refused after the overlap")
    assert time.time() >= fence.keys_of(rotated).previous_until - 1, (t_seen, "refused before the overlap ended")
    before = len(srv.requests)
    code, _, raw = await fenced.post(f"/{ns}/{M}/v1/completions", {"model": M, "prompt": "x"}, headers=old)
    assert code == 404 and orjson.loads(raw) == NOT_FOUND and len(srv.requests) == before, raw
    assert await accepted(new)
