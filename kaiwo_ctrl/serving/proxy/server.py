"""The proxy's server: routes, the HTTP server, wiring to the manager's caches.

A manager runnable (:meth:`ProxyServer.serve`) on every replica, added by :func:`setup_proxy`.

:func:`setup_proxy` asks the manager's cache for the Model and model-Pod
informers, registers the endpoint tracker on the Pod informer and returns a
:class:`ProxyServer`; its ``run`` serves on ``bind`` until cancelled. It runs in
every replica (not only the leader), after the caches have synced.

The HTTP server is :mod:`kaiwo_ctrl.runtime.net.http1server` (httptools): about
half the CPU per request of aiohttp's server, which was the larger part of
the proxy's own cost once the upstream hop had moved to the lean pool.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from urllib.parse import unquote

from kaiwo_ctrl.kinds import MODELS
from kaiwo_ctrl.runtime.api.client import ApiError
from kaiwo_ctrl.runtime.cache.informerapi import Backoff
from kaiwo_ctrl.runtime.net.http1server import HeadGate, Request, Response, Server, Streamed
from kaiwo_ctrl.runtime.manager.manager import Manager
from kaiwo_ctrl.runtime.process.listeners import ListenerError, bind_reason
from kaiwo_ctrl.serving.proxy.auth import AuthConfig, Authorizer
from kaiwo_ctrl.serving.routing.endpoints import EndpointTracker, model_pod_informer
from kaiwo_ctrl.serving.routing.fairevents import SaturationEvents
from kaiwo_ctrl.aim.fence import TOKEN_HEADER_KEY, RouteFence, RouteKeyError
from kaiwo_ctrl.serving.proxy.handler import ROUTES, ProxyHandler, error_response, internal_error
from kaiwo_ctrl.serving.limits import ProxyLimits
from kaiwo_ctrl.serving.routing.metrics import ProxyMetrics
from kaiwo_ctrl.serving.routing.resolve import Resolver
from kaiwo_ctrl.serving.proxy.scale import ScaleFromZero
from kaiwo_ctrl.serving.routing.weights import NamespaceWeights

log = logging.getLogger("kaiwo_ctrl.serving.proxy")

OPENAI_PREFIX = "/openai/v1/"
_TEXT = (b"Content-Type", b"text/plain; charset=utf-8")


def parse_bind(addr: str | None) -> tuple[str, int] | None:
    """``:8000`` -> all interfaces; ``0`` or empty disables."""
    if not addr or addr == "0":
        return None
    host, _, port = addr.rpartition(":")
    return (host.strip("[]") or "0.0.0.0", int(port))


async def _authorize(handler: ProxyHandler, request: Request) -> Response | None:
    """The caller check (serving/proxy/auth.py), from the head alone: None with ``request.admitted`` set to
    the caller, or the refusal to send."""
    assert handler.auth is not None
    decision = await handler.auth.authorize(request.method, request.path, request.headers)
    if decision.status != 200:
        handler.metrics.auth_refused.labels(str(decision.status)).inc()
        return error_response(decision.status, decision.message)
    request.admitted = decision.caller
    return None


def auth_gate(handler: ProxyHandler) -> HeadGate | None:
    """The in-cluster listener's head gate: the caller check runs when the head is complete, so a refused
    caller's body is never budgeted nor read (None with ``--proxy-auth none``)."""
    if handler.auth is None:
        return None
    return lambda request: _authorize(handler, request)


async def _serve(handler: ProxyHandler, request: Request, namespace: str | None, model: str | None, rest: str) -> Response | Streamed:
    if handler.auth is not None and request.admitted is None:
        # checked here too when no head gate ran (the routes never depend on how the listener is wired):
        # nothing below runs for a refused caller
        refused = await _authorize(handler, request)
        if refused is not None:
            return refused
    caller = request.admitted
    if rest == "models":
        if request.method != "GET":
            return Response(405, [_TEXT, (b"Allow", b"GET")], b"405: Method Not Allowed")
        return await handler.models(request, namespace, model, caller)
    if rest in ROUTES:
        if request.method != "POST":
            return Response(405, [_TEXT, (b"Allow", b"POST")], b"405: Method Not Allowed")
        return await handler.proxy(request, rest, namespace, model, caller)
    return Response(404, [_TEXT], b"404: Not Found")


def _path(request: Request) -> str:
    path = request.path
    return unquote(path) if "%" in path else path


