"""The proxy as a manager runnable: routes, the HTTP server, wiring to the caches.

:func:`setup_proxy` asks the manager's cache for the Model and model-Pod
informers, registers the endpoint tracker on the Pod informer and returns a
:class:`ProxyServer`; its ``run`` serves on ``bind`` until cancelled. It runs in
every replica (not only the leader), after the caches have synced.

The HTTP server is :mod:`kaiwo_ctrl.runtime.http1server` (httptools): about
half the CPU per request of aiohttp's server, which was the larger part of
the proxy's own cost once the upstream hop had moved to the lean pool.
"""

from __future__ import annotations

import asyncio
import logging
from urllib.parse import unquote

from kaiwo_ctrl.kinds import MODELS
from kaiwo_ctrl.runtime.http1server import Request, Response, Server, Streamed
from kaiwo_ctrl.runtime.manager import Manager
from kaiwo_ctrl.serving.proxy.endpoints import EndpointTracker, model_pod_informer
from kaiwo_ctrl.serving.proxy.handler import ROUTES, ProxyHandler, internal_error
from kaiwo_ctrl.serving.proxy.limits import ProxyLimits
from kaiwo_ctrl.serving.proxy.metrics import ProxyMetrics
from kaiwo_ctrl.serving.proxy.resolve import Resolver
from kaiwo_ctrl.serving.proxy.scale import ScaleFromZero

log = logging.getLogger("kaiwo_ctrl.serving.proxy")

OPENAI_PREFIX = "/openai/v1/"
_TEXT = (b"Content-Type", b"text/plain; charset=utf-8")


def parse_bind(addr: str | None) -> tuple[str, int] | None:
    """``:8000`` -> all interfaces; ``0`` or empty disables."""
    if not addr or addr == "0":
        return None
    host, _, port = addr.rpartition(":")
    return (host.strip("[]") or "0.0.0.0", int(port))


def route(handler: ProxyHandler):
    """The routes: ``/openai/v1/<route>`` and ``/<namespace>/<model>/v1/<route>`` (POST), ``.../models`` (GET)."""

    async def dispatch(request: Request) -> Response | Streamed:
        path = request.path
        if "%" in path:
            path = unquote(path)
        if path.startswith(OPENAI_PREFIX):
            namespace = model = None
            rest = path[len(OPENAI_PREFIX):]
        else:
            parts = path.split("/", 4)  # "", namespace, model, "v1", route
            if len(parts) != 5 or parts[3] != "v1" or not parts[1] or not parts[2]:
                return Response(404, [_TEXT], b"404: Not Found")
            namespace, model, rest = parts[1], parts[2], parts[4]
        if rest == "models":
            if request.method != "GET":
                return Response(405, [_TEXT, (b"Allow", b"GET")], b"405: Method Not Allowed")
            return await handler.models(request, namespace, model)
        if rest in ROUTES:
            if request.method != "POST":
                return Response(405, [_TEXT, (b"Allow", b"POST")], b"405: Method Not Allowed")
            return await handler.proxy(request, rest, namespace, model)
        return Response(404, [_TEXT], b"404: Not Found")

    return dispatch


class ProxyServer:
    def __init__(self, handler: ProxyHandler, bind: tuple[str, int], drain_timeout: float = 10.0) -> None:
        self.handler, self.bind, self.drain_timeout = handler, bind, drain_timeout
        self.port: int | None = None
        self.started = asyncio.Event()

    async def run(self) -> None:
        await self.handler.start()
        # a client that disconnects cancels its request's task, which cancels the upstream
        # request and frees the endpoint slot; on shutdown, requests in flight get
        # drain_timeout to finish, then are cut
        lim = self.handler.limits
        server = Server(route(self.handler), max_body_bytes=lim.max_body_bytes, max_header_bytes=lim.max_head_bytes,
                        head_timeout=lim.head_timeout, body_idle_timeout=lim.body_idle_timeout, body_budget=lim.body_memory, budget_wait=lim.body_memory_wait,
                        error_response=internal_error)
        try:
            self.port = await server.start(self.bind[0], self.bind[1], backlog=4096)
            log.info("proxy serving", extra={"address": f"{self.bind[0]}:{self.port}"})
            self.started.set()
            await asyncio.Event().wait()
        finally:
            await server.close(self.drain_timeout)
            await self.handler.close()


def setup_proxy(
    mgr: Manager, bind: str, *, default_timeout: float | None = None, scale_from_zero: bool = True, limits: ProxyLimits | None = None,
) -> ProxyServer | None:
    """The proxy on ``bind``; ``limits`` (default: :class:`ProxyLimits` with ``default_timeout``) bound its requests."""
    addr = parse_bind(bind)
    if addr is None:
        return None
    tracker = EndpointTracker()
    model_pod_informer(mgr.cache).add_handler(tracker)
    resolver = Resolver(mgr.cache.informer(MODELS))
    metrics = ProxyMetrics(mgr.metrics.registry)
    scaler = ScaleFromZero(mgr.client) if scale_from_zero else None
    server = ProxyServer(ProxyHandler(resolver, tracker, metrics, scaler, default_timeout=default_timeout, limits=limits), addr)
    return server
