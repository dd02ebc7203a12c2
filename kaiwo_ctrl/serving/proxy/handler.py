"""The OpenAI-compatible routes.

``/openai/v1/<route>`` names the Model in the body (JSON ``model``, or the
``model`` part of a multipart form, which is taken out before forwarding:
see :mod:`kaiwo_ctrl.serving.proxy.multipart`);
``/<namespace>/<model>/v1/<route>`` names it in the path (a body ``model`` of
``<model>_<adapter>`` still picks an adapter). The upstream path is
``/v1/<route>`` with the query string kept.

Per request: parse -> resolve -> count as active -> scale from zero -> forward,
whose every attempt leases its endpoint from :meth:`.router.Router.acquire`
(the one place the upstream is chosen).
The Model's deadline (annotation ``kaiwo.silogen.ai/request-timeout``, else the
process default) covers all of it, streaming included; the wait for an endpoint
has its own bound (504 either way). Errors are OpenAI-style JSON:
``{"error": {"message", "type", "code"}}``; no exception text reaches a client.
A body the proxy cannot parse, or cannot encode again after the ``model``
rewrite (nested deeper than orjson's limit), is a 400.

JSON bodies are held whole (routing needs their ``model``, PrefixHash hashes
their prompt; ``max_body_bytes`` and the body memory bound them). A multipart
form with a Content-Length streams (:meth:`ProxyHandler.stream_hold`): only its
prefix up to the ``model`` part is held, the rest goes on as it arrives; one whose
``model`` part comes after the window (the file first) is held whole after all.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from urllib.parse import parse_qs

import orjson

from kaiwo_ctrl.runtime.net.http1 import Pool, StreamBody
from kaiwo_ctrl.runtime.net.http1body import STREAM_BUFFER
from kaiwo_ctrl.runtime.net.http1server import Request, Response, Streamed
from kaiwo_ctrl.serving.proxy.auth import Authorizer, Busy, Caller
from kaiwo_ctrl.serving.proxy.deadlines import Deadlines
from kaiwo_ctrl.serving.routing.endpoints import EndpointTracker
from kaiwo_ctrl.serving.routing.exchange import Exchange
from kaiwo_ctrl.serving.routing.fairgate import FairGate, tenant_of
from kaiwo_ctrl.serving.proxy.forward import PROXY_HEADER, UpstreamFailed, forward, request_headers
from kaiwo_ctrl.serving.limits import UPSTREAM_BUFFER, ProxyLimits
from kaiwo_ctrl.serving.proxy.listing import ModelListing
from kaiwo_ctrl.serving.routing.metrics import ProxyMetrics
from kaiwo_ctrl.serving.proxy.multipart import check_boundary, split_multipart_model, take_model_part
from kaiwo_ctrl.serving.routing.prefix import extract_prefix
from kaiwo_ctrl.serving.routing.resolve import ProxyError, Resolver, Target, selectors_of
from kaiwo_ctrl.serving.routing.router import Router
from kaiwo_ctrl.serving.proxy.scale import ScaleFromZero

log = logging.getLogger("kaiwo_ctrl.serving.proxy")

CONNECT_TIMEOUT = 5.0
# rerank: Reranking Models (KubeAI 0.22); responses: the Responses API (KubeAI 0.23, #667), routed like chat
JSON_ROUTES = frozenset({"chat/completions", "completions", "embeddings", "rerank", "responses"})
ROUTES = JSON_ROUTES | {"audio/transcriptions"}
_ERROR_TYPES = {400: "invalid_request_error", 401: "invalid_request_error", 404: "not_found_error", 409: "conflict_error",
                429: "rate_limit_exceeded", 504: "timeout_error"}


_JSON = (b"Content-Type", b"application/json")


def internal_error() -> Response:
    """The answer to a request whose handling failed unexpectedly (logged; nothing of it is sent)."""
    return error_response(500, "Internal Server Error")


def error_response(status: int, message: str, **extra: Any) -> Response:
    err = {"message": message, "type": _ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error"),
           "code": status, **extra}
    headers = [_JSON, PROXY_HEADER]
    if status == 401:
        headers.append((b"WWW-Authenticate", b'Bearer realm="kaiwo-proxy"'))
    elif status == 503:
        headers.append((b"Retry-After", b"1"))
    elif status == 429:
        headers.append((b"Retry-After", str(int(extra.get("retry_after", 1))).encode()))
    return Response(status, headers, orjson.dumps({"error": err}))


def auth_busy() -> Response:
    return error_response(503, "Service Unavailable: authorization is busy, retry")


class ProxyHandler:
    def __init__(
        self, resolver: Resolver, tracker: EndpointTracker, metrics: ProxyMetrics, scaler: ScaleFromZero | None,
        *, default_timeout: float | None = None, limits: ProxyLimits | None = None, auth: Authorizer | None = None,
    ) -> None:
        self.resolver, self.tracker, self.metrics, self.scaler = resolver, tracker, metrics, scaler
        self.auth = auth  # None: --proxy-auth none (every caller may use every Model)
        self.listing = ModelListing(resolver.models)
        self.limits = limits = limits or ProxyLimits(request_timeout=default_timeout)
        self.default_timeout = limits.request_timeout
        self.deadlines = Deadlines()
        self._overhead = metrics.overhead.labels()
        # No read timeout (generations are long; the request's deadline bounds them), but a server
        # Pod that does not accept a connection within CONNECT_TIMEOUT counts as a transport
        # error, so the request is retried elsewhere instead of hanging on an unreachable IP.
        self.pool = Pool(connect_timeout=CONNECT_TIMEOUT, idle_timeout=60.0, buffer_limit=UPSTREAM_BUFFER,
                         max_head_bytes=limits.max_upstream_head_bytes)
        self.fair = FairGate(limits.fair, metrics) if limits.fair.enabled else None
        #: the one entry for the upstream pick (and the per-Model state, derived once per Model version)
        self.router = Router(tracker, resolver.models, metrics, limits.request_timeout, limits.endpoint_wait, self.fair)

    async def start(self) -> None:
        """Nothing to start: the pool connects on first use (kept for the server's lifecycle)."""

    async def close(self) -> None:
        self.deadlines.close()
        if self.fair is not None:
            await self.fair.close()
        await self.pool.close()

    # ------------------------------------------------------------- routes
    async def models(self, request: Request, namespace: str | None = None, model: str | None = None,
                     caller: Caller | None = None) -> Response:
        """``GET /openai/v1/models``, or ``/<namespace>/<model>/v1/models`` (that Model's entries only);
        with a ``caller``, only the Models it may use (:mod:`.listing`)."""
        only = None
        try:
            selectors = _selectors(request)
            if namespace is not None and model is not None:
                t = self.resolver.resolve(model, selectors, namespace)  # the head check authorized this Model
                features, only = list(t.spec.get("features") or ()), (t.namespace, t.name)
            else:
                features = parse_qs(request.query).get("feature") or ["TextGeneration"]
        except ProxyError as e:
            return error_response(e.status, e.message, **e.extra)
        items = self.listing.candidates(features, selectors, only)
        if caller is None or self.auth is None:  # the open proxy: ids as KubeAI's, qualified by what the cluster has
            return Response(200, [_JSON], self.listing.render(items, named=self.listing.candidates(None, selectors)))
        allowed = None
        if only is None:  # (a path naming the Model was authorized for it by the head check)
            try:
                allowed = (await self.auth.allowed_keys(caller, [i.key for i in items])).__contains__
            except Busy:
                return auth_busy()
        return Response(200, [_JSON], self.listing.render(items, allowed))

    async def _allowed(self, caller: Caller | None, requested: str, namespace: str | None) -> set[tuple[str, str]] | None:
        """The Models ``requested`` may name that ``caller`` may use (None: no check); Busy when unknown."""
        if caller is None or self.auth is None:
            return None
        return await self.auth.allowed_keys(caller, self.resolver.candidates(requested, namespace))

    # -------------------------------------------------------------- proxy
    def stream_hold(self, request: Request) -> int | None:
        """For the server, once a head is in: a multipart form streams, its handler holding at most
        the model part's window and one read (until it finds it must hold the form whole:
        ``BodyStream.hold_whole``); anything else (JSON: routing needs all of it) is read whole."""
        if request.method != "POST" or _mimetype(request)[0] != "multipart/form-data":
            # JSON stays whole: routing needs its model and PrefixHash its prompt (bounded by
            # --proxy-max-body-size and the process's body memory)
            return None
        return self.limits.multipart_model_window + STREAM_BUFFER

    async def _read_stream(self, request: Request, path_model: str | None) -> tuple[str, StreamBody | bytearray]:
        """(requested model name, the rest of the form to forward: as it comes, or held whole when
        its model part came past the window) of a streamed form."""
        assert request.body_stream is not None
        boundary = check_boundary(dict(_params(_mimetype(request)[1])).get("boundary"))
        model, body = await take_model_part(request.body_stream, boundary, self.limits.multipart_model_window)
        if not model and not path_model:
            raise ProxyError(400, "bad request: missing 'model' form field")
        return model or path_model or "", body

    def _read(self, request: Request, route: str, path_model: str | None) -> tuple[str, bytes | bytearray, Any]:
        """(requested model name, body to forward, parsed JSON body or None)."""
        body = request.body
        mimetype, ctype = _mimetype(request)
        if mimetype == "multipart/form-data":
            boundary = check_boundary(dict(_params(ctype)).get("boundary"))
            model, body = split_multipart_model(body, boundary.decode())
            request.body = b""  # only the form as forwarded is kept
            if not model and not path_model:
                raise ProxyError(400, "bad request: missing 'model' form field")
            return model or path_model or "", body, None
        if mimetype and mimetype not in ("application/json", "text/plain", "application/octet-stream"):
            raise ProxyError(400, f"bad request: unsupported content type {mimetype!r}")
        if route not in JSON_ROUTES:
            raise ProxyError(400, f"bad request: /v1/{route} takes a multipart/form-data body")
        try:
            parsed = orjson.loads(body)
        except orjson.JSONDecodeError as e:
            raise ProxyError(400, f"bad request: body is not valid JSON: {e}") from None
        if not isinstance(parsed, dict):
            raise ProxyError(400, "bad request: body must be a JSON object")
        model = parsed.get("model")
        if model is not None and not isinstance(model, str):
            raise ProxyError(400, "bad request: 'model' must be a string")
        if not model and not path_model:
            raise ProxyError(400, "bad request: missing 'model' field")
        return model or path_model or "", body, parsed

    async def proxy(self, request: Request, route: str, namespace: str | None = None, path_model: str | None = None,
                    caller: Caller | None = None) -> Response | Streamed:
        """``POST /openai/v1/<route>``, or ``/<namespace>/<model>/v1/<route>``; with a ``caller``, only a Model
        it may use (else 404, as for a Model that does not exist), checked before any side effect."""
        t0 = time.perf_counter()
        body: bytes | bytearray | StreamBody
        try:
            if request.body_stream is not None:
                (requested, body), parsed = await self._read_stream(request, path_model), None
            else:
                requested, body, parsed = self._read(request, route, path_model)
            if path_model is not None and requested.partition("_")[0] != path_model:
                requested = path_model  # the path names the Model; a body model naming another one is ignored
            selectors = _selectors(request)
            allowed = await self._allowed(caller, requested, namespace)
            target = self.resolver.resolve(requested, selectors, namespace, allowed)
        except ProxyError as e:
            return error_response(e.status, e.message, **e.extra)
        except Busy:
            return auth_busy()
        key = ""
        st = self.router.state(target)
        if st.prefix is not None:  # PrefixHash: the prompt's prefix, taken before the parsed body goes
            key = target.adapter + extract_prefix(route, parsed or {}, st.prefix[0])
        if parsed is not None and parsed.get("model") != target.forward_name:
            parsed["model"] = target.forward_name
            request.body = body = b""  # the one copy the rewrite needs replaces the body as received
            try:
                body = orjson.dumps(parsed)
            except orjson.JSONEncodeError:
                return error_response(400, "bad request: the body cannot be encoded again (nested too deeply?)")
        del parsed  # only the body to send is kept while the request is forwarded
        return await self._serve(request, route, target, body, key, t0)

    async def _serve(self, request: Request, route: str, t: Target, body: bytes | bytearray | StreamBody, key: str,
                     t0: float) -> Response | Streamed:
        st = self.router.state(t)
        st.active.inc()
        caller = request.admitted if isinstance(request.admitted, Caller) else None
        tenant = tenant_of(caller.user.get("user") if caller else None, request.budget_key)
        ex = Exchange(t, key, 0 if isinstance(body, StreamBody) else len(body), tenant)
        code = 0
        task = None
        if st.timeout is not None:  # no deadline: nothing to watch
            task = asyncio.current_task()
            self.deadlines.arm(task, st.timeout)  # type: ignore[arg-type]
        try:
            resp = await self._attempt(request, route, t, ex, body)
            code = resp.status
            return resp
        except asyncio.CancelledError:
            if task is not None and self.deadlines.disarm(task):
                code = 504
                return error_response(504, "Gateway Timeout: the Model's request timeout passed")
            code = 499  # the client went away
            raise
        except ConnectionResetError:
            code = 499
            raise
        finally:
            if task is not None:
                self.deadlines.disarm(task)
            st.active.dec()
            requests, duration = st.by_code(code)
            requests.inc()
            duration.observe(time.perf_counter() - t0)
            if ex.sent_at:
                self._overhead.observe(max(0.0, ex.sent_at - t0 - ex.waited))

    async def _attempt(
        self, request: Request, route: str, t: Target, ex: Exchange, body: bytes | bytearray | StreamBody,
    ) -> Response | Streamed:
        try:
            if self.scaler is not None and self.scaler.needed(t):  # checked here: no coroutine per request
                await self.scaler.ensure_running(t)
            path = "/v1/" + route + ("?" + request.query if request.query else "")
            return await forward(request, self.pool, path, body, request_headers(request.headers, self.auth is not None), self.router, ex)
        except UpstreamFailed as e:
            log.info("upstream failed", extra={"model": f"{t.namespace}/{t.name}", "error": str(e)[:200]})
            return error_response(502, "Bad Gateway")
        except ProxyError as e:
            return error_response(e.status, e.message, **e.extra)


def _selectors(request: Request) -> list[Any]:
    values = request.header_values(b"x-label-selector")
    return selectors_of(v.decode("latin-1") for v in values) if values else []


def _mimetype(request: Request) -> tuple[str, str]:
    """(the Content-Type's media type, lower-case; the whole header)."""
    raw = request.header(b"content-type")
    ctype = raw.decode("latin-1") if raw else ""
    return ctype.partition(";")[0].strip().lower(), ctype


def _params(ctype: str) -> list[tuple[str, str]]:
    out = []
    for part in ctype.split(";")[1:]:
        k, _, v = part.strip().partition("=")
        out.append((k.strip().lower(), v.strip().strip('"')))
    return out


