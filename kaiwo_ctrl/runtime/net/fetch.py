"""Bounded HTTP requests to URLs that are not the API server: the one plain
HTTP client of the process (model Pods, adapter loaders, peer proxies, a GPU
metrics exporter).

It is :mod:`.http1`'s pool behind a URL: a :class:`Fetcher` keeps keep-alive
connections per origin, and :meth:`Fetcher.request` returns an
:class:`Answer` read whole. Whoever answers may be hostile (a tenant's model
Pod, a replica at a Pod IP), so every call is bounded:

* ``timeout`` (seconds) covers the whole exchange: connecting, sending,
  waiting for the head and reading the body; past it, ``TimeoutError``;
* ``max_bytes`` caps the body: a ``Content-Length`` over it is refused before
  a byte of the body is read, a longer body is cut at the cap; both raise
  :class:`AnswerTooLarge` and close the connection;
* the head is bounded by the pool's ``max_head_bytes`` (64 KiB).

Failures are ``OSError`` (:class:`~.http1.TransportError` and its kinds) or
``TimeoutError``: catch :data:`FETCH_ERRORS`. TLS (``https://``) uses the
``ssl`` context given, else the system's default trust; ``server_hostname``
names the certificate expected when servers are addressed by IP.

:class:`BlockingFetcher` (and :func:`fetch_blocking`, one request) serve
synchronous tools (the local control plane) with the same client, its event
loop in a worker thread.
"""

from __future__ import annotations

import asyncio
import ssl as ssl_module
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import orjson

from kaiwo_ctrl.runtime.net import http1
from kaiwo_ctrl.runtime.net.http1common import first_header

#: What a fetch may raise: a transport failure (an OSError) or its timeout.
FETCH_ERRORS = (OSError, TimeoutError)
DEFAULT_MAX_BYTES = 4 << 20
USER_AGENT = b"kaiwo-ctrl"


class AnswerTooLarge(http1.ProtocolError):
    """The answer's body is longer than the caller's ``max_bytes``."""


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes

    def header(self, name: bytes) -> bytes | None:
        """The first value of a header (``name`` lower-case)."""
        return first_header(self.headers, name)

    def text(self) -> str:
        return self.body.decode(errors="replace")

    def json(self) -> Any:
        return orjson.loads(self.body)


