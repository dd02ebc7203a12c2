"""The HTTPS server the apiserver calls: AdmissionReview v1 in, verdict out.

Each webhook is an async function ``Review -> Verdict`` registered on a path.
The server records controller-runtime's webhook metrics, labelled by path:
``controller_runtime_webhook_requests_total{webhook,code}``,
``controller_runtime_webhook_latency_seconds{webhook}`` and
``controller_runtime_webhook_requests_in_flight{webhook}``.

A handler that raises is answered with ``allowed: true`` and a warning: an
operator bug must not block the cluster (the reconcilers still validate).
Handlers that want to refuse on an internal error say so with a Verdict.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from kaiwo_ctrl.runtime.api.deepjson import undecodable
from kaiwo_ctrl.runtime.objects.fielderrors import FieldError

from .tls import ServingCert

log = logging.getLogger("kaiwo_ctrl.webhooks.server")

#: Messages are bounded: a refusal lists at most this many fields.
MAX_LISTED_ERRORS = 10
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


@dataclass(frozen=True)
class Review:
    """The ``request`` of an AdmissionReview."""

    raw: dict[str, Any]

    @property
    def uid(self) -> str:
        return self.raw.get("uid", "")

    @property
    def operation(self) -> str:
        return self.raw.get("operation", "")

    @property
    def kind(self) -> str:
        return (self.raw.get("kind") or {}).get("kind", "")

    @property
    def namespace(self) -> str:
        return self.raw.get("namespace") or ""

    @property
    def object(self) -> dict[str, Any]:
        return self.raw.get("object") or {}

    @property
    def old_object(self) -> dict[str, Any]:
        return self.raw.get("oldObject") or {}

    @property
    def dry_run(self) -> bool:
        return bool(self.raw.get("dryRun"))

    @property
    def username(self) -> str:
        return (self.raw.get("userInfo") or {}).get("username") or ""


@dataclass
class Verdict:
    allowed: bool = True
    code: int = 200
    message: str = ""
    reason: str = ""
    patch: list[dict[str, Any]] | None = None
    warnings: list[str] = field(default_factory=list)

    @classmethod
    def refuse(cls, errors: Sequence[FieldError], kind: str = "", name: str = "") -> Verdict:
        shown = [str(e) for e in errors[:MAX_LISTED_ERRORS]]
        if len(errors) > MAX_LISTED_ERRORS:
            shown.append(f"and {len(errors) - MAX_LISTED_ERRORS} more")
        subject = f"{kind} {name!r} is invalid: " if kind else ""
        body = shown[0] if len(shown) == 1 else "[" + ", ".join(shown) + "]"
        return cls(False, 403, subject + body, "Invalid")

    def response(self, uid: str) -> dict[str, Any]:
        out: dict[str, Any] = {"uid": uid, "allowed": self.allowed}
        if not self.allowed or self.message:
            out["status"] = {"code": self.code, "message": self.message, **({"reason": self.reason} if self.reason else {})}
        if self.patch:
            out["patchType"] = "JSONPatch"
            out["patch"] = base64.b64encode(orjson.dumps(self.patch)).decode()
        if self.warnings:
            out["warnings"] = self.warnings
        return out


Handler = Callable[[Review], Awaitable[Verdict]]

#: Levels of nesting an object may have when it is created or changed: well
#: below the JSON codec's limits (1,024 to decode, 254 to encode again), far
#: above what a Job, RayJob or Model needs (about 20).
MAX_OBJECT_DEPTH = 100


def depth_verdict(raw: bytes) -> tuple[dict[str, Any], Verdict] | None:
    """For a review whose object nests deeper than :data:`MAX_OBJECT_DEPTH`:
    its request (deep values cut) and the verdict, without calling the
    handler. A CREATE or UPDATE is refused naming the field, unless the old
    object was as deep already (its owner must still be able to remove a
    finalizer); anything else is admitted untouched."""
    if raw.count(b"{") + raw.count(b"[") <= MAX_OBJECT_DEPTH:
        return None
    info = undecodable(raw, limit=MAX_OBJECT_DEPTH + 2)  # the object is at review.request.object
    if info is None or not info.paths:
        return None
    got = info.stub.get("request")
    req: dict[str, Any] = got if isinstance(got, dict) else {}
    fields = [p.removeprefix("request.object.") for p in info.paths if p.startswith("request.object.")]
    old_deep = any(p.startswith("request.oldObject") for p in info.paths)
    if req.get("operation") in ("CREATE", "UPDATE") and fields and not old_deep:
        kind = (req.get("kind") or {}).get("kind", "")
        errors = [FieldError(f, f"must not nest deeper than {MAX_OBJECT_DEPTH} levels") for f in fields]
        return req, Verdict.refuse(errors, kind, req.get("name") or "")
    return req, Verdict(warnings=[f"kaiwo-ctrl: the object nests deeper than {MAX_OBJECT_DEPTH} levels; not checked"])


class WebhookMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter(
            "controller_runtime_webhook_requests", "Total number of admission requests by HTTP status code.",
            ["webhook", "code"], registry=registry,
        )
        self.latency = Histogram(
            "controller_runtime_webhook_latency_seconds", "Histogram of the latency of processing admission requests",
            ["webhook"], buckets=LATENCY_BUCKETS, registry=registry,
        )
        self.in_flight = Gauge(
            "controller_runtime_webhook_requests_in_flight", "Current number of admission requests being served.",
            ["webhook"], registry=registry,
        )


class WebhookServer:
    def __init__(self, host: str, port: int, cert: ServingCert, metrics: WebhookMetrics) -> None:
        self.host, self.port = host, port
        self.cert = cert
        self.metrics = metrics
        self.handlers: dict[str, Handler] = {}
        self.bound_port: int | None = None
        self._runner: web.AppRunner | None = None
        self._starter: asyncio.Task | None = None
        self._cert_ready = asyncio.Event()
        cert.on_reload(self._cert_ready.set)

    def register(self, path: str, handler: Handler) -> None:
        self.handlers[path] = handler
        self.metrics.requests.labels(webhook=path, code="200")
        self.metrics.in_flight.labels(webhook=path).set(0)

    async def start(self) -> None:
        """Serve as soon as a certificate is loaded (at once if it already is)."""
        if self.cert.ready:
            self._cert_ready.set()
        self._starter = asyncio.create_task(self._serve(), name="webhook-server")

    async def _serve(self) -> None:
        await self._cert_ready.wait()
        app = web.Application(client_max_size=8 * 1024 * 1024)
        for path in self.handlers:
            app.router.add_post(path, self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, ssl_context=self.cert.context, reuse_address=True)
        await site.start()
        self.bound_port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        log.info("webhook server listening", extra={"address": f"{self.host}:{self.bound_port}", "paths": sorted(self.handlers)})

    async def serve(self) -> None:
        """The manager's runnable of the webhook server, on every replica and before the caches
        (the API server calls it whatever our caches hold): serves until cancelled, then stops."""
        await self.start()
        try:
            await asyncio.Event().wait()
        finally:
            await self.stop()

    async def stop(self) -> None:
        if self._starter is not None:
            self._starter.cancel()
        if self._runner is not None:
            await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.Response:
        path = request.path
        t0 = time.perf_counter()
        gauge = self.metrics.in_flight.labels(webhook=path)
        gauge.inc()
        code = 200
        try:
            raw = await request.read()
            deep = depth_verdict(raw)
            try:
                req = deep[0] if deep else orjson.loads(raw)["request"]
            except (orjson.JSONDecodeError, KeyError, TypeError):
                code = 400
                return web.Response(status=400, text="expected an AdmissionReview v1 with a request")
            verdict = deep[1] if deep else await self._decide(path, Review(req))
            log.debug("admission", extra={"webhook": path, "uid": req.get("uid"), "operation": req.get("operation"),
                                          "namespace": req.get("namespace"), "object": req.get("name"), "allowed": verdict.allowed})
            code = verdict.code
            body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": verdict.response(req.get("uid", ""))}
            return web.Response(body=orjson.dumps(body), content_type="application/json")
        finally:
            gauge.dec()
            self.metrics.requests.labels(webhook=path, code=str(code)).inc()
            self.metrics.latency.labels(webhook=path).observe(time.perf_counter() - t0)

    async def _decide(self, path: str, review: Review) -> Verdict:
        try:
            return await self.handlers[path](review)
        except Exception as e:  # fail open, loudly
            log.exception("webhook handler failed; admitting", extra={"webhook": path, "uid": review.uid})
            return Verdict(True, 200, warnings=[f"kaiwo-ctrl webhook {path} failed ({type(e).__name__}); not checked"])
