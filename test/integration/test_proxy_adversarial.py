"""The live proxy (real apiserver, Models and Pods) against hostile clients and
hostile model servers (scripted raw upstreams on 127.0.0.x that behave as
uvicorn does unless told otherwise).

Every case asserts the exact status and which client received which body;
after every case a normal request through the same proxy gets its own answer.
"""

from __future__ import annotations

import asyncio
import re
import uuid

import aiohttp
import orjson
import pytest

from kaiwo_ctrl.serving.limits import ProxyLimits
from proxy_support import Proxy, create_model, next_host, server_pod, start_proxy, stop_proxy
from support import eventually
from support.rawupstream import RawUpstream, Seen, json_answer

pytestmark = pytest.mark.integration

LIMITS = ProxyLimits(head_timeout=0.5, body_idle_timeout=0.5, max_body_bytes=1 << 20, max_upstream_head_bytes=16 << 10,
                     endpoint_wait=1.0, request_timeout=None)


@pytest.fixture
async def proxy(control_plane):
    p = await start_proxy(control_plane, engine_interval=None, limits=LIMITS, scale_from_zero=False)
    yield p
    await stop_proxy(p)


MODEL = {"name": ""}  # the Model the current test's upstream serves (a name no other namespace has)


@pytest.fixture
async def upstream(proxy, admin, namespace):
    """A uvicorn-like model server behind a Model of its own (one Ready Pod)."""
    up = await RawUpstream(next_host()).start()
    name = MODEL["name"] = f"m-{uuid.uuid4().hex[:8]}"
    create_model(admin, namespace, name, autoscalingDisabled=True)
    await proxy.wait_model(namespace, name)
    server_pod(admin, namespace, name, up)
    await proxy.wait_endpoints(namespace, name, 1)
    yield up
    await up.stop()


def body(who: str, model: str | None = None, **extra) -> bytes:
    return orjson.dumps({"model": model or MODEL["name"], "user": who, "prompt": "hello", **extra})


async def ask(proxy: Proxy, who: str, model: str | None = None) -> tuple[int, dict]:
    code, _, raw = await proxy.post("/openai/v1/completions", body(who, model), headers={"Content-Type": "application/json"})
    return code, orjson.loads(raw)


async def own_answer(proxy: Proxy, up: RawUpstream, who: str = "zed") -> None:
    """The check after every case: a normal request gets its own answer."""
    up.answer = up.normal
    assert await ask(proxy, who) == (200, {"completion_for": who})


