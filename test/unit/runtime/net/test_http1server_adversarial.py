"""The HTTP/1.1 server (kaiwo_ctrl/runtime/net/http1server.py) against hostile clients:
stalls in the head or the body, oversized bodies, smuggling attempts, deep
pipelining. Each case asserts the exact answer, and that a normal request on
a new connection is still served."""

from __future__ import annotations

import asyncio
import re

import pytest

from kaiwo_ctrl.runtime.net.http1budget import BodyBudget
from kaiwo_ctrl.runtime.net.http1server import Request, Response, Server
from support import eventually
from support.echoapp import Echo



@pytest.fixture
async def served():
    app = Echo()
    server = Server(app, max_body_bytes=1 << 20, max_header_bytes=4096, head_timeout=0.3, body_idle_timeout=0.3)
    port = await server.start("127.0.0.1", 0)
    yield app, port
    app.gate.set()
    await server.close(drain_timeout=1)


async def exchange(port: int, data: bytes, *, close_write: bool = False) -> bytes:
    """Send ``data`` and read until the server closes (or 5 s pass)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        if close_write:
            writer.write_eof()
        out = b""
        async with asyncio.timeout(5):
            while chunk := await reader.read(65536):
                out += chunk
        return out
    finally:
        writer.close()


def status_lines(out: bytes) -> list[bytes]:
    return re.findall(rb"HTTP/1\.1 \d{3} [^\r]*", out)


async def normal_request_works(port: int, body: bytes = b"fine") -> None:
    req = b"POST /x HTTP/1.1\r\nHost: a\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%b" % (len(body), body)
    out = await exchange(port, req)
    assert status_lines(out) == [b"HTTP/1.1 200 OK"] and out.endswith(b"echo:" + body)


async def test_stall_in_the_head_is_408(served):
    app, port = served
    out = await exchange(port, b"POST /x HTTP/1.1\r\nHo")  # then nothing
    assert status_lines(out) == [b"HTTP/1.1 408 Request Timeout"]
    assert app.handled == []
    await normal_request_works(port)


async def test_stall_in_the_body_is_408(served):
    app, port = served
    out = await exchange(port, b"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\nabc")
    assert status_lines(out) == [b"HTTP/1.1 408 Request Timeout"]
    assert app.handled == []
    await normal_request_works(port)


async def test_slow_but_steady_body_is_not_cut(served):
    app, port = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(b"POST /x HTTP/1.1\r\nHost: a\r\nConnection: close\r\nContent-Length: 5\r\n\r\n")
        for b in b"slow!":
            await asyncio.sleep(0.15)  # each pause under the idle limit, the whole over it
            writer.write(bytes([b]))
        out = await asyncio.wait_for(reader.read(-1), 5)
    finally:
        writer.close()
    assert status_lines(out) == [b"HTTP/1.1 200 OK"] and out.endswith(b"echo:slow!")


async def test_oversized_body_is_413_before_it_is_read_and_without_100_continue(served):
    app, port = served
    head = b"POST /x HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n" % ((1 << 20) + 1)
    out = await exchange(port, head)  # the body is never sent: the answer must come anyway
    assert status_lines(out) == [b"HTTP/1.1 413 Request Entity Too Large"]
    assert b"100 Continue" not in out and app.handled == []
    await normal_request_works(port)


async def test_expect_100_continue_is_answered_here(served):
    app, port = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(b"POST /x HTTP/1.1\r\nHost: a\r\nConnection: close\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n")
        assert await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5) == b"HTTP/1.1 100 Continue\r\n\r\n"
        writer.write(b"body")
        out = await asyncio.wait_for(reader.read(-1), 5)
    finally:
        writer.close()
    assert status_lines(out) == [b"HTTP/1.1 200 OK"] and out.endswith(b"echo:body")


async def test_unknown_expectation_is_417(served):
    app, port = served
    out = await exchange(port, b"POST /x HTTP/1.1\r\nHost: a\r\nExpect: 200-ok\r\nContent-Length: 1\r\n\r\nx")
    assert status_lines(out) == [b"HTTP/1.1 417 Expectation Failed"] and app.handled == []


async def test_oversized_chunked_body_is_413(served):
    app, port = served
    chunk = b"%x\r\n%b\r\n" % (64 << 10, b"z" * (64 << 10))
    out = await exchange(port, b"POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n" + chunk * 17)
    assert status_lines(out) == [b"HTTP/1.1 413 Request Entity Too Large"] and app.handled == []
    await normal_request_works(port)


async def upload(port: int, head: bytes, total: int) -> tuple[bytes, Exception | None]:
    """Send ``head`` and ``total`` bytes of chunked body as fast as the server takes them, then read the answer."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    chunk = b"%x\r\n%b\r\n" % (64 << 10, b"z" * (64 << 10))
    failed: Exception | None = None
    try:
        writer.write(head)
        for _ in range(total // (64 << 10)):
            writer.write(chunk)
            await writer.drain()
    except OSError as e:  # reset while uploading: the server closed with bytes unread
        failed = e
    out = b""
    try:
        async with asyncio.timeout(5):
            while data := await reader.read(65536):
                out += data
    except OSError as e:
        failed = failed or e
    finally:
        writer.close()
    return out, failed


async def test_a_refused_upload_still_gets_its_413_and_is_not_reset(served):
    # a client that uploads 16 MiB into a 1 MiB limit without reading: closing with its bytes
    # unread would reset the connection, and the 413 could be lost; the server half-closes and
    # drops the rest instead, so every write succeeds and the answer arrives whole
    app, port = served
    out, failed = await upload(port, b"POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n", 16 << 20)
    assert failed is None
    assert status_lines(out) == [b"HTTP/1.1 413 Request Entity Too Large"] and out.endswith(b"request body too large")
    assert app.handled == []
    await normal_request_works(port)


async def test_a_client_that_keeps_sending_after_a_refusal_is_cut_off_after_the_linger_time():
    app = Echo()
    server = Server(app, max_body_bytes=1000, head_timeout=5, body_idle_timeout=5, linger_timeout=0.3)
    port = await server.start("127.0.0.1", 0)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 5000\r\n\r\n")
        head = await reader.readuntil(b"\r\n\r\n")
        assert status_lines(head) == [b"HTTP/1.1 413 Request Entity Too Large"]
        assert len(server._conns) == 1  # half-closed, dropping what comes

        async def trickle() -> None:  # the client ignores the answer and sends on, a byte every 50 ms
            with pytest.raises(OSError):
                async with asyncio.timeout(10):
                    while True:
                        writer.write(b"x")
                        await writer.drain()
                        await asyncio.sleep(0.05)

        sender = asyncio.create_task(trickle())
        await eventually(lambda: not server._conns, timeout=5, what="the server closed the connection after its linger time")
        await sender  # the client's writes now fail: the connection is gone, not held open by its trickle
        writer.close()
        assert app.handled == []
    finally:
        await server.close(drain_timeout=1)


@pytest.mark.parametrize("attack", [
    # request smuggling: two framings, two lengths, a folded header, bad chunk sizes, a bare LF
    b"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\n\r\n",
    b"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nContent-Length: 30\r\n\r\nbody",
    b"POST /x HTTP/1.1\r\nHost: a\r\nX-Folded: a\r\n b\r\nContent-Length: 4\r\n\r\nbody",
    b"POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nbody\r\n0\r\n\r\n",
    b"POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n-4\r\nbody\r\n0\r\n\r\n",
    b"POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, identity\r\n\r\n4\r\nbody\r\n0\r\n\r\n",
    b"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: -4\r\n\r\nbody",
    b"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nX-Inject: a\rb\r\n\r\nbody",
])
async def test_smuggling_attempts_are_400_and_nothing_reaches_the_handler(served, attack):
    app, port = served
    out = await exchange(port, attack)
    assert status_lines(out) == [b"HTTP/1.1 400 Bad Request"]
    assert app.handled == []
    await normal_request_works(port)


async def test_deep_pipelining_is_answered_in_order_with_bounded_reading(served):
    app, port = served
    app.gate.clear()
    reqs = b"".join(b"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\n%03d" % i for i in range(200))
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(reqs + b"POST /x HTTP/1.1\r\nHost: a\r\nConnection: close\r\nContent-Length: 4\r\n\r\nlast")
        await asyncio.sleep(0.2)
        assert app.handled == [b"000"], "the first request is being answered; the rest wait, unread or parsed"
        app.gate.set()
        out = await asyncio.wait_for(reader.read(-1), 10)
    finally:
        writer.close()
    answers = [part.split(b"\r\n\r\n", 1)[1][:8] for part in out.split(b"HTTP/1.1 200 OK")[1:]]
    assert answers == [b"echo:%03d" % i for i in range(200)] + [b"echo:las"]


async def test_pipelined_request_over_the_limit_after_a_good_one(served):
    app, port = served
    good = b"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\n\r\ngood"
    big = b"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n\r\n" % (2 << 20)
    out = await exchange(port, good + big + b"z" * 1000)
    assert status_lines(out) == [b"HTTP/1.1 200 OK", b"HTTP/1.1 413 Request Entity Too Large"], out[:300]
    assert b"echo:good" in out and app.handled == [b"good"], "the good request before it is answered first"
    await normal_request_works(port)


def test_body_budget_grants_in_order_and_never_part_of_a_body():
    budget = BodyBudget(100)
    granted: list[str] = []
    assert budget.take(60, lambda: granted.append("a"))
    assert not budget.take(50, lambda: granted.append("b")), "only 40 left"
    assert not budget.take(10, lambda: granted.append("c")), "queued behind b, though it would fit"
    budget.give(60)
    assert granted == ["b", "c"] and budget.free == 40


async def test_bodies_wait_for_the_budget_then_503():
    app = Echo()
    app.gate.clear()
    server = Server(app, max_body_bytes=1000, body_budget=1000, budget_wait=0.5, head_timeout=5, body_idle_timeout=5)
    port = await server.start("127.0.0.1", 0)
    try:
        first = asyncio.create_task(exchange(port, b"POST /x HTTP/1.1\r\nHost: a\r\nConnection: close\r\nContent-Length: 800\r\n\r\n" + b"a" * 800))
        await eventually(lambda: app.handled == [b"a" * 800], what="the first body is in and held")
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST /x HTTP/1.1\r\nHost: a\r\nConnection: close\r\nExpect: 100-continue\r\nContent-Length: 500\r\n\r\n")
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 0.2)  # no 100 Continue: its body does not fit yet
        app.gate.set()
        assert await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5) == b"HTTP/1.1 100 Continue\r\n\r\n"
        writer.write(b"b" * 500)
        out = await asyncio.wait_for(reader.read(-1), 5)
        writer.close()
        assert status_lines(out) == [b"HTTP/1.1 200 OK"] and out.endswith(b"echo:" + b"b" * 500)
        assert status_lines(await first) == [b"HTTP/1.1 200 OK"]
        app.gate.clear()
        held = asyncio.create_task(exchange(port, b"POST /x HTTP/1.1\r\nHost: a\r\nConnection: close\r\nContent-Length: 900\r\n\r\n" + b"c" * 900))
        await eventually(lambda: len(app.handled) == 3, what="the third body is in and held")
        out = await exchange(port, b"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 200\r\n\r\n")
        assert status_lines(out) == [b"HTTP/1.1 503 Service Unavailable"], "waited budget_wait for the budget"
        app.gate.set()
        assert status_lines(await held) == [b"HTTP/1.1 200 OK"]
        await eventually(lambda: server.budget.free == 1000, what="every reservation given back")
    finally:
        app.gate.set()
        await server.close(drain_timeout=1)


