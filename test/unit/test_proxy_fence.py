"""The proxy's Gateway fence (pure): route tokens, their check, the Gateway
listener's path rules and the header it keeps from model servers."""

from __future__ import annotations

import base64
import hashlib
import hmac

import orjson
import pytest
from prometheus_client import CollectorRegistry

from kaiwo_ctrl.runtime.net.http1message import Request, Response
from kaiwo_ctrl.aim import fence
from kaiwo_ctrl.serving.proxy.forward import request_headers
from kaiwo_ctrl.serving.proxy.metrics import ProxyMetrics
from kaiwo_ctrl.serving.proxy.server import gateway_route, route

KEY = bytes(range(32))
OTHER_KEY = bytes(range(1, 33))


def test_token_is_hmac_sha256_of_the_namespace_bound_to_its_use():
    tok = fence.route_token(KEY, "team-a")
    assert len(tok) == 64 and int(tok, 16) >= 0
    assert tok == fence.route_token(KEY, "team-a")
    assert tok != fence.route_token(KEY, "team-b")
    assert tok != fence.route_token(OTHER_KEY, "team-a")
    # not the bare HMAC of the name: a key shared with another use gives no token here
    assert tok != hmac.new(KEY, b"team-a", hashlib.sha256).hexdigest()


@pytest.mark.parametrize(
    ("namespace", "values", "ok"),
    [
        ("team-a", [fence.route_token(KEY, "team-a").encode()], True),
        ("team-a", [b" " + fence.route_token(KEY, "team-a").encode() + b" "], True),  # header whitespace
        ("team-a", [fence.route_token(KEY, "team-b").encode()], False),  # B's token, A's namespace
        ("team-a", [fence.route_token(OTHER_KEY, "team-a").encode()], False),  # another key
        ("team-a", [fence.route_token(KEY, "team-a").upper().encode()], False),
        ("team-a", [fence.route_token(KEY, "team-a")[:63].encode()], False),  # a prefix
        ("team-a", [], False),
        ("team-a", [b""], False),
        # two values (a client's and a route's): refused even if one is right
        ("team-a", [fence.route_token(KEY, "team-a").encode()] * 2, False),
        ("", [fence.route_token(KEY, "").encode()], False),
    ],
)
def test_token_ok(namespace, values, ok):
    assert fence.token_ok(KEY, namespace, values) is ok


def test_token_compare_is_constant_time(monkeypatch):
    seen = []
    real = hmac.compare_digest

    def spy(a, b):
        seen.append((a, b))
        return real(a, b)

    monkeypatch.setattr(fence.hmac, "compare_digest", spy)
    assert not fence.token_ok(KEY, "team-a", [b"x"])
    assert seen == [(fence.route_token(KEY, "team-a").encode(), b"x")]


def test_key_of_secret():
    good = {"data": {"key": base64.b64encode(KEY).decode()}}
    assert fence.key_of(good) == KEY
    for bad in ({}, {"data": {}}, {"data": {"key": "not base64!"}}, {"data": {"key": base64.b64encode(b"short").decode()}}):
        with pytest.raises(fence.RouteKeyError) as e:
            fence.key_of({"metadata": {"namespace": "op", "name": "kaiwo-route-key"}, **bad})
        assert "op/kaiwo-route-key" in str(e.value)


def test_token_header_never_reaches_the_model_server():
    sent = request_headers([(b"X-Kaiwo-Route-Token", b"t"), (b"x-kaiwo-route-token", b"t"), (b"Authorization", b"Bearer x")])
    assert sent == [(b"Authorization", b"Bearer x")]


class FakeHandler:
    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.metrics = ProxyMetrics(CollectorRegistry())
        self.auth = None  # --proxy-auth none: these tests are about the route token

    async def proxy(self, request, rest, namespace, model, caller=None):
        self.calls.append(("proxy", rest, namespace, model))
        return Response(200, [], b"ok")

    async def models(self, request, namespace, model, caller=None):
        self.calls.append(("models", namespace, model))
        return Response(200, [], b"ok")


def _request(method: str, url: str, token: str | None = None, *extra: tuple[bytes, bytes]) -> Request:
    headers = [(b"Content-Type", b"application/json"), *extra]
    if token is not None:
        headers.append((b"X-Kaiwo-Route-Token", token.encode()))
    return Request(None, method, url.encode(), "1.1", True, headers)


async def test_gateway_listener_serves_only_its_namespace_with_its_token():
    h = FakeHandler()
    dispatch = gateway_route(h, KEY)  # type: ignore[arg-type]
    a, b = fence.route_token(KEY, "team-a"), fence.route_token(KEY, "team-b")
    ok = await dispatch(_request("POST", "/team-a/m/v1/chat/completions?x=1", a))
    assert ok.status == 200 and h.calls == [("proxy", "chat/completions", "team-a", "m")]
    assert (await dispatch(_request("GET", "/team-a/m/v1/models", a))).status == 200
    assert h.calls[-1] == ("models", "team-a", "m")
    # a percent-encoded namespace is checked as decoded, the same string the Model is looked up in
    assert (await dispatch(_request("POST", "/team%2Da/m/v1/completions", a))).status == 200
    assert h.calls[-1] == ("proxy", "completions", "team-a", "m")
    calls = len(h.calls)
    refused = {
        "no token": _request("POST", "/team-a/m/v1/chat/completions"),
        "B's token, A's namespace": _request("POST", "/team-a/m/v1/chat/completions", b),
        "the body-named route": _request("POST", "/openai/v1/chat/completions", a),
        "the body-named route, 'openai' namespace token": _request(
            "POST", "/openai/v1/chat/completions", fence.route_token(KEY, "openai")),
        "listing everything": _request("GET", "/openai/v1/models", a),
        "encoded slash moves the namespace": _request("POST", "/team-b%2Fteam-a/m/v1/completions", a),
        "two tokens": _request("POST", "/team-a/m/v1/completions", a, (b"X-Kaiwo-Route-Token", a.encode())),
        "wrong method, no token": _request("GET", "/team-a/m/v1/completions"),
        "short path": _request("POST", "/team-a/v1/completions", a),
        "empty namespace": _request("POST", "//m/v1/completions", a),
    }
    bodies = set()
    for label, req in refused.items():
        resp = await dispatch(req)
        assert resp.status == 404, label
        bodies.add(bytes(resp.body))
    assert h.calls[calls:] == []  # nothing was looked up
    assert h.metrics.gateway_refused.labels().value == len(refused)
    # one and the same OpenAI-shaped answer for each: it says nothing of what exists
    assert len(bodies) == 1
    assert orjson.loads(bodies.pop()) == {"error": {"message": "not found", "type": "not_found_error", "code": 404}}


async def test_in_cluster_listener_keeps_serving_every_route():
    h = FakeHandler()
    dispatch = route(h)  # type: ignore[arg-type]
    assert (await dispatch(_request("POST", "/openai/v1/chat/completions"))).status == 200
    assert (await dispatch(_request("POST", "/team-a/m/v1/completions"))).status == 200
    assert h.calls == [("proxy", "chat/completions", None, None), ("proxy", "completions", "team-a", "m")]
