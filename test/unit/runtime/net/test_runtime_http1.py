"""The lean HTTP/1.1 client pool (kaiwo_ctrl/runtime/net/http1.py) against a local aiohttp server."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web

from kaiwo_ctrl.runtime.net.http1 import ConnectError, Pool, RemoteClosed
from support import eventually


class Server:
    """An aiohttp server on 127.0.0.1 whose handlers the tests script."""

    def __init__(self) -> None:
        self.peers: list[tuple[str, int]] = []
        self.seen: list[tuple[str, str, dict[str, str], bytes]] = []
        self.step = asyncio.Event()
        self.cancelled = 0
        self.runner: web.AppRunner | None = None
        self.authority = ""

    async def start(self) -> Server:
        app = web.Application()
        app.router.add_route("*", "/{name}", self.handle)
        self.runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.authority = f"127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
        return self

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.peers.append(request.transport.get_extra_info("peername"))  # type: ignore[union-attr]
        body = await request.read()
        self.seen.append((request.method, request.path_qs, dict(request.headers), body))
        name = request.match_info["name"]
        if name == "length":
            return web.Response(body=b"hello " + body, headers={"X-Up": "1"})
        if name == "close":
            return web.Response(body=b"bye", headers={"Connection": "close"})
        if name == "big":
            return web.Response(body=b"x" * (5 << 20))
        resp = web.StreamResponse()
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        if name == "chunks":
            await resp.write(b"one")
            await self.step.wait()
            await resp.write(b"two")
            await resp.write_eof()
        elif name == "reset":
            await resp.write(b"part")
            await asyncio.sleep(0.05)
            request.transport.abort()  # type: ignore[union-attr]
        elif name == "hold":
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                self.cancelled += 1
                raise
        return resp

    async def stop(self) -> None:
        assert self.runner is not None
        await self.runner.cleanup()


@pytest.fixture
async def server():
    s = await Server().start()
    yield s
    s.step.set()
    await s.stop()


@pytest.fixture
async def pool():
    p = Pool(connect_timeout=5)
    yield p
    await p.close()


async def test_content_length_body_headers_and_keep_alive_reuse(server, pool):
    for i in range(3):
        resp = await pool.request("POST", server.authority, f"/length?i={i}", [(b"X-Req", b"r")], b"world")
        assert resp.status == 200 and resp.content_length == 11 and resp.header(b"x-up") == b"1"
        assert await resp.read() == b"hello world" and resp.complete
        resp.release()
        assert pool.idle_count(server.authority) == 1
    method, path, headers, body = server.seen[-1]
    assert (method, path, body) == ("POST", "/length?i=2", b"world")
    assert headers["X-Req"] == "r" and headers["Host"] == server.authority and headers["Content-Length"] == "5"
    assert len(set(server.peers)) == 1, "one kept-alive connection served all three"


async def test_chunked_body_streams_as_it_arrives(server, pool):
    resp = await pool.request("GET", server.authority, "/chunks")
    assert resp.content_length is None
    it = aiter(resp)
    assert await anext(it) == b"one", "the first chunk arrives before the server writes the second"
    server.step.set()
    assert b"".join([c async for c in it]) == b"two"
    resp.release()
    assert pool.idle_count(server.authority) == 1


async def test_connection_close_is_not_reused(server, pool):
    async with await pool.request("GET", server.authority, "/close") as resp:
        assert await resp.read() == b"bye" and not resp.keep_alive
    assert pool.idle_count(server.authority) == 0
    async with await pool.request("GET", server.authority, "/length") as resp:
        assert await resp.read() == b"hello "
    assert len(set(server.peers)) == 2


async def test_reset_mid_body_raises_and_drops_the_connection(server, pool):
    resp = await pool.request("GET", server.authority, "/reset")
    with pytest.raises(RemoteClosed):
        async for _ in resp:
            pass
    resp.release()
    assert pool.idle_count(server.authority) == 0


async def test_large_body_with_flow_control(server):
    p = Pool(buffer_limit=64 * 1024)
    try:
        async with await p.request("GET", server.authority, "/big") as resp:
            assert len(await resp.read()) == 5 << 20
        assert p.idle_count(server.authority) == 1
    finally:
        await p.close()


async def test_read_timeout_and_cancel_close_the_connection(server):
    p = Pool(read_timeout=0.2)
    try:
        resp = await p.request("GET", server.authority, "/hold")  # headers come at once, then nothing
        with pytest.raises(TimeoutError):
            await resp.read()
        resp.release()
        await eventually(lambda: server.cancelled == 1, what="the server saw the client go")
    finally:
        await p.close()
    q = Pool()
    try:
        async def fetch() -> bytes:
            async with await q.request("GET", server.authority, "/hold") as resp:
                return await resp.read()

        task = asyncio.create_task(fetch())
        await eventually(lambda: len(server.seen) == 2, what="request arrived")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await eventually(lambda: server.cancelled == 2, what="cancelling the request closed its connection")
        assert q.idle_count(server.authority) == 0
    finally:
        await q.close()


async def test_abandoned_response_closes_the_connection(server, pool):
    resp = await pool.request("GET", server.authority, "/chunks")
    resp.release()  # not read to its end
    assert pool.idle_count(server.authority) == 0


async def test_refused_connection_is_a_connect_error(pool):
    with pytest.raises(ConnectError):
        await pool.request("GET", "127.0.0.1:1", "/")


async def test_idle_connection_closed_by_the_server_is_forgotten_and_replaced(pool):
    served = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        served.append(writer)
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.close()  # a keep-alive timeout on the server's side

    srv = await asyncio.start_server(handle, "127.0.0.1", 0)
    authority = f"127.0.0.1:{srv.sockets[0].getsockname()[1]}"
    try:
        async with await pool.request("GET", authority, "/") as resp:
            assert await resp.read() == b"ok"
        assert pool.idle_count(authority) == 1
        await eventually(lambda: pool.idle_count(authority) == 0, what="closed idle connection dropped")
        async with await pool.request("GET", authority, "/") as resp:
            assert await resp.read() == b"ok"
        assert len(served) == 2
    finally:
        srv.close()


async def test_body_delimited_by_connection_end():
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil")
        await writer.drain()
        writer.write(b" the end")
        writer.close()

    srv = await asyncio.start_server(handle, "127.0.0.1", 0)
    p = Pool()
    try:
        resp = await p.request("GET", f"127.0.0.1:{srv.sockets[0].getsockname()[1]}", "/")
        assert await resp.read() == b"until the end" and not resp.keep_alive
        resp.release()
    finally:
        await p.close()
        srv.close()


async def test_idle_connections_are_swept_after_the_idle_timeout(server):
    p = Pool(idle_timeout=0.2)
    try:
        async with await p.request("GET", server.authority, "/length") as resp:
            await resp.read()
        assert p.idle_count(server.authority) == 1
        await eventually(lambda: p.idle_count(server.authority) == 0, what="idle connection swept without new requests")
        async with await p.request("GET", server.authority, "/length") as resp:
            assert await resp.read() == b"hello "
    finally:
        await p.close()
