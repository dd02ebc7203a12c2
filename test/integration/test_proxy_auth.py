"""Callers of the proxy are known, and Model access follows RBAC (``--proxy-auth kubernetes``).

Real ServiceAccount tokens (TokenRequest) and RoleBindings to the shipped ``kaiwo-model-user``
ClusterRole on the real API server; fake model servers on loopback record what they receive.
Each test asserts who got what: the caller's answer, and what each backend received.
"""

from __future__ import annotations

import asyncio
import uuid

import aiohttp
import orjson
import pytest

from kaiwo_ctrl.serving.proxy.auth import AuthConfig
from proxy_support import backends, create_model, server_pod, start_proxy, stop_proxy  # noqa: F401 - fixtures
from support import eventually
from support.tokens import bearer, grant_model_user, service_account_token
from test_proxy_bounds import MIB, answer_of, connect, head

pytestmark = pytest.mark.integration

#: short TTLs so that a revoked grant shows within the test (the defaults are 30 s and 5 s)
AUTH = AuthConfig(ttl=1.0, deny_ttl=0.3)


def _namespace(admin, prefix: str) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    assert admin.post("/api/v1/namespaces", json={"metadata": {"name": name}}).status_code == 201
    return name


@pytest.fixture
async def authed(control_plane):
    p = await start_proxy(control_plane, engine_interval=None, auth=AUTH)
    yield p
    await stop_proxy(p)


async def _get(p, path: str, headers: dict | None = None) -> tuple[int, dict, dict]:
    async with p.http.get(p.url + path, headers=headers or {}) as r:
        return r.status, dict(r.headers), orjson.loads(await r.read())


async def test_callers_reach_only_the_models_rbac_allows(authed, admin, namespace, backends):
    p, a, b_ns = authed, namespace, _namespace(admin, "b")
    create_model(admin, a, "auth-a", autoscalingDisabled=True)
    create_model(admin, b_ns, "auth-b", autoscalingDisabled=True)
    create_model(admin, b_ns, "auth-b-zero", replicas=0)  # scales from zero for an allowed caller only
    ba, bb = await backends("auth-a"), await backends("auth-b")
    server_pod(admin, a, "auth-a", ba)
    server_pod(admin, b_ns, "auth-b", bb)
    await p.wait_endpoints(a, "auth-a", 1)
    await p.wait_endpoints(b_ns, "auth-b", 1)
    await p.wait_model(b_ns, "auth-b-zero")
    token = service_account_token(admin, a, "caller")
    chat = {"model": "auth-a", "messages": [{"role": "user", "content": "hi"}]}

    # no token, or a token the API server does not know: 401 in OpenAI's error shape
    for headers in ({}, bearer("not-a-token"), {"Authorization": "Basic eDp5"}):
        code, h, raw = await p.post("/openai/v1/chat/completions", chat, headers=headers)
        err = orjson.loads(raw)["error"]
        assert code == 401 and err["code"] == 401 and err["type"] == "invalid_request_error", raw
        assert h["WWW-Authenticate"].startswith("Bearer") and b"not-a-token" not in raw
    assert (await _get(p, "/openai/v1/models"))[0] == 401

    # a valid token without a grant: A's own Model is "not found", exactly as a Model that does not exist
    missing = await p.post("/openai/v1/chat/completions", {**chat, "model": "no-such-model-x"}, headers=bearer(token))
    code, _, raw = await p.post("/openai/v1/chat/completions", chat, headers=bearer(token))
    assert code == 404 == missing[0] and orjson.loads(raw)["error"]["type"] == "not_found_error"
    code, _, raw = await p.post(f"/{a}/auth-a/v1/chat/completions", chat, headers=bearer(token))
    assert code == 404, raw
    assert ba.requests == [], "nothing reached A's backend before RBAC allowed it"

    grant_model_user(admin, a, a, "caller")
    await eventually(lambda: _status(p, "/openai/v1/chat/completions", chat, token, 200), timeout=30, what="access after the grant")
    code, _, raw = await p.post(f"/{a}/auth-a/v1/chat/completions", chat, headers=bearer(token))
    assert code == 200 and orjson.loads(raw)["server"] == "auth-a", raw
    assert all("authorization" not in {k.lower() for k in r["headers"]} for r in ba.requests), \
        "the caller's Kubernetes token is never forwarded to the model server"

    # B's Models: by body name, qualified name and path, all one 404; B's backend receives nothing, B's Model stays at zero
    for path, body in (("/openai/v1/chat/completions", {**chat, "model": "auth-b"}),
                       ("/openai/v1/chat/completions", {**chat, "model": f"{b_ns}/auth-b"}),
                       (f"/{b_ns}/auth-b/v1/chat/completions", chat),
                       ("/openai/v1/chat/completions", {**chat, "model": "auth-b-zero"})):
        code, _, raw = await p.post(path, body, headers=bearer(token))
        assert code == 404 and b"model not found" in raw, (path, raw)
    assert bb.requests == []
    assert (admin.get(f"/apis/kubeai.org/v1/namespaces/{b_ns}/models/auth-b-zero").json()["spec"].get("replicas") or 0) == 0
    assert p.metric("kaiwo_proxy_requests_total", model_namespace=b_ns) == 0, "no per-Model series for a refused caller"
    assert p.metric("kaiwo_proxy_requests_total", model_namespace=a, model_name="auth-a", code="200") == 2

    # the listing: only what the caller may use
    code, _, listing = await _get(p, "/openai/v1/models", bearer(token))
    ids = {d["id"] for d in listing["data"]}
    assert code == 200 and "auth-a" in ids and not any("auth-b" in i for i in ids), ids
    code, _, listing = await _get(p, f"/{b_ns}/auth-b/v1/models", bearer(token))
    assert code == 404