def route(handler: ProxyHandler):
    """The routes: ``/openai/v1/<route>`` and ``/<namespace>/<model>/v1/<route>`` (POST), ``.../models`` (GET)."""

    async def dispatch(request: Request) -> Response | Streamed:
        path = _path(request)
        if path.startswith(OPENAI_PREFIX):
            namespace = model = None
            rest = path[len(OPENAI_PREFIX):]
        else:
            parts = path.split("/", 4)  # "", namespace, model, "v1", route
            if len(parts) != 5 or parts[3] != "v1" or not parts[1] or not parts[2]:
                return Response(404, [_TEXT], b"404: Not Found")
            namespace, model, rest = parts[1], parts[2], parts[4]
        return await _serve(handler, request, namespace, model, rest)

    return dispatch


def _gateway_parts(request: Request, fence: RouteFence) -> list[str] | None:
    """``/<namespace>/<model>/v1/<route>`` carrying the namespace's route token, split; else None."""
    parts = _path(request).split("/", 4)  # "", namespace, model, "v1", route
    if len(parts) != 5 or parts[3] != "v1" or not parts[1] or not parts[2]:
        return None
    return parts if fence.ok(parts[1], request.header_values(TOKEN_HEADER_KEY)) else None


def gateway_gate(handler: ProxyHandler, fence: RouteFence) -> HeadGate:
    """The Gateway listener's head gate (``http1server``'s ``head_gate``): only ``/<namespace>/<model>/v1/<route>``
    with the namespace's route token (see :mod:`kaiwo_ctrl.aim.fence`) passes; anything else, ``/openai/v1``
    included, is one and the same 404, given when the head is complete, before any of the body is budgeted
    or read and before the Model is looked up, so it tells nothing of what exists and costs no memory.
    A request that passes takes its body memory from its namespace's share (the Gateway's address is
    every tenant's), and its caller is checked next, as :func:`auth_gate` does."""
    refused = handler.metrics.gateway_refused

    def gate(request: Request) -> Response | Awaitable[Response | None] | None:
        parts = _gateway_parts(request, fence)
        if parts is None:
            refused.inc()
            return error_response(404, "not found")
        request.budget_key = ("namespace", parts[1])
        # then the caller's bearer token, as on the in-cluster listener, still before any body byte
        return _authorize(handler, request) if handler.auth is not None else None

    return gate


def gateway_route(handler: ProxyHandler, fence: RouteFence):
    """The Gateway listener's routes: the same check as :func:`gateway_gate` (which runs first, at the head),
    kept here too so the routes never depend on how the listener is wired."""
    refused = handler.metrics.gateway_refused

    async def dispatch(request: Request) -> Response | Streamed:
        parts = _gateway_parts(request, fence)
        if parts is None:
            refused.inc()
            return error_response(404, "not found")
        # the route token first (no API call), then the caller's bearer token as on the in-cluster listener
        return await _serve(handler, request, parts[1], parts[2], parts[4])

    return dispatch