async def read_capped(resp: http1.Response, max_bytes: int, what: str = "the answer") -> bytes:
    """The rest of ``resp``'s body, at most ``max_bytes``: :class:`AnswerTooLarge`
    as soon as its ``Content-Length`` or the bytes received say it is longer
    (the caller's release of ``resp`` then closes the connection)."""
    if resp.content_length is not None and resp.content_length > max_bytes:
        raise AnswerTooLarge(f"{what}: answer of {resp.content_length} bytes, over {max_bytes}")
    parts: list[bytes] = []
    size = 0
    async for chunk in resp:
        size += len(chunk)
        if size > max_bytes:
            raise AnswerTooLarge(f"{what}: answer over {max_bytes} bytes")
        parts.append(chunk)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def split_url(url: str) -> tuple[str, str, str]:
    """``(scheme, host:port, target)`` of an ``http``/``https`` URL; ValueError otherwise."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http:// or https:// URL with a host: {url!r}")
    port = parts.port or (443 if parts.scheme == "https" else 80)  # ValueError on a bad port
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return parts.scheme, f"{host}:{port}", target


class Fetcher:
    """Keep-alive connections for bounded requests to URLs; close it when done
    (or use it as ``async with``). One per user (a controller, a loop), or one
    per TLS context: ``ssl`` and ``server_hostname`` apply to every ``https``
    origin it reaches."""

    def __init__(self, *, ssl: ssl_module.SSLContext | None = None, server_hostname: str | None = None,
                 connect_timeout: float = 5.0, max_idle_per_host: int = 4) -> None:
        self._ssl, self._server_hostname = ssl, server_hostname
        self._connect_timeout, self._max_idle = connect_timeout, max_idle_per_host
        self._pools: dict[str, http1.Pool] = {}

    def _pool(self, scheme: str) -> http1.Pool:
        pool = self._pools.get(scheme)
        if pool is None:
            ctx = None
            if scheme == "https":
                ctx = self._ssl if self._ssl is not None else ssl_module.create_default_context()
            pool = self._pools[scheme] = http1.Pool(
                ssl=ctx, server_hostname=self._server_hostname if ctx else None,
                connect_timeout=self._connect_timeout, max_idle_per_host=self._max_idle,
            )
        return pool

    async def request(self, method: str, url: str, *, timeout: float, max_bytes: int = DEFAULT_MAX_BYTES,
                      headers: Mapping[str, str] | None = None, body: bytes = b"", json: Any = None) -> Answer:
        """One exchange, its answer read whole; see the module docstring for the bounds."""
        scheme, authority, target = split_url(url)
        raw = [(b"User-Agent", USER_AGENT)]
        if json is not None:
            body = orjson.dumps(json)
            raw.append((b"Content-Type", b"application/json"))
        raw += [(k.encode("latin-1"), v.encode("latin-1")) for k, v in (headers or {}).items()]
        async with asyncio.timeout(timeout):
            async with await self._pool(scheme).request(method, authority, target, raw, body) as resp:
                data = await read_capped(resp, max_bytes, f"{method} {url}")
        return Answer(resp.status, resp.headers, data)

    async def get(self, url: str, **kw: Any) -> Answer:
        return await self.request("GET", url, **kw)

    async def post(self, url: str, **kw: Any) -> Answer:
        return await self.request("POST", url, **kw)

    async def close(self) -> None:
        pools, self._pools = list(self._pools.values()), {}
        for p in pools:
            await p.close()

    async def __aenter__(self) -> Fetcher:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class BlockingFetcher:
    """A :class:`Fetcher` for synchronous tools (the local control plane): its
    event loop runs in a worker thread of its own, so it works with or
    without an event loop running in the caller's thread, and keeps its
    connections alive between calls. ``base`` (``https://host:port``) is put
    before a URL given as a path; ``timeout`` and ``max_bytes`` are the
    defaults of its requests. Close it (or use ``with``)."""

    def __init__(self, base: str = "", *, timeout: float = 30.0, max_bytes: int = DEFAULT_MAX_BYTES, **fetcher: Any) -> None:
        self.base = base.rstrip("/")
        self.defaults = {"timeout": timeout, "max_bytes": max_bytes}
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="blocking-fetcher", daemon=True)
        self._thread.start()
        self._fetcher = Fetcher(**fetcher)

    def request(self, method: str, url: str, **kw: Any) -> Answer:
        """:meth:`Fetcher.request`, waited for; the same bounds and errors."""
        if url.startswith("/"):
            url = self.base + url
        return asyncio.run_coroutine_threadsafe(self._fetcher.request(method, url, **(self.defaults | kw)), self._loop).result()

    def get(self, url: str, **kw: Any) -> Answer:
        return self.request("GET", url, **kw)

    def post(self, url: str, **kw: Any) -> Answer:
        return self.request("POST", url, **kw)

    def put(self, url: str, **kw: Any) -> Answer:
        return self.request("PUT", url, **kw)

    def close(self) -> None:
        if self._loop.is_closed():
            return
        asyncio.run_coroutine_threadsafe(self._fetcher.close(), self._loop).result()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    def __enter__(self) -> BlockingFetcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def fetch_blocking(method: str, url: str, **kw: Any) -> Answer:
    """One request from synchronous code (``ssl``/``server_hostname`` go to
    the fetcher, the rest to :meth:`Fetcher.request`); its connection is
    closed after."""
    fetcher = {k: kw.pop(k) for k in ("ssl", "server_hostname") if k in kw}
    with BlockingFetcher(**fetcher) as f:
        return f.request(method, url, **kw)