async def test_scale_from_zero_follows_authorization(authed, admin, namespace):
    p = authed
    create_model(admin, namespace, "auth-zero", replicas=0)
    await p.wait_model(namespace, "auth-zero")
    token = service_account_token(admin, namespace, "scaler")
    body = {"model": "auth-zero", "prompt": "x"}
    code, _, _ = await p.post("/openai/v1/completions", body, headers=bearer(token))
    assert code == 404
    replicas = lambda: admin.get(f"/apis/kubeai.org/v1/namespaces/{namespace}/models/auth-zero").json()["spec"].get("replicas") or 0  # noqa: E731
    assert replicas() == 0, "a refused caller scaled nothing"
    grant_model_user(admin, namespace, namespace, "scaler")
    waiting = asyncio.create_task(_post_until_allowed(p, body, token))  # waits for an endpoint once allowed
    try:
        await eventually(lambda: replicas() == 1, timeout=30, what="scaled from zero for the allowed caller")
    finally:
        waiting.cancel()


async def _post_until_allowed(p, body: dict, token: str) -> None:
    while (await p.post("/openai/v1/completions", body, headers=bearer(token)))[0] == 404:
        await asyncio.sleep(0.1)


async def test_a_removed_rolebinding_ends_access_within_the_ttl(authed, admin, namespace, backends):
    p = authed
    create_model(admin, namespace, "auth-revoke", autoscalingDisabled=True)
    b = await backends("auth-revoke")
    server_pod(admin, namespace, "auth-revoke", b)
    await p.wait_endpoints(namespace, "auth-revoke", 1)
    token = service_account_token(admin, namespace, "leaver")
    binding = grant_model_user(admin, namespace, namespace, "leaver")
    body = {"model": "auth-revoke", "prompt": "x"}
    await eventually(lambda: _status(p, "/openai/v1/completions", body, token, 200), timeout=30, what="allowed")
    r = admin.delete(f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings/{binding}")
    assert r.status_code == 200, r.text
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    await eventually(lambda: _status(p, "/openai/v1/completions", body, token, 404), timeout=30, what="refused after the revocation")
    # the cache TTL (1 s here) bounds it, plus the API server's own RBAC cache propagation
    assert loop.time() - t0 < 30
    served = len(b.requests)
    assert (await p.post("/openai/v1/completions", body, headers=bearer(token)))[0] == 404
    assert len(b.requests) == served, "the revoked caller's request reached nobody"


async def test_a_flood_of_garbage_tokens_is_bounded_and_others_are_served(authed, admin, namespace, backends):
    p = authed
    create_model(admin, namespace, "auth-flood", autoscalingDisabled=True)
    b = await backends("auth-flood")
    server_pod(admin, namespace, "auth-flood", b)
    await p.wait_endpoints(namespace, "auth-flood", 1)
    token = service_account_token(admin, namespace, "regular")
    grant_model_user(admin, namespace, namespace, "regular")
    body = {"model": "auth-flood", "prompt": "x"}
    await eventually(lambda: _status(p, "/openai/v1/completions", body, token, 200), timeout=30, what="warm")
    auth = p.server.handler.auth
    reviews: list[str] = []
    p.mgr.client.hooks.append(lambda method, path, status, dt: reviews.append(path) if "tokenreviews" in path else None)
    before = auth.reviews

    # 1,000 distinct garbage tokens at once, as the head check sees them
    flood = [auth.authorize("POST", "/openai/v1/completions", [(b"authorization", f"Bearer garbage-{i}".encode())])
             for i in range(1000)]
    regular = asyncio.create_task(p.post("/openai/v1/completions", body, headers=bearer(token)))
    decisions = await asyncio.gather(*flood)
    codes = [d.status for d in decisions]
    made = auth.reviews - before
    assert made <= 2 * AUTH.max_reviews, f"{made} TokenReviews for 1,000 garbage tokens"
    assert len(reviews) == made, "every review the authorizer counts is one API call, and no other was made"
    assert codes.count(401) == made and codes.count(503) == 1000 - made and 200 not in codes
    code, _, raw = await regular
    assert code == 200 and orjson.loads(raw)["server"] == "auth-flood", "the warm caller was served during the flood"

    # and through the listener: garbage never reaches the backend
    served = len(b.requests)
    async with aiohttp.ClientSession() as http:
        async def one(i: int) -> int:
            async with http.post(p.url + "/openai/v1/completions", json=body, headers=bearer(f"junk-{i}")) as r:
                return r.status
        codes = await asyncio.gather(*(one(i) for i in range(200)))
    assert set(codes) <= {401, 503} and len(b.requests) == served


async def test_one_review_per_question_however_many_ask_at_once(authed, admin, namespace, backends):
    """50 requests of one new caller at once: one TokenReview and one SubjectAccessReview, all served."""
    p = authed
    create_model(admin, namespace, "auth-dedup", autoscalingDisabled=True)
    b = await backends("auth-dedup")
    server_pod(admin, namespace, "auth-dedup", b)
    await p.wait_endpoints(namespace, "auth-dedup", 1)
    token = service_account_token(admin, namespace, "many")
    grant_model_user(admin, namespace, namespace, "many")
    await eventually(lambda: _sar_allows(admin, namespace, "many", "auth-dedup"), timeout=30, what="the grant in effect")
    calls: list[str] = []
    p.mgr.client.hooks.append(lambda method, path, status, dt: calls.append(path.rsplit("/", 1)[-1]) if "review" in path else None)
    answers = await asyncio.gather(*(p.post(f"/{namespace}/auth-dedup/v1/completions", {"prompt": "x"}, headers=bearer(token))
                                     for _ in range(50)))
    assert [a[0] for a in answers] == [200] * 50 and len(b.requests) == 50
    assert sorted(calls) == ["subjectaccessreviews", "tokenreviews"], calls


async def test_a_refused_caller_is_answered_from_the_head_and_its_body_never_read(authed, admin, namespace, backends):
    """The caller check is the in-cluster listener's head gate: a request that declares a 32 MiB body
    and sends only its head is refused (401 without a token, 404 for a caller not allowed the Model)
    before any body budget is taken; the backend receives nothing. An allowed caller still gets through."""
    p = authed
    create_model(admin, namespace, "auth-head", autoscalingDisabled=True)
    b = await backends("auth-head")
    server_pod(admin, namespace, "auth-head", b)
    await p.wait_endpoints(namespace, "auth-head", 1)
    token = service_account_token(admin, namespace, "headless")
    path = f"/{namespace}/auth-head/v1/completions".encode()
    budget = p.server.servers[0].budget
    for extra, want in (((), 401), ((b"Authorization: Bearer " + token.encode(),), 404)):
        r, w = await connect(p.server.port)
        w.write(head(32 * MIB, *extra, path=path))  # the head only: the body is never sent
        status, raw = await asyncio.wait_for(answer_of(r), 30)
        w.close()
        assert (status, orjson.loads(raw)["error"]["code"]) == (want, want), raw[:200]
        assert budget.free == budget.total and not budget.held and b.requests == []
    grant_model_user(admin, namespace, namespace, "headless")
    await eventually(lambda: _sar_allows(admin, namespace, "headless", "auth-head"), timeout=30, what="the grant in effect")
    await eventually(lambda: _status(p, path.decode(), {"prompt": "x"}, token, 200), timeout=30, what="the caller allowed")
    assert len(b.requests) >= 1


def _sar_allows(admin, namespace: str, sa: str, model: str) -> bool:
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": {
        "user": f"system:serviceaccount:{namespace}:{sa}", "groups": ["system:serviceaccounts"],
        "resourceAttributes": {"group": "kubeai.org", "resource": "models", "subresource": "proxy", "verb": "create",
                               "namespace": namespace, "name": model}}}
    r = admin.post("/apis/authorization.k8s.io/v1/subjectaccessreviews", json=review)
    return r.status_code == 201 and r.json()["status"].get("allowed") is True