class ProxyServer:
    """The in-cluster listener on ``bind`` and, with ``gateway_bind``, the fenced Gateway
    listener; ``route_fence`` checks its route tokens (its key read before that listener opens)."""

    def __init__(self, handler: ProxyHandler, bind: tuple[str, int], drain_timeout: float = 10.0, *,
                 gateway_bind: tuple[str, int] | None = None, route_fence: RouteFence | None = None) -> None:
        self.handler, self.bind, self.drain_timeout = handler, bind, drain_timeout
        self.gateway_bind, self.route_fence = gateway_bind, route_fence
        self.port: int | None = None
        self.gateway_port: int | None = None
        self.started = asyncio.Event()
        self.gateway_started = asyncio.Event()
        self.servers: list[Server] = []  # while running: the listeners' HTTP servers (their body budgets, for tests)

    def _server(self, dispatch: Callable[[Request], Awaitable[Response | Streamed]], gate: HeadGate | None = None) -> Server:
        lim = self.handler.limits
        return Server(dispatch, max_body_bytes=lim.max_body_bytes, max_header_bytes=lim.max_head_bytes,
                      head_timeout=lim.head_timeout, body_idle_timeout=lim.body_idle_timeout, body_budget=lim.body_memory,
                      budget_wait=lim.body_memory_wait, error_response=internal_error, stream_body=self.handler.stream_hold,
                      linger_timeout=lim.linger_timeout, max_headers=lim.max_headers, max_pipelined=lim.max_pipelined,
                      min_body_rate=lim.min_body_rate, body_share=lim.body_memory_per_client, head_gate=gate)

    async def run(self) -> None:
        await self.handler.start()
        # a client that disconnects cancels its request's task, which cancels the upstream
        # request and frees the endpoint slot; on shutdown, requests in flight get
        # drain_timeout to finish, then are cut
        servers = self.servers
        try:
            server = self._server(route(self.handler), auth_gate(self.handler))
            servers.append(server)
            self.port = await server.start(self.bind[0], self.bind[1], backlog=4096)
            log.info("proxy serving", extra={"address": f"{self.bind[0]}:{self.port}"})
            self.started.set()
            if self.gateway_bind is not None:
                fence = await self._fence()
                gateway = self._server(gateway_route(self.handler, fence), gateway_gate(self.handler, fence))
                servers.append(gateway)
                self.gateway_port = await gateway.start(self.gateway_bind[0], self.gateway_bind[1], backlog=4096)
                log.info("proxy serving Gateway traffic", extra={"address": f"{self.gateway_bind[0]}:{self.gateway_port}"})
                self.gateway_started.set()
            await asyncio.Event().wait()
        finally:
            for srv in servers:
                await srv.close(self.drain_timeout)
            servers.clear()
            await self.handler.close()

    async def serve(self) -> None:
        """The manager's runnable of the proxy's listeners, on every replica once the caches have
        synced (the engine scraper is a runnable of its own, routing.scrape.attach_scraper). A
        listener that cannot bind (taken after the start-up check) ends it with a
        :class:`ListenerError` naming its flag, which stops the process."""
        try:
            await self.run()
        except OSError as e:
            if self.started.is_set() and (self.gateway_bind is None or self.gateway_started.is_set()):
                raise  # every listener was up: not a bind failure
            if not self.started.is_set():
                flag, addr = "--proxy-bind-address", self.bind
            else:
                flag, addr = "--proxy-gateway-bind-address", self.gateway_bind or ("", 0)
            raise ListenerError(flag, f"{addr[0]}:{addr[1]}", bind_reason(e)) from e

    async def _fence(self) -> RouteFence:
        """The route fence; until its key can be read (or made), the Gateway listener stays closed (fail closed)."""
        if self.route_fence is None:
            raise ValueError("the Gateway listener needs the route key")
        backoff = Backoff(initial=1.0, cap=60.0)
        while True:
            try:
                await self.route_fence.ready()
                return self.route_fence
            except (ApiError, RouteKeyError, OSError) as e:
                delay = backoff.next()
                log.error("route key unavailable; the Gateway listener stays closed",
                          extra={"error": str(e)[:300], "retry_in": round(delay, 1)})
                await asyncio.sleep(delay)


def setup_proxy(
    mgr: Manager, bind: str, *, default_timeout: float | None = None, scale_from_zero: bool = True, limits: ProxyLimits | None = None,
    gateway_bind: str | None = None, operator_ns: str | None = None, auth: AuthConfig | None,
) -> ProxyServer | None:
    """The proxy on ``bind`` (and the Gateway listener on ``gateway_bind``, its route key read from or
    made in ``operator_ns``); ``limits`` (default: :class:`ProxyLimits` with ``default_timeout``) bound its requests.
    ``auth``: the caller checks of ``--proxy-auth kubernetes``; None (``--proxy-auth none``) serves every caller,
    so it must be said by the caller (no default)."""
    addr = parse_bind(bind)
    if addr is None:
        return None
    gw_addr = parse_bind(gateway_bind)
    if gw_addr is not None and not operator_ns:
        raise ValueError("the proxy's Gateway listener needs the operator's namespace (for its route key)")
    tracker = EndpointTracker()
    model_pod_informer(mgr.cache).add_handler(tracker)
    resolver = Resolver(mgr.cache.informer(MODELS))
    metrics = ProxyMetrics(mgr.metrics.registry)
    scaler = ScaleFromZero(mgr.client) if scale_from_zero else None
    authorizer = None
    if auth is not None:
        authorizer = Authorizer(mgr.client, auth, on_review=lambda kind, outcome: metrics.auth_reviews.labels(kind, outcome).inc())
    else:
        log.warning("proxy authentication is off (--proxy-auth none): any client that reaches the proxy may list, "
                    "call and scale up every namespace's Models; use it only for a single-tenant install")
    handler = ProxyHandler(resolver, tracker, metrics, scaler, default_timeout=default_timeout, limits=limits, auth=authorizer)
    if handler.fair is not None:  # weights from the Namespaces, saturation Events on the Models
        handler.fair.weight = NamespaceWeights.from_cache(mgr.cache)
        handler.fair.events = SaturationEvents(mgr.recorder.for_component("kaiwo-proxy"), resolver.models,
                                               handler.limits.fair.event_interval)
    fence = RouteFence(mgr.cache, mgr.client, operator_ns or "") if gw_addr is not None else None
    server = ProxyServer(handler, addr, gateway_bind=gw_addr, route_fence=fence)
    mgr.add_runnable("proxy", server.serve)  # every replica serves, leader or not
    return server
