"""The lean HTTP/1.1 server (kaiwo_ctrl/runtime/net/http1server.py), driven by aiohttp's client and raw sockets."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from kaiwo_ctrl.runtime.net.http1server import Request, Response, Server
from support import eventually


class App:
    def __init__(self) -> None:
        self.step = asyncio.Event()
        self.cancelled = 0
        self.finished = 0
        self.conns: set[int] = set()

    async def __call__(self, request: Request):
        self.conns.add(id(request._conn))
        name = request.path.strip("/")
        if name == "echo":
            headers = [(b"Content-Type", b"text/plain"), (b"X-Query", request.query.encode())]
            return Response(200, headers, request.method.encode() + b" " + request.body)
        if name == "stream":
            s = await request.stream(200, [(b"Content-Type", b"text/event-stream")])
            await s.write(b"data: one\n\n")
            await self.step.wait()
            await s.write(b"data: two\n\n")
            return s
        if name == "broken":
            s = await request.stream(200, [])
            await s.write(b"part")
            s.abort()
            return s
        if name == "hold":
            try:
                await self.step.wait()
            except asyncio.CancelledError:
                self.cancelled += 1
                raise
            self.finished += 1
            return Response(200, [], b"done")
        if name == "big":
            s = await request.stream(200, [])
            for _ in range(128):
                await s.write(b"z" * 65536)  # waits while the client's socket buffer is full
            return s
        if name == "fail":
            raise RuntimeError("boom")
        return Response(404, [], b"")


@pytest.fixture
async def served():
    app = App()
    server = Server(app, max_body_bytes=1024, max_header_bytes=2048)
    port = await server.start("127.0.0.1", 0)
    yield app, server, f"http://127.0.0.1:{port}", port
    app.step.set()
    await server.close(drain_timeout=1)


async def raw(port: int, data: bytes, until: bytes = b"", read_all: bool = False) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        if read_all:
            return await asyncio.wait_for(reader.read(-1), 10)
        out = b""
        while until not in out:
            chunk = await asyncio.wait_for(reader.read(65536), 10)
            if not chunk:
                break
            out += chunk
        return out
    finally:
        writer.close()


async def test_whole_responses_keep_alive_query_and_date(served):
    app, _, url, _ = served
    async with aiohttp.ClientSession() as s:
        for i in range(3):
            async with s.post(f"{url}/echo?i={i}", data=b"hi") as r:
                assert r.status == 200 and await r.read() == b"POST hi"
                assert r.headers["X-Query"] == f"i={i}" and r.headers["Content-Length"] == "7" and "Date" in r.headers
    assert len(app.conns) == 1, "one kept-alive connection"


async def test_chunked_request_body_is_decoded(served):
    _, _, url, _ = served

    async def body():
        yield b"a" * 10
        yield b"b" * 10

    async with aiohttp.ClientSession() as s, s.post(f"{url}/echo", data=body()) as r:
        assert await r.read() == b"POST " + b"a" * 10 + b"b" * 10


async def test_stream_is_sent_as_written(served):
    app, _, url, _ = served
    async with aiohttp.ClientSession() as s, s.get(f"{url}/stream") as r:
        assert r.headers["Transfer-Encoding"] == "chunked"
        assert await r.content.readline() == b"data: one\n", "the first chunk arrives before the handler writes the next"
        app.step.set()
        assert await r.read() == b"\ndata: two\n\n"


async def test_aborted_stream_is_incomplete_for_the_client(served):
    _, _, url, _ = served
    async with aiohttp.ClientSession() as s:
        with pytest.raises(aiohttp.ClientPayloadError):
            async with s.get(f"{url}/broken") as r:
                await r.read()


async def test_client_disconnect_cancels_the_handler(served):
    app, _, url, _ = served
    async with aiohttp.ClientSession() as s:
        with pytest.raises(asyncio.TimeoutError):
            await s.get(f"{url}/hold", timeout=aiohttp.ClientTimeout(total=0.3))
    await eventually(lambda: app.cancelled == 1, what="handler cancelled")


async def test_handler_error_is_500_and_unknown_path_404(served):
    _, _, url, _ = served
    async with aiohttp.ClientSession() as s:
        async with s.get(f"{url}/fail") as r:
            assert r.status == 500
        async with s.get(f"{url}/nope") as r:
            assert r.status == 404


async def test_pipelined_requests_answered_in_order(served):
    _, _, _, port = served
    req = b"POST /echo?n=%d HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\n%d"
    out = await raw(port, b"".join(req % (i, i) for i in range(3)), until=b"POST 2")
    assert out.count(b"HTTP/1.1 200 OK") == 3
    assert out.index(b"POST 0") < out.index(b"POST 1") < out.index(b"POST 2")


async def test_expect_100_continue(served):
    _, _, _, port = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n")
        assert await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10) == b"HTTP/1.1 100 Continue\r\n\r\n"
        writer.write(b"ok")
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        assert head.startswith(b"HTTP/1.1 200 OK") and await reader.readexactly(7) == b"POST ok"
    finally:
        writer.close()


async def test_limits_and_bad_requests(served):
    _, _, _, port = served
    big = await raw(port, b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n" + b"x" * 5000, read_all=True)
    assert big.startswith(b"HTTP/1.1 413 ")
    head = await raw(port, b"GET /echo HTTP/1.1\r\nHost: x\r\nX-Big: " + b"y" * 4000 + b"\r\n\r\n", read_all=True)
    assert head.startswith(b"HTTP/1.1 431 ")
    bad = await raw(port, b"NOT HTTP AT ALL\r\n\r\n", read_all=True)
    assert bad.startswith(b"HTTP/1.1 400 ")
    both = await raw(port, b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
                     read_all=True)
    assert both.startswith(b"HTTP/1.1 400 "), "ambiguous framing is refused (request smuggling)"


async def test_head_answer_has_no_body_and_keeps_the_connection_usable(served):
    _, _, _, port = served
    out = await raw(port, b"HEAD /echo HTTP/1.1\r\nHost: x\r\n\r\nPOST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nq",
                    until=b"POST q")
    first, _, rest = out.partition(b"\r\n\r\n")
    assert b"Content-Length: 5" in first and rest.startswith(b"HTTP/1.1 200 OK"), out


async def test_http10_closes_and_streams_close_delimited(served):
    app, _, _, port = served
    out = await raw(port, b"POST /echo HTTP/1.0\r\nContent-Length: 1\r\n\r\nz", read_all=True)
    assert out.startswith(b"HTTP/1.0 200 OK") and b"Connection: close" in out and out.endswith(b"POST z")
    app.step.set()
    out = await raw(port, b"GET /stream HTTP/1.0\r\n\r\n", read_all=True)
    assert b"Transfer-Encoding" not in out and out.endswith(b"data: one\n\ndata: two\n\n")


async def test_close_drains_requests_in_flight(served):
    app, server, url, _ = served
    async with aiohttp.ClientSession() as s:
        pending = asyncio.create_task(s.get(f"{url}/hold"))
        await eventually(lambda: server._in_flight == 1, what="request in flight")
        closing = asyncio.create_task(server.close(drain_timeout=10))
        await asyncio.sleep(0.1)
        app.step.set()
        r = await pending
        assert r.status == 200 and await r.read() == b"done"
        await closing
    assert app.finished == 1 and app.cancelled == 0


async def test_large_stream_to_a_slow_reader_waits_for_the_socket(served):
    _, _, _, port = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 16)
    try:
        writer.write(b"GET /big HTTP/1.0\r\n\r\n")
        await asyncio.sleep(0.2)  # let the server fill the socket buffers and pause
        data = await asyncio.wait_for(reader.read(-1), 30)
        assert data.endswith(b"z" * 1000) and len(data.partition(b"\r\n\r\n")[2]) == 128 * 65536
    finally:
        writer.close()