async def raw(proxy: Proxy, data: bytes, *, then: bytes = b"", after: bytes = b"") -> bytes:
    """Send ``data`` to the proxy; once ``after`` arrived, send ``then``; read until the proxy closes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.server.port)
    try:
        writer.write(data)
        out = b""
        async with asyncio.timeout(10):
            if then:
                out = await reader.readuntil(after)
                writer.write(then)
            while chunk := await reader.read(65536):
                out += chunk
        return out
    finally:
        writer.close()


def statuses(out: bytes) -> list[int]:
    return [int(s) for s in re.findall(rb"HTTP/1\.1 (\d{3}) ", out)]


def head(length: int, *extra: bytes, path: bytes = b"/openai/v1/completions") -> bytes:
    lines = [b"POST %b HTTP/1.1" % path, b"Host: proxy", b"Content-Type: application/json", b"Content-Length: %d" % length, *extra]
    return b"\r\n".join(lines) + b"\r\n\r\n"


def error_of(out: bytes) -> dict:
    return orjson.loads(out.split(b"\r\n\r\n", 1)[1])["error"]


@pytest.mark.parametrize("interim", [b"", b"HTTP/1.1 103 Early Hints\r\nLink: </x>; rel=preload\r\n\r\n"])
async def test_expect_and_interim_answers_never_cross_tenants(proxy, upstream, interim):
    """The reported leak: curl's ``Expect: 100-continue`` reached uvicorn, whose 100 was
    taken for the answer, and the next tenant on the pooled connection got the completion."""
    upstream.interim = interim
    mallory = body("mallory-primer")
    out = await raw(proxy, head(len(mallory), b"Expect: 100-continue", b"Connection: close"),
                    then=mallory, after=b"\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 100 Continue\r\n\r\n"), "the proxy answers the expectation itself"
    assert statuses(out) == [100, 200] and out.endswith(orjson.dumps({"completion_for": "mallory-primer"}))
    assert b"Early Hints" not in out, "interim answers from a model server never reach the client"
    assert await ask(proxy, "bob") == (200, {"completion_for": "bob"})
    carol, dave = await asyncio.gather(ask(proxy, "carol"), ask(proxy, "dave"))
    assert (carol, dave) == ((200, {"completion_for": "carol"}), (200, {"completion_for": "dave"}))
    assert all(s.header(b"expect") is None for s in upstream.seen), "Expect is not forwarded"
    assert [s.tag for s in upstream.seen[:2]] == ["mallory-primer", "bob"] and upstream.seen[1].conn == upstream.seen[0].conn, \
        "mallory's and bob's requests shared one pooled connection"
    await own_answer(proxy, upstream)


async def test_upstream_closing_mid_body_is_502(proxy, upstream):
    async def cut(seen: Seen, w: asyncio.StreamWriter) -> None:
        w.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"completion_for\"")
        await w.drain()
        w.close()

    upstream.answer = cut
    code, headers, raw_body = await proxy.post("/openai/v1/completions", body("alice"))
    assert code == 502 and orjson.loads(raw_body) == {"error": {"message": "Bad Gateway", "type": "server_error", "code": 502}}
    assert len(upstream.seen) == 4, "retried on new connections, never on the broken one"
    assert len({s.conn for s in upstream.seen}) == 4
    await own_answer(proxy, upstream)


async def test_upstream_invalid_chunking_breaks_the_stream_off(proxy, upstream):
    async def bad_chunks(seen: Seen, w: asyncio.StreamWriter) -> None:
        w.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
                b"c\r\ndata: alice\n\r\n")
        await w.drain()
        await asyncio.sleep(0.1)
        w.write(b"zz\r\nHTTP/1.1 200 OK\r\n\r\n")

    upstream.answer = bad_chunks
    got = b""
    async with proxy.http.post(proxy.url + "/openai/v1/completions", data=body("alice", stream=True)) as r:
        assert r.status == 200
        with pytest.raises(aiohttp.ClientPayloadError):
            async for chunk in r.content.iter_any():
                got += chunk
    assert got == b"data: alice\n", "the client got what came before the bad framing, and saw the stream broken"
    await own_answer(proxy, upstream)
    assert upstream.seen[-1].conn != upstream.seen[0].conn


async def test_upstream_2mib_head_is_502(proxy, upstream):
    async def huge(seen: Seen, w: asyncio.StreamWriter) -> None:
        w.write(b"HTTP/1.1 200 OK\r\nX-Pad: " + b"a" * (2 << 20) + b"\r\n" + json_answer(seen.tag)[17:])

    upstream.answer = huge
    code, _, raw_body = await proxy.post("/openai/v1/completions", body("alice"))
    assert code == 502 and orjson.loads(raw_body)["error"]["message"] == "Bad Gateway"
    await own_answer(proxy, upstream)


async def test_client_stalling_in_the_head_or_the_body_is_408(proxy, upstream):
    out = await raw(proxy, b"POST /openai/v1/completions HTTP/1.1\r\nHost: pro")
    assert statuses(out) == [408]
    alice = body("alice")
    out = await raw(proxy, head(len(alice)) + alice[:10])
    assert statuses(out) == [408]
    assert upstream.seen == [], "nothing of a stalled request reached the model server"
    await own_answer(proxy, upstream)


async def test_oversized_bodies_are_413_before_they_are_read(proxy, upstream):
    out = await raw(proxy, head(2 << 20, b"Expect: 100-continue"))  # the body is never sent
    assert statuses(out) == [413], "refused from the Content-Length, without 100 Continue"
    chunk = b"%x\r\n%b\r\n" % (64 << 10, b" " * (64 << 10))
    out = await raw(proxy, b"POST /openai/v1/completions HTTP/1.1\r\nHost: p\r\nTransfer-Encoding: chunked\r\n\r\n" + chunk * 17)
    assert statuses(out) == [413]
    alice = body("alice")
    out = await raw(proxy, head(len(alice)) + alice + head(2 << 20) + b" " * 1000)
    assert statuses(out) == [200, 413] and orjson.dumps({"completion_for": "alice"}) in out
    assert [s.tag for s in upstream.seen] == ["alice"]
    await own_answer(proxy, upstream)


async def test_pipelined_requests_each_get_their_own_answer(proxy, upstream):
    reqs = b"".join(head(len(b := body(f"user{i}"))) + b for i in range(20))
    last = body("last")
    out = await raw(proxy, reqs + head(len(last), b"Connection: close") + last)
    answers = re.findall(rb'\{"completion_for":"([^"]+)"\}', out)
    assert statuses(out) == [200] * 21 and answers == [f"user{i}".encode() for i in range(20)] + [b"last"]
    await own_answer(proxy, upstream)


@pytest.mark.parametrize("depth, rewrite, status", [(300, True, 400), (300, False, 200), (5000, False, 400), (5000, True, 400)])
async def test_deeply_nested_json(proxy, upstream, namespace, depth, rewrite, status):
    """orjson reads 1,024 levels and writes 254: a body it cannot read, or cannot write
    again after the model rewrite, is a 400 in OpenAI's shape, never a 500 or a traceback."""
    nested = b"[" * depth + b"]" * depth
    m = MODEL["name"]
    model = f"{namespace}/{m}" if rewrite else m  # a namespaced name is rewritten to the Model's own
    doc = b'{"model":"%b","user":"alice","prompt":%b}' % (model.encode(), nested)
    code, headers, raw_body = await proxy.post("/openai/v1/completions", doc, headers={"Content-Type": "application/json"})
    assert code == status, raw_body[:300]
    if status == 400:
        err = orjson.loads(raw_body)["error"]
        assert err["type"] == "invalid_request_error" and err["code"] == 400 and headers["Content-Type"] == "application/json"
        assert "Traceback" not in err["message"] and "orjson" not in err["message"]
        assert upstream.seen == []
    else:
        assert orjson.loads(raw_body) == {"completion_for": "alice"} and upstream.seen[-1].body == doc
    await own_answer(proxy, upstream)


