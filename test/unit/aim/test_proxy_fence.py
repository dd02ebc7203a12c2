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
from kaiwo_ctrl.serving.routing.metrics import ProxyMetrics
from kaiwo_ctrl.serving.proxy.server import gateway_route, route

KEY = bytes(range(32))
OTHER_KEY = bytes(range(1, 33))
KEYS = fence.RouteKeys(KEY)
UID_A, UID_B = "uid-a", "uid-b"


def tok(key: bytes, ns: str, uid: str = UID_A) -> str:
    return fence.route_token(key, ns, uid)


def test_token_is_hmac_sha256_of_the_namespace_and_uid_bound_to_its_use():
    t = tok(KEY, "team-a")
    assert len(t) == 64 and int(t, 16) >= 0
    assert t == tok(KEY, "team-a")
    assert t != tok(KEY, "team-b")
    assert t != tok(OTHER_KEY, "team-a")
    # the same name, another namespace (deleted and made again): another token
    assert t != tok(KEY, "team-a", "uid-a2")
    # name and UID cannot be shifted into each other
    assert fence.route_token(KEY, "a", "bc") != fence.route_token(KEY, "ab", "c")
    # not the bare HMAC of the name: a key shared with another use gives no token here
    assert t != hmac.new(KEY, b"team-a", hashlib.sha256).hexdigest()


@pytest.mark.parametrize(
    ("namespace", "values", "ok"),
    [
        ("team-a", [tok(KEY, "team-a").encode()], True),
        ("team-a", [b" " + tok(KEY, "team-a").encode() + b" "], True),  # header whitespace
        ("team-a", [tok(KEY, "team-b").encode()], False),  # B's token, A's namespace
        ("team-a", [tok(KEY, "team-a", "old-uid").encode()], False),  # a namespace of the same name, deleted
        ("team-a", [tok(OTHER_KEY, "team-a").encode()], False),  # another key
        ("team-a", [tok(KEY, "team-a").upper().encode()], False),
        ("team-a", [tok(KEY, "team-a")[:63].encode()], False),  # a prefix
        ("team-a", [], False),
        ("team-a", [b""], False),
        # two values (a client's and a route's): refused even if one is right
        ("team-a", [tok(KEY, "team-a").encode()] * 2, False),
        ("", [tok(KEY, "").encode()], False),
    ],
)
def test_token_ok(namespace, values, ok):
    assert fence.token_ok(KEYS, namespace, UID_A, values) is ok


def test_token_of_an_unknown_namespace_is_refused():
    assert not fence.token_ok(KEYS, "team-a", None, [tok(KEY, "team-a", "").encode()])
    assert not fence.token_ok(KEYS, "team-a", "", [tok(KEY, "team-a", "").encode()])


def test_previous_key_is_accepted_only_during_the_overlap():
    keys = fence.RouteKeys(KEY, OTHER_KEY, previous_until=1000.0)
    old, new = [tok(OTHER_KEY, "team-a").encode()], [tok(KEY, "team-a").encode()]
    assert fence.token_ok(keys, "team-a", UID_A, old, now=999.0)
    assert not fence.token_ok(keys, "team-a", UID_A, old, now=1000.0)
    assert fence.token_ok(keys, "team-a", UID_A, new, now=999.0) and fence.token_ok(keys, "team-a", UID_A, new, now=5000.0)


def _b64(b: bytes) -> str:
    return base64.b64encode(b).decode()


def test_rotation_keeps_the_old_key_for_the_overlap_and_removes_the_request():
    secret = {"metadata": {"name": "kaiwo-route-key", "namespace": "op", "resourceVersion": "7",
                           "annotations": {fence.ROTATE_ANNOTATION: "30", "other": "x"}},
              "data": {"key": _b64(KEY)}}
    new = fence.rotated(secret, 1000.4)
    assert new is not None and new["metadata"]["annotations"] == {"other": "x"}
    assert new["metadata"]["resourceVersion"] == "7"  # the write is guarded by it
    keys = fence.keys_of(new)
    assert keys.previous == KEY and keys.previous_until == 1030 and len(keys.current) == 32 and keys.current != KEY
    assert fence.rotated(new, 1001) is None  # asked once, rotated once
    # the overlap: default when empty or unreadable, bounded
    for value, overlap in (("", fence.DEFAULT_OVERLAP), ("soon", fence.DEFAULT_OVERLAP), ("-5", 0), ("99999999", fence.MAX_OVERLAP)):
        secret["metadata"]["annotations"] = {fence.ROTATE_ANNOTATION: value}
        assert fence.keys_of(fence.rotated(secret, 0)).previous_until == overlap, value


def test_keys_of_ignores_an_unusable_previous_key():
    base = {"key": _b64(KEY)}
    for extra in ({}, {"previous": _b64(b"short"), "previousUntil": _b64(b"99")}, {"previous": _b64(OTHER_KEY), "previousUntil": _b64(b"nan")},
                  {"previous": _b64(OTHER_KEY), "previousUntil": "!!"}, {"previous": _b64(OTHER_KEY), "previousUntil": _b64(b"inf")}):
        assert fence.keys_of({"data": {**base, **extra}}) == fence.RouteKeys(KEY), extra
    assert fence.keys_of({"data": {**base, "previous": _b64(OTHER_KEY), "previousUntil": _b64(b"99")}}) == fence.RouteKeys(KEY, OTHER_KEY, 99.0)


def test_token_compare_is_constant_time(monkeypatch):
    seen = []
    real = hmac.compare_digest

    def spy(a, b):
        seen.append((a, b))
        return real(a, b)

    monkeypatch.setattr(fence.hmac, "compare_digest", spy)
    assert not fence.token_ok(KEYS, "team-a", UID_A, [b"x"])
    assert seen == [(tok(KEY, "team-a").encode(), b"x")]


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


class FakeNamespaces:
    def __init__(self, uids: dict[str, str]) -> None:
        self.uids = uids

    def get(self, name: str, namespace: str | None = None):
        return {"metadata": {"name": name, "uid": self.uids[name]}} if name in self.uids else None


def _fence(keys: fence.RouteKeys, uids: dict[str, str]) -> fence.RouteFence:
    """The proxy's RouteFence with its informers' contents given."""
    f = fence.RouteFence.__new__(fence.RouteFence)
    f.keys, f.namespaces = keys, FakeNamespaces(uids)  # type: ignore[assignment]
    return f


async def test_gateway_listener_serves_only_its_namespace_with_its_token():
    h = FakeHandler()
    dispatch = gateway_route(h, _fence(KEYS, {"team-a": UID_A, "team-b": UID_B, "openai": "uid-o"}))  # type: ignore[arg-type]
    a, b = tok(KEY, "team-a"), tok(KEY, "team-b", UID_B)
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
            "POST", "/openai/v1/chat/completions", tok(KEY, "openai", "uid-o")),
        "A's token from before A was made again": _request("POST", "/team-a/m/v1/completions", tok(KEY, "team-a", "old")),
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
