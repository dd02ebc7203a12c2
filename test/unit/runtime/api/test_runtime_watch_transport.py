"""Watches and log follows over the transport's HTTP/1.1 pool.

The API server's side is an aiohttp.web app on loopback that streams as the
API server does (chunked, one JSON event per line), so the cases the real
server cannot be made to produce on demand are checked: a stream that goes
silent is given up after ``inactivity_timeout``; a stream cut short is a
transport failure; long-lived streams never take the requests' slots; and
a log follow asks for ``*/*`` and gets its lines whole.
"""

from __future__ import annotations

import asyncio
import time

import orjson
import pytest
from aiohttp import web

from kaiwo_ctrl.kaiwo_cli.cmd_logs import log_lines
from kaiwo_ctrl.runtime.api.client import ApiError, Client, RestConfig
from kaiwo_ctrl.runtime.api.resources import CONFIGMAPS

EVENT = {"type": "ADDED", "object": {"kind": "ConfigMap", "metadata": {"name": "a", "namespace": "ns", "resourceVersion": "5"}}}


class FakeServer:
    """Watches answer two events, then ``mode``: "silent" (hold the stream open), "cut" (drop it), "end"."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.accept: list[str] = []
        self.stop = asyncio.Event()  # ends a silent stream, so the server shuts down at once

    async def watch(self, request: web.Request) -> web.StreamResponse:
        if request.query.get("watch") != "true":
            return web.json_response({"kind": "ConfigMap", "metadata": {"name": "plain"}})
        resp = web.StreamResponse()
        await resp.prepare(request)
        await resp.write(orjson.dumps(EVENT) + b"\n" + orjson.dumps(EVENT | {"type": "MODIFIED"}) + b"\n")
        if self.mode == "silent":
            await self.stop.wait()
        elif self.mode == "cut":
            assert request.transport is not None
            request.transport.abort()
            return resp
        await resp.write_eof()
        return resp

    async def log(self, request: web.Request) -> web.StreamResponse:
        self.accept.append(request.headers.get("Accept", ""))
        resp = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await resp.prepare(request)
        for piece in (b"first li", b"ne\nsecond\nthi", b"rd"):
            await resp.write(piece)
            await asyncio.sleep(0.01)
        await resp.write_eof()
        return resp

    async def __aenter__(self) -> Client:
        app = web.Application()
        app.router.add_get("/api/v1/namespaces/ns/configmaps", self.watch)
        app.router.add_get("/api/v1/namespaces/ns/configmaps/plain", self.watch)
        app.router.add_get("/api/v1/namespaces/ns/pods/p/log", self.log)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.client = Client(RestConfig(host=f"http://127.0.0.1:{port}"), max_connections=1)
        return self.client

    async def __aexit__(self, *exc: object) -> None:
        self.stop.set()
        await self.client.close()
        await self.runner.cleanup()


async def _events(client: Client, inactivity: float) -> list[str]:
    seen = []
    async for ev in client.watch(CONFIGMAPS, "ns", inactivity_timeout=inactivity):
        seen.append(ev["type"])
    return seen


async def test_a_silent_watch_is_given_up_after_the_inactivity_limit():
    seen: list[str] = []
    async with FakeServer("silent") as client:
        t0 = time.monotonic()
        with pytest.raises(ApiError) as e:
            async for ev in client.watch(CONFIGMAPS, "ns", inactivity_timeout=0.5):
                seen.append(ev["type"])
        assert e.value.status == 0 and seen == ["ADDED", "MODIFIED"]
        assert 0.4 < time.monotonic() - t0 < 5


async def test_a_watch_cut_short_is_a_transport_failure_and_one_that_ends_is_not():
    async with FakeServer("cut") as client:
        with pytest.raises(ApiError) as e:
            await _events(client, 10)
        assert e.value.status == 0
    async with FakeServer("end") as client:
        assert await _events(client, 10) == ["ADDED", "MODIFIED"]


async def test_open_watches_leave_the_request_slots_free():
    """With one request slot, a watch held open does not block a GET."""
    async with FakeServer("silent") as client:
        watch = asyncio.create_task(_events(client, 30))
        await asyncio.sleep(0.2)
        assert not watch.done()
        async with asyncio.timeout(5):
            got = await client.get(CONFIGMAPS, "plain", "ns")
        assert got["metadata"]["name"] == "plain"
        watch.cancel()
        await asyncio.gather(watch, return_exceptions=True)


async def test_log_follow_asks_for_any_type_and_joins_lines_cut_across_chunks():
    server = FakeServer("end")
    async with server as client:
        pod = {"metadata": {"name": "p", "namespace": "ns"}}
        lines = [line async for line in log_lines(client, pod, "c", True, None)]
    assert lines == ["first line", "second", "third"]
    assert server.accept == ["*/*"]