async def test_a_new_answer_after_a_stream_began_breaks_the_stream_off():
    """A deadline that passes mid-stream makes the handler answer 504, but the
    stream's 200 went out already: the client must see a broken stream, not a second head."""
    async def handler(request: Request) -> Response:
        s = await request.stream(200, [(b"Content-Type", b"text/event-stream")])
        await s.write(b"data: one\n\n")
        return Response(504, [], b"late")

    server = Server(handler)
    port = await server.start("127.0.0.1", 0)
    try:
        out = await exchange(port, b"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n")
    finally:
        await server.close(drain_timeout=1)
    assert status_lines(out) == [b"HTTP/1.1 200 OK"] and b"late" not in out
    assert out.endswith(b"data: one\n\n\r\n"), "no last chunk: the client sees the stream cut"


async def test_handler_failure_text_never_reaches_the_client():
    from kaiwo_ctrl.serving.proxy.handler import internal_error

    async def handler(request: Request) -> Response:
        raise RuntimeError("secret-internal-detail at /srv/app.py line 12")

    server = Server(handler, error_response=internal_error)
    port = await server.start("127.0.0.1", 0)
    try:
        out = await exchange(port, b"POST /x HTTP/1.1\r\nHost: a\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
    finally:
        await server.close(drain_timeout=1)
    assert status_lines(out) == [b"HTTP/1.1 500 Internal Server Error"]
    assert out.split(b"\r\n\r\n", 1)[1] == b'{"error":{"message":"Internal Server Error","type":"server_error","code":500}}'
