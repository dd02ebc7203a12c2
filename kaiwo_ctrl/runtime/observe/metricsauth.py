"""Authenticated, authorized metrics: the ``secure metrics`` scheme of
controller-runtime, for the manager's ``/metrics`` endpoint.

A scrape must carry ``Authorization: Bearer <token>``. The token is checked
with a TokenReview (who is this?) and the user with a SubjectAccessReview for
the non-resource URL ``/metrics``, verb ``get`` (may they read it?). Grant a
scraper access with a ClusterRole such as::

    rules:
    - nonResourceURLs: ["/metrics"]
      verbs: ["get"]

The endpoint is served over TLS (a self-signed certificate generated at start
unless a certificate and key are given), so tokens never travel in clear text.

Decisions are cached per token (by SHA-256, never the token itself) for
``ttl`` seconds, at most ``max_entries`` of them, so a scraper every 15 s
costs two API calls a minute. Any failure to reach the API denies (500-free:
the scraper sees 503 and retries).

Defaults: ``ttl`` 60 s, ``max_entries`` 1024, path ``/metrics``.
"""

from __future__ import annotations

import hashlib
import logging
import ssl
import tempfile
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from pathlib import Path

from aiohttp import web

from kaiwo_ctrl.runtime.api.client import ApiError, Client, Resource

log = logging.getLogger(__name__)

TOKEN_REVIEWS = Resource("authentication.k8s.io", "v1", "tokenreviews", "TokenReview", namespaced=False)
SUBJECT_ACCESS_REVIEWS = Resource(
    "authorization.k8s.io", "v1", "subjectaccessreviews", "SubjectAccessReview", namespaced=False
)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class MetricsAuth:
    """Checks scrapes of ``path`` against the apiserver (see the module docstring)."""

    def __init__(self, client: Client, *, path: str = "/metrics", ttl: float = 60.0, max_entries: int = 1024) -> None:
        self.client = client
        self.path = path
        self.ttl = ttl
        self.max_entries = max_entries
        self._cache: OrderedDict[str, tuple[float, int]] = OrderedDict()

    def guard(self, handler: Handler) -> Handler:
        """``handler`` behind the bearer-token check."""

        async def guarded(request: web.Request) -> web.StreamResponse:
            status = await self.status_for(request.headers.get("Authorization", ""))
            if status != 200:
                text = {401: "Unauthorized\n", 403: "Forbidden\n"}.get(status, "authorization check failed\n")
                return web.Response(status=status, text=text)
            return await handler(request)

        return guarded

    async def status_for(self, authorization: str) -> int:
        """200, 401 (no or invalid token), 403 (not allowed) or 503 (API unreachable)."""
        scheme, _, token = authorization.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            return 401
        key = hashlib.sha256(token.encode()).hexdigest()
        now = time.monotonic()
        hit = self._cache.get(key)
        if hit is not None and hit[0] > now:
            return hit[1]
        try:
            status = await self._review(token)
        except (ApiError, OSError, TimeoutError) as exc:
            log.warning("metrics authorization check failed", extra={"error": f"{type(exc).__name__}: {exc}"[:300]})
            return 503
        self._cache[key] = (now + self.ttl, status)
        self._cache.move_to_end(key)
        while len(self._cache) > self.max_entries:
            self._cache.popitem(last=False)
        return status

    async def _review(self, token: str) -> int:
        review = await self.client.create(
            TOKEN_REVIEWS, {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}}
        )
        status = review.get("status") or {}
        if not status.get("authenticated"):
            return 401
        user = status.get("user") or {}
        spec = {
            "user": user.get("username", ""),
            "groups": user.get("groups") or [],
            "nonResourceAttributes": {"path": self.path, "verb": "get"},
        }
        if user.get("uid"):
            spec["uid"] = user["uid"]
        if user.get("extra"):
            spec["extra"] = user["extra"]
        sar = await self.client.create(
            SUBJECT_ACCESS_REVIEWS,
            {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec},
        )
        return 200 if (sar.get("status") or {}).get("allowed") else 403


def server_ssl_context(cert_file: str | None = None, key_file: str | None = None) -> ssl.SSLContext:
    """TLS for the metrics server: the given certificate, else a fresh one
    from a throw-away CA, written to a private temp dir."""
    if not cert_file:
        cert_file, key_file = _self_signed()
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert_file, key_file)
    return ctx


def _self_signed() -> tuple[str, str]:
    from kaiwo_ctrl.runtime.net.certs import TinyCA  # the project's one certificate helper

    pair = TinyCA("kaiwo-ctrl-metrics-ca").issue(
        "kaiwo-ctrl-metrics", server=True, dns=("localhost",), ips=("127.0.0.1",)
    )
    directory = Path(tempfile.mkdtemp(prefix="kaiwo-metrics-tls-"))
    cert_path, key_path = directory / "tls.crt", directory / "tls.key"
    pair.write(cert_path, key_path)
    key_path.chmod(0o600)
    return str(cert_path), str(key_path)
