"""Request bodies that are not held whole (kaiwo_ctrl/runtime/net/http1body.py): the
server handing a body to its handler as it arrives (bounded, with back-pressure,
stalls and early answers), and the client sending one as it is produced."""

from __future__ import annotations

import asyncio
import hashlib
import re

import pytest

from kaiwo_ctrl.runtime.net.http1 import Pool, StreamBody
from kaiwo_ctrl.runtime.net.http1body import STREAM_BUFFER
from kaiwo_ctrl.runtime.net.http1budget import BodyBudget, BudgetBusy
from kaiwo_ctrl.runtime.net.http1server import Request, Response, Server
from support import eventually
from support.rawupstream import RawUpstream

HOLD = 64 << 10
READ = 256 << 10  # the most one read from a socket brings
BUDGET = 64 << 20
TEXT = [(b"Content-Type", b"text/plain")]


class Streamer:
    """Hashes a streamed body as it comes; ``answer_after`` answers 400 once that much came."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.gate.set()
        self.requests: list[Request] = []
        self.progress = 0
        self.cancelled = 0
        self.answer_after: int | None = None
        self.hold_after: int | None = None  # then the handler holds the body whole (BodyStream.hold_whole)
        self.holding = 0  # handlers waiting for hold_whole

    async def __call__(self, request: Request) -> Response:
        self.requests.append(request)
        if request.body_stream is None:
            return Response(200, TEXT, b"whole:%d" % len(request.body))
        h, n = hashlib.sha256(), 0
        try:
            async for chunk in request.body_stream.chunks():
                await self.gate.wait()
                h.update(chunk)
                n += len(chunk)
                self.progress = n
                if self.answer_after is not None and n >= self.answer_after:
                    return Response(400, TEXT, b"early")
                if self.hold_after is not None and n >= self.hold_after:
                    self.hold_after = None
                    self.holding += 1
                    try:
                        await request.body_stream.hold_whole()
                    except BudgetBusy:
                        return Response(503, TEXT, b"busy")
                    finally:
                        self.holding -= 1
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        return Response(200, TEXT, b"%d:%s" % (n, h.hexdigest().encode()))


@pytest.fixture
async def served():
    app = Streamer()
    server = Server(app, max_body_bytes=32 << 20, head_timeout=0.3, body_idle_timeout=0.3, body_budget=BUDGET,
                    stream_body=lambda r: HOLD if r.header(b"x-stream") else None)
    port = await server.start("127.0.0.1", 0)
    yield app, server, port
    app.gate.set()
    await server.close(drain_timeout=1)


def head(length: int, *extra: bytes) -> bytes:
    return b"\r\n".join([b"POST /up HTTP/1.1", b"Host: a", b"X-Stream: 1", b"Content-Length: %d" % length, *extra]) + b"\r\n\r\n"


def payload(n: int) -> bytes:
    return (bytes(range(256)) * (n // 256 + 1))[:n]


async def read_all(reader: asyncio.StreamReader) -> bytes:
    out = b""
    async with asyncio.timeout(10):
        while chunk := await reader.read(65536):
            out += chunk
    return out


def statuses(out: bytes) -> list[int]:
    return [int(s) for s in re.findall(rb"HTTP/1\.1 (\d{3}) ", out)]


async def test_streamed_body_reaches_the_handler_as_it_arrives_reserving_only_its_hold(served):
    app, server, port = served
    data = payload(8 << 20)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(head(len(data), b"Connection: close") + data[:1 << 20])
    await eventually(lambda: app.progress >= 1 << 20, what="the handler read the first MiB before the rest was sent")
    assert server.budget.free == BUDGET - (HOLD + 2 * STREAM_BUFFER), "only the hold and the unread buffer are reserved"
    writer.write(data[1 << 20:])
    out = await read_all(reader)
    writer.close()
    assert statuses(out) == [200] and out.endswith(b"%d:%s" % (len(data), hashlib.sha256(data).hexdigest().encode()))
    assert server.budget.free == BUDGET


async def test_expect_100_continue_is_answered_before_a_streamed_body(served):
    """curl asks ``Expect: 100-continue`` for uploads over 1 MiB: the interim answer comes first, once."""
    app, server, port = served
    data = payload(3 << 20)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(head(len(data), b"Expect: 100-continue", b"Connection: close"))
    async with asyncio.timeout(10):
        assert await reader.readuntil(b"\r\n\r\n") == b"HTTP/1.1 100 Continue\r\n\r\n"
    writer.write(data)
    out = await read_all(reader)
    writer.close()
    assert statuses(out) == [200] and out.endswith(hashlib.sha256(data).hexdigest().encode())


async def test_a_handler_that_does_not_read_pauses_the_client_without_a_408(served):
    app, server, port = served
    app.gate.clear()
    data = payload(16 << 20)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(head(len(data), b"Connection: close"))
    sender = asyncio.create_task(_send(writer, data))
    await eventually(lambda: app.requests and _conn(server)._stream_paused, what="reading paused")
    stream = app.requests[0].body_stream
    assert stream is not None and STREAM_BUFFER <= stream.buffered <= STREAM_BUFFER + READ
    await asyncio.sleep(1.0)  # over three body-idle timeouts: a pause the server made is not the client's stall
    assert stream.buffered <= STREAM_BUFFER + READ and not _conn(server).closed
    app.gate.set()
    out = await read_all(reader)
    await sender
    writer.close()
    assert statuses(out) == [200] and out.endswith(hashlib.sha256(data).hexdigest().encode())


async def test_an_early_answer_closes_after_the_rest_is_dropped(served):
    app, server, port = served
    app.answer_after = 1 << 20
    data = payload(4 << 20)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(head(len(data)))  # keep-alive asked for
    sender = asyncio.create_task(_send(writer, data))
    out = await read_all(reader)
    await sender
    writer.close()
    assert statuses(out) == [400] and b"Connection: close\r\n" in out and out.endswith(b"early")
    assert server.budget.free == BUDGET
    await _normal(port)


async def test_a_stall_mid_body_is_408_and_cancels_the_handler(served):
    app, server, port = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(head(1 << 20) + payload(300 << 10))
    out = await read_all(reader)
    writer.close()
    assert statuses(out) == [408] and out.endswith(b"request timeout")
    await eventually(lambda: app.cancelled == 1, what="the handler cancelled")
    assert server.budget.free == BUDGET
    await _normal(port)


async def test_a_client_gone_mid_body_cancels_the_handler(served):
    app, server, port = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(head(1 << 20) + payload(300 << 10))
    await eventually(lambda: app.progress >= 300 << 10, what="the handler read what came")
    writer.transport.abort()
    await eventually(lambda: app.cancelled == 1, what="the handler cancelled")
    await eventually(lambda: server.budget.free == BUDGET, what="the reservation given back")
    await _normal(port)


async def test_a_streamable_request_pipelined_behind_another_is_read_whole(served):
    app, server, port = served
    a, b = payload(1000), payload(2000)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(head(len(a)) + a + head(len(b), b"Connection: close") + b)
    out = await read_all(reader)
    writer.close()
    assert statuses(out) == [200, 200]
    assert b"1000:" + hashlib.sha256(a).hexdigest().encode() in out and out.endswith(b"whole:2000")


async def test_hold_whole_grows_the_reservation_to_the_whole_body(served):
    """A handler that finds it must hold the body whole after all has all of it counted before reading on."""
    app, server, port = served
    app.hold_after = HOLD
    data = payload(6 << 20)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(head(len(data), b"Connection: close") + data[:1 << 20])
    await eventually(lambda: BUDGET - server.budget.free == len(data), what="the whole body reserved")
    writer.write(data[1 << 20:])
    out = await read_all(reader)
    writer.close()
    assert statuses(out) == [200] and out.endswith(b"%d:%s" % (len(data), hashlib.sha256(data).hexdigest().encode()))
    assert server.budget.free == BUDGET


SMALL = 4 << 20


@pytest.fixture
async def small():
    """A server whose budget one whole 3 MiB body nearly fills, with a short budget wait."""
    app = Streamer()
    server = Server(app, max_body_bytes=32 << 20, head_timeout=5, body_idle_timeout=5, body_budget=SMALL, budget_wait=0.5,
                    stream_body=lambda r: HOLD if r.header(b"x-stream") else None)
    port = await server.start("127.0.0.1", 0)
    yield app, server, port
    app.gate.set()
    await server.close(drain_timeout=1)


async def _hog(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A whole-body request of 3 MiB whose body is still coming: its reservation stays."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"POST /n HTTP/1.1\r\nHost: a\r\nConnection: close\r\nContent-Length: %d\r\n\r\n" % (3 << 20) + payload(1000))
    return reader, writer


async def test_hold_whole_waits_in_turn_and_is_busy_after_the_budget_wait(small):
    app, server, port = small
    _, hog = await _hog(port)
    await eventually(lambda: server.budget.free == SMALL - (3 << 20), what="the whole body reserved")
    app.hold_after = HOLD
    data = payload(2 << 20)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(head(len(data), b"Connection: close") + data[:HOLD + 1000])
    async with asyncio.timeout(10):
        out = await reader.readuntil(b"busy")  # answered at once; the connection lingers for the rest of the body
    writer.close()
    assert statuses(out) == [503] and b"Connection: close\r\n" in out
    assert server.budget.free == SMALL - (3 << 20) and not server.budget._waiting, "nothing left reserved or queued"
    hog.close()
    await eventually(lambda: server.budget.free == SMALL, what="all given back")


async def test_hold_whole_is_granted_once_the_budget_frees(small):
    app, server, port = small
    hog_reader, hog = await _hog(port)
    await eventually(lambda: server.budget.free == SMALL - (3 << 20), what="the whole body reserved")
    server.budget_wait = 30
    app.hold_after = HOLD
    data = payload(2 << 20)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(head(len(data), b"Connection: close") + data[:HOLD + 1000])
    await eventually(lambda: app.holding == 1 and server.budget._waiting, what="the handler waiting for the budget")
    hog.write(payload(3 << 20)[1000:])
    assert statuses(await read_all(hog_reader)) == [200]
    hog.close()
    await eventually(lambda: SMALL - server.budget.free == len(data), what="the whole streamed body reserved")
    writer.write(data[HOLD + 1000:])
    out = await read_all(reader)
    writer.close()
    assert statuses(out) == [200] and out.endswith(hashlib.sha256(data).hexdigest().encode())
    assert server.budget.free == SMALL


async def test_a_client_gone_while_its_handler_waits_for_the_budget_leaves_nothing_reserved(small):
    app, server, port = small
    _, hog = await _hog(port)
    await eventually(lambda: server.budget.free == SMALL - (3 << 20), what="the whole body reserved")
    server.budget_wait = 30
    app.hold_after = HOLD
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(head(2 << 20) + payload(HOLD + 1000))
    await eventually(lambda: app.holding == 1, what="the handler waiting for the budget")
    writer.transport.abort()
    await eventually(lambda: app.cancelled == 1 and app.holding == 0, what="the handler cancelled")
    assert server.budget.free == SMALL - (3 << 20) and not server.budget._waiting
    hog.close()
    await eventually(lambda: server.budget.free == SMALL, what="all given back")


async def test_budget_reserve_granted_as_its_waiter_is_cancelled_gives_the_bytes_back():
    """The grant and the cancel land in one loop turn: the bytes granted to nobody go back."""
    budget = BodyBudget(100)
    assert budget.take(80, lambda: None)
    waiter = asyncio.create_task(budget.reserve(50, 30))
    await eventually(lambda: budget._waiting, what="queued")
    budget.give(80)  # grants the 50 ...
    waiter.cancel()  # ... to a waiter cancelled before it ran again
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert budget.free == 100 and not budget._waiting


async def _send(writer: asyncio.StreamWriter, data: bytes) -> None:
    try:
        for i in range(0, len(data), 64 << 10):
            writer.write(data[i:i + (64 << 10)])
            await writer.drain()
    except ConnectionError:
        pass


def _conn(server: Server):
    conns = list(server._conns)
    assert len(conns) == 1
    return conns[0]


async def _normal(port: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"POST /n HTTP/1.1\r\nHost: a\r\nConnection: close\r\nContent-Length: 4\r\n\r\nfine")
    out = await read_all(reader)
    writer.close()
    assert statuses(out) == [200] and out.endswith(b"whole:4")


# ------------------------------------------------------------------ the client
async def chunks_of(data: bytes, size: int = 64 << 10, fail_at: int | None = None):
    for i in range(0, len(data), size):
        if fail_at is not None and i >= fail_at:
            raise ConnectionResetError("the source went away")
        yield data[i:i + size]
        await asyncio.sleep(0)


@pytest.fixture
async def upstream():
    u = await RawUpstream(delay=0.01).start()
    yield u
    await u.stop()


async def test_pool_sends_a_stream_whole_on_a_new_connection(upstream):
    pool = Pool()
    try:
        async with await pool.request("POST", upstream.address, "/v1/x", [], b"first") as r:
            assert r.status == 200 and await r.read() == b'{"completion_for":"first"}'
        data = payload(3 << 20)
        async with await pool.request("POST", upstream.address, "/v1/x", [], StreamBody(len(data), chunks_of(data))) as r:
            assert r.status == 200 and len(await r.read()) > 0
        assert upstream.seen[1].header(b"content-length") == b"%d" % len(data)
        assert hashlib.sha256(upstream.seen[1].body).digest() == hashlib.sha256(data).digest()
        assert upstream.seen[1].conn == 2, "a stream never goes on a kept-alive connection"
        async with await pool.request("POST", upstream.address, "/v1/x", [], b"third") as r:
            assert await r.read() == b'{"completion_for":"third"}'
        assert pool.idle_count(upstream.address) == 2, "both connections kept after whole exchanges"
    finally:
        await pool.close()


async def test_pool_stream_failing_midway_closes_the_connection(upstream):
    pool = Pool()
    try:
        data = payload(2 << 20)
        with pytest.raises(ConnectionResetError):
            await pool.request("POST", upstream.address, "/v1/x", [], StreamBody(len(data), chunks_of(data, fail_at=1 << 20)))
        await eventually(lambda: upstream.closed_by_peer == 1, what="the upstream saw the request cut")
        assert upstream.seen == [] and pool.idle_count(upstream.address) == 0
    finally:
        await pool.close()


async def test_pool_reads_an_early_answer_and_never_reuses_that_connection():
    async def refuse(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await r.readuntil(b"\r\n\r\n")
        w.write(b"HTTP/1.1 413 Content Too Large\r\nContent-Length: 7\r\n\r\ntoo big")
        await w.drain()
        w.close()

    srv = await asyncio.start_server(refuse, "127.0.0.1", 0)
    addr = "127.0.0.1:%d" % srv.sockets[0].getsockname()[1]
    pool = Pool()
    try:
        data = payload(32 << 20)
        body = StreamBody(len(data), chunks_of(data))
        async with await pool.request("POST", addr, "/v1/x", [], body) as r:
            assert (r.status, await r.read()) == (413, b"too big")
        assert body.sent < len(data), "sending stopped once the server had answered and gone"
        assert pool.idle_count(addr) == 0
    finally:
        await pool.close()
        srv.close()
