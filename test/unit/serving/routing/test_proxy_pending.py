"""Requests without a first answer byte (``Endpoint.pending``): counted from the send to the first body byte.

The upstream is a raw server on loopback; the client side is a stand-in for the
proxy server's request (forward only calls ``stream`` on it and writes chunks).
"""

from __future__ import annotations

import asyncio

import pytest

from kaiwo_ctrl.runtime.net.http1 import Pool
from kaiwo_ctrl.runtime.cache.informer import Informer
from kaiwo_ctrl.kinds import MODELS
from kaiwo_ctrl.serving.routing.balance import Endpoint
from kaiwo_ctrl.serving.routing.endpoints import EndpointTracker, Group
from kaiwo_ctrl.serving.routing.exchange import Exchange
from kaiwo_ctrl.serving.proxy.forward import UpstreamFailed, forward
from kaiwo_ctrl.serving.routing.metrics import ProxyMetrics
from kaiwo_ctrl.serving.routing.resolve import Target
from kaiwo_ctrl.serving.routing.router import Router
from prometheus_client import CollectorRegistry
from support import eventually


class Client:
    """The client side: records what forward relays."""

    method = "POST"

    def __init__(self) -> None:
        self.chunks: list[bytes] = []
        self.ended = self.aborted = False

    async def stream(self, status, headers, length=None):
        self.status = status
        return self

    async def write(self, chunk: bytes) -> None:
        self.chunks.append(chunk)

    async def end(self) -> None:
        self.ended = True

    def abort(self) -> None:
        self.aborted = True


async def upstream(answer) -> tuple[asyncio.Server, str]:
    async def conn(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(next((ln.split(b":")[1] for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length")), b"0"))
            await reader.readexactly(length)
            await answer(writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(conn, "127.0.0.1", 0)
    return server, f"127.0.0.1:{server.sockets[0].getsockname()[1]}"


def endpoint(address: str) -> tuple[EndpointTracker, Group, Endpoint]:
    """The one endpoint of Model ns/m, in the tracker the router picks from."""
    tracker = EndpointTracker()
    group, ep = tracker.group(("ns", "m")), Endpoint("ns/p", address)
    group.upsert(ep)
    return tracker, group, ep


async def run_forward(tracker: EndpointTracker, client: Client, pool: Pool):
    router = Router(tracker, Informer(None, MODELS), ProxyMetrics(CollectorRegistry()), None, None)
    target = Target("ns", "m", "", {"spec": {}}, "m")
    return await forward(client, pool, "/v1/completions", b"{}", [], router, Exchange(target, "", 2))


async def test_a_stream_is_pending_until_its_first_chunk():
    first, rest = asyncio.Event(), asyncio.Event()

    async def answer(w):
        w.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        await w.drain()
        await first.wait()  # headers are out; the first token is not
        w.write(b"6\r\ndata:1\r\n")
        await w.drain()
        await rest.wait()
        w.write(b"6\r\ndata:2\r\n0\r\n\r\n")
        await w.drain()

    server, address = await upstream(answer)
    tracker, group, ep = endpoint(address)
    pool, client = Pool(), Client()
    task = asyncio.create_task(run_forward(tracker, client, pool))
    try:
        await eventually(lambda: ep.in_flight == 1, what="sent")
        await asyncio.sleep(0.05)
        assert ep.pending == 1, "headers alone are not an answer"
        first.set()
        await eventually(lambda: client.chunks, what="the first chunk relayed")
        assert (ep.pending, ep.in_flight) == (0, 1), "answering, still in flight"
        rest.set()
        await task
        assert (ep.pending, ep.in_flight) == (0, 0) and client.ended
    finally:
        first.set()
        rest.set()
        server.close()
        await pool.close()


@pytest.mark.parametrize("kind", ["whole", "refused", "broken"])
async def test_every_attempt_leaves_pending_as_it_was(kind):
    async def whole(w):
        w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await w.drain()

    async def broken(w):
        w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npartial")
        await w.drain()

    server, address = await upstream(whole if kind == "whole" else broken)
    if kind == "refused":
        server.close()
        await server.wait_closed()
    tracker, group, ep = endpoint(address)
    pool = Pool(connect_timeout=1, read_timeout=1)
    try:
        if kind == "whole":
            resp = await run_forward(tracker, Client(), pool)
            assert resp.status == 200
        else:
            with pytest.raises(UpstreamFailed):  # every retry fails alike
                await run_forward(tracker, Client(), pool)
        assert (ep.pending, ep.in_flight) == (0, 0)
    finally:
        server.close()
        await pool.close()