async def test_client_gone_mid_stream_cancels_upstream_and_drops_its_connection(proxy, upstream):
    async def slow_stream(seen: Seen, w: asyncio.StreamWriter) -> None:
        w.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        for i in range(100):
            line = b"data: %b %d\n\n" % (seen.tag.encode(), i)
            w.write(b"%x\r\n%b\r\n" % (len(line), line))
            await w.drain()
            await asyncio.sleep(0.05)
        w.write(b"0\r\n\r\n")

    upstream.answer = slow_stream
    async with proxy.http.post(proxy.url + "/openai/v1/completions", data=body("alice", stream=True)) as r:
        assert r.status == 200
        assert (await r.content.readuntil(b"\n\n")) == b"data: alice 0\n\n"
        r.close()  # the client goes away mid-answer
    await eventually(lambda: upstream.closed_by_peer >= 1, what="the upstream connection closed when the client went")
    await own_answer(proxy, upstream)
    assert upstream.seen[-1].conn != upstream.seen[0].conn, "the rest of alice's stream can reach nobody"


@pytest.mark.parametrize("attack", [
    b"Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nPOST /openai/v1/completions HTTP/1.1\r\n\r\n",
    b"Content-Length: 2\r\nContent-Length: 40\r\n\r\n{}",
    b"X-Folded: a\r\n b\r\nContent-Length: 2\r\n\r\n{}",
    b"Transfer-Encoding: chunked\r\n\r\n-2\r\n{}\r\n0\r\n\r\n",
    b"Transfer-Encoding: chunked\r\n\r\n1ffffffffffffffff\r\n{}\r\n0\r\n\r\n",
])
async def test_smuggling_attempts_are_400(proxy, upstream, attack):
    out = await raw(proxy, b"POST /openai/v1/completions HTTP/1.1\r\nHost: p\r\n" + attack)
    assert statuses(out) == [400]
    assert upstream.seen == []
    await own_answer(proxy, upstream)


async def test_header_injection_through_the_model_name(proxy, upstream, namespace):
    code, _, raw_body = await proxy.post("/openai/v1/completions", body("alice", model=MODEL["name"] + "\r\nX-Injected: 1"))
    assert code == 404 and orjson.loads(raw_body)["error"]["code"] == 404
    out = await raw(proxy, head(len(b := body("alice")), b"Connection: close", path=f"/{namespace}/{MODEL['name']}%0d%0aX-Injected:%201/v1/completions".encode()) + b)
    assert statuses(out) == [404]
    assert upstream.seen == []
    await own_answer(proxy, upstream)
    assert all(s.header(b"x-injected") is None for s in upstream.seen)


async def test_no_endpoint_is_504_after_the_endpoint_wait(proxy, upstream, admin, namespace):
    create_model(admin, namespace, "empty", autoscalingDisabled=True)
    await proxy.wait_model(namespace, "empty")
    code, _, raw_body = await proxy.post("/openai/v1/completions", body("alice", model="empty"))
    err = orjson.loads(raw_body)["error"]
    assert code == 504 and err["type"] == "timeout_error" and "no endpoint" in err["message"]
    await own_answer(proxy, upstream)


async def test_request_deadline_is_504(proxy, upstream, admin, namespace):
    create_model(admin, namespace, "slow", autoscalingDisabled=True, annotations={"kaiwo.silogen.ai/request-timeout": "1s"})
    slow = await RawUpstream(next_host(), delay=30).start()
    try:
        server_pod(admin, namespace, "slow", slow)
        await proxy.wait_endpoints(namespace, "slow", 1)
        code, _, raw_body = await proxy.post("/openai/v1/completions", body("alice", model="slow"))
        assert code == 504 and orjson.loads(raw_body)["error"]["type"] == "timeout_error"
        await eventually(lambda: slow.closed_by_peer >= 1, what="the upstream request was cut at the deadline")

        async def drip(seen: Seen, w: asyncio.StreamWriter) -> None:
            w.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
            for _ in range(30):
                w.write(b"7\r\ndata: x\r\n")
                await w.drain()
                await asyncio.sleep(0.2)
            w.write(b"0\r\n\r\n")

        slow.delay, slow.answer = 0.0, drip
        got = b""
        async with proxy.http.post(proxy.url + "/openai/v1/completions", data=body("bob", model="slow", stream=True)) as r:
            assert r.status == 200, "the stream began before the deadline"
            with pytest.raises(aiohttp.ClientPayloadError):
                async for chunk in r.content.iter_any():
                    got += chunk
        assert got.startswith(b"data: x") and len(got) < 30 * 7, "cut at the deadline, and seen cut (no second answer head)"
        await eventually(lambda: slow.closed_by_peer >= 2, what="the upstream stream was cut at the deadline")
    finally:
        await slow.stop()
    await own_answer(proxy, upstream)