async def _status(p, path: str, body: dict, token: str, want: int) -> bool:
    return (await p.post(path, body, headers=bearer(token)))[0] == want


async def test_the_gateway_listener_needs_the_route_token_and_an_allowed_caller(control_plane, admin, backends):
    """On the Gateway listener the route token is checked first, then the caller as in-cluster:
    a request through A's own route still needs a Kubernetes token allowed on A's Model."""
    from test_proxy_gateway_fence import _key, _route_headers, _uid

    op_ns, a = _namespace(admin, "op"), _namespace(admin, "ga")
    p = await start_proxy(control_plane, engine_interval=None, auth=AUTH, gateway_bind="127.0.0.1:0", operator_ns=op_ns)
    try:
        await asyncio.wait_for(p.server.gateway_started.wait(), 60)
        gw = f"http://127.0.0.1:{p.server.gateway_port}"
        create_model(admin, a, "gw-auth", autoscalingDisabled=True)
        b = await backends("gw-auth")
        server_pod(admin, a, "gw-auth", b)
        await p.wait_endpoints(a, "gw-auth", 1)
        route = _route_headers(_key(admin, op_ns), a, "gw-auth", _uid(admin, a))
        token = service_account_token(admin, a, "gw-caller")
        path, body = f"/{a}/gw-auth/v1/completions", {"model": "gw-auth", "prompt": "x"}

        async def call(headers: dict) -> int:
            async with p.http.post(gw + path, json=body, headers=headers) as r:
                return r.status

        assert await call(route) == 401, "the route token alone is not a caller"
        assert await call(bearer(token)) == 404, "a caller without the route token: the fence's one 404"
        assert await call({**route, **bearer(token)}) == 404, "a known caller without a grant"
        assert b.requests == []
        grant_model_user(admin, a, a, "gw-caller")
        await eventually(lambda: _gw_ok(call, {**route, **bearer(token)}), timeout=30, what="allowed through the Gateway")
        assert len(b.requests) >= 1 and all("authorization" not in {k.lower() for k in r["headers"]} for r in b.requests)
    finally:
        await stop_proxy(p)


async def _gw_ok(call, headers: dict) -> bool:
    return await call(headers) == 200
