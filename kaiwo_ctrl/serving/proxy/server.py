"""The proxy as a manager runnable: routes, the HTTP server, wiring to the caches.

:func:`setup_proxy` asks the manager's cache for the Model and model-Pod
informers, registers the endpoint tracker on the Pod informer and returns a
:class:`ProxyServer`; its ``run`` serves on ``bind`` until cancelled. It runs in
every replica (not only the leader), after the caches have synced.
"""

from __future__ import annotations

import asyncio
import logging

from aiohttp import web

from kaiwo_ctrl.kinds import MODELS
from kaiwo_ctrl.runtime.manager import Manager
from kaiwo_ctrl.serving.proxy.endpoints import EndpointTracker, model_pod_informer
from kaiwo_ctrl.serving.proxy.handler import ProxyHandler
from kaiwo_ctrl.serving.proxy.metrics import ProxyMetrics
from kaiwo_ctrl.serving.proxy.resolve import Resolver
from kaiwo_ctrl.serving.proxy.scale import ScaleFromZero

log = logging.getLogger("kaiwo_ctrl.serving.proxy")

ROUTE = r"{route:(chat/completions|completions|embeddings|audio/transcriptions)}"


def parse_bind(addr: str | None) -> tuple[str, int] | None:
    """``:8000`` -> all interfaces; ``0`` or empty disables."""
    if not addr or addr == "0":
        return None
    host, _, port = addr.rpartition(":")
    return (host.strip("[]") or "0.0.0.0", int(port))


def build_app(handler: ProxyHandler) -> web.Application:
    app = web.Application(client_max_size=256 * 1024**2)
    app.add_routes([
        web.post(f"/openai/v1/{ROUTE}", handler.openai),
        web.get("/openai/v1/models", handler.models),
        web.post("/{namespace}/{model}/v1/" + ROUTE, handler.namespaced),
        web.get("/{namespace}/{model}/v1/models", handler.models),
    ])
    return app


class ProxyServer:
    def __init__(self, handler: ProxyHandler, bind: tuple[str, int], drain_timeout: float = 10.0) -> None:
        self.handler, self.bind, self.drain_timeout = handler, bind, drain_timeout
        self.port: int | None = None
        self.started = asyncio.Event()

    async def run(self) -> None:
        await self.handler.start()
        # handler_cancellation: a client that disconnects cancels its handler,
        # which cancels the upstream request and frees the endpoint slot.
        # on shutdown, requests in flight get drain_timeout to finish, then are cut
        runner = web.AppRunner(build_app(self.handler), access_log=None, handler_cancellation=True,
                               shutdown_timeout=self.drain_timeout)
        await runner.setup()
        try:
            site = web.TCPSite(runner, self.bind[0], self.bind[1], reuse_address=True, backlog=4096)
            await site.start()
            self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            log.info("proxy serving", extra={"address": f"{self.bind[0]}:{self.port}"})
            self.started.set()
            await asyncio.Event().wait()
        finally:
            await runner.cleanup()
            await self.handler.close()


def setup_proxy(mgr: Manager, bind: str, *, default_timeout: float | None = None, scale_from_zero: bool = True) -> ProxyServer | None:
    addr = parse_bind(bind)
    if addr is None:
        return None
    tracker = EndpointTracker()
    model_pod_informer(mgr.cache).add_handler(tracker)
    resolver = Resolver(mgr.cache.informer(MODELS))
    metrics = ProxyMetrics(mgr.metrics.registry)
    scaler = ScaleFromZero(mgr.client) if scale_from_zero else None
    server = ProxyServer(ProxyHandler(resolver, tracker, metrics, scaler, default_timeout=default_timeout), addr)
    return server
