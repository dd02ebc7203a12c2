"""How requests reach the API server: one connection pool and the headers.

Every exchange goes through the lean keep-alive HTTP/1.1 pool of
:mod:`kaiwo_ctrl.runtime.net.http1` (its per-request CPU is a fraction of
aiohttp's client, which mattered at several requests per reconcile), with
the TLS context and credentials of one :class:`RestConfig`:

* requests (get, list, create, replace, patch, delete): at most
  ``max_connections`` in flight (:meth:`Transport.exchange`);
* answers read as they arrive (:meth:`Transport.stream`): an informer's list
  holds one of those request slots; long-lived streams (watches, log
  follows) have ``max_connections`` slots of their own, so they never starve
  the requests, and an inactivity limit per stream.

Header sets are built once per content type when the credentials are static
(a token hook, e.g. an exec plugin or a rotating service-account token, may
change them, so then they are built per request).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlencode

from yarl import URL

from kaiwo_ctrl.runtime.net import http1
from kaiwo_ctrl.runtime.api.restconfig import RestConfig
from kaiwo_ctrl.runtime.api.wire import encode_headers, param


class Transport:
    def __init__(self, config: RestConfig, *, user_agent: str, max_connections: int) -> None:
        self.config, self.user_agent, self.max_connections = config, user_agent, max_connections
        base = URL(config.host)
        self.scheme, self.authority, self.prefix = base.scheme, base.raw_authority, base.raw_path.rstrip("/")
        self._static: dict[str | None, list[tuple[bytes, bytes]]] = {}
        self._pool: http1.Pool | None = None
        self._pool_loop: asyncio.AbstractEventLoop | None = None
        self._slots = asyncio.Semaphore(max_connections)
        self._stream_slots = asyncio.Semaphore(max_connections)
        self._closers: list[Callable[[], Awaitable[object]]] = []

    # ------------------------------------------------------------- headers
    async def headers(self, content_type: str | None) -> dict[str, str]:
        tok = self.config.token if self.config.token_hook is None else await self.config.token_hook()
        h = {"Accept": "application/json", "User-Agent": self.user_agent}
        if content_type:
            h["Content-Type"] = content_type
        if tok:
            h["Authorization"] = tok if tok.lower().startswith("bearer ") else f"Bearer {tok}"
        return h

    async def raw_headers(self, content_type: str | None) -> list[tuple[bytes, bytes]]:
        if self.config.token_hook is None:
            h = self._static.get(content_type)
            if h is None:
                h = self._static[content_type] = encode_headers(await self.headers(content_type), self.authority)
            return h
        return encode_headers(await self.headers(content_type), self.authority)

    # ------------------------------------------------------------- addresses
    def target(self, path: str, params: Mapping[str, Any] | None) -> str:
        """The request target: the server URL's path prefix, ``path`` (already
        percent-encoded: ``Resource.path`` quotes names) and the query."""
        query = urlencode({k: param(v) for k, v in params.items() if v is not None}) if params else ""
        if "?" in path:  # a raw path that carries its own query
            path, _, own = path.partition("?")
            query = f"{own}&{query}" if query else own
        target = self.prefix + path
        return f"{target}?{query}" if query else target

    def url(self, path: str, params: Mapping[str, Any] | None) -> URL:
        """The full URL (the CLI's WebSockets), built from encoded parts so it is not parsed again."""
        path_part, _, query = self.target(path, params).partition("?")
        return URL.build(scheme=self.scheme, authority=self.authority, path=path_part, query_string=query, encoded=True)

    # ------------------------------------------------------------- pools
    def _requests_pool(self) -> http1.Pool:
        loop = asyncio.get_running_loop()
        if self._pool is None or self._pool_loop is not loop:
            # (a client used again under another event loop gets a new pool)
            self._pool_loop = loop
            ctx = self.config.ssl_context()
            self._pool = http1.Pool(
                ssl=ctx if isinstance(ctx, ssl.SSLContext) else None,
                connect_timeout=15.0,
                idle_timeout=60.0,
                max_idle_per_host=self.max_connections,
            )
            self._slots = asyncio.Semaphore(self.max_connections)
            self._stream_slots = asyncio.Semaphore(self.max_connections)
        return self._pool

    async def exchange(self, method: str, target: str, body: bytes, content_type: str | None, timeout: float) -> tuple[int, bytes, bytes | None]:
        """One request: ``(status, body, Retry-After)``. Transport failures
        raise ``OSError`` (:class:`http1.TransportError`) or ``TimeoutError``."""
        headers = await self.raw_headers(content_type)
        pool = self._requests_pool()
        async with self._slots, asyncio.timeout(timeout):
            async with await pool.request(method, self.authority, target, headers, body) as resp:
                raw = await resp.read()
        return resp.status, raw, resp.header(b"retry-after") if resp.status >= 400 else None

    @asynccontextmanager
    async def stream(self, target: str, timeout: float, *, inactivity: float | None = None, long_lived: bool = False,
                     accept: str | None = None) -> AsyncIterator[http1.Response]:
        """A GET whose answer is read as it arrives; ``timeout`` bounds the
        wait for its headers, ``inactivity`` (None: no limit) each wait for
        more of it (``TimeoutError``). ``long_lived`` (a watch, a log
        follow) takes a stream slot instead of a request slot. ``accept``
        replaces ``application/json``. Transport failures raise as in
        :meth:`exchange`."""
        headers = await self.raw_headers(None)
        if accept is not None:
            headers = [(k, accept.encode()) if k == b"Accept" else (k, v) for k, v in headers]
        pool = self._requests_pool()
        async with self._stream_slots if long_lived else self._slots:
            async with asyncio.timeout(timeout):
                resp = await pool.request("GET", self.authority, target, headers, read_timeout=inactivity)
            async with resp:
                yield resp

    def on_close(self, closer: Callable[[], Awaitable[object]]) -> None:
        """Have :meth:`close` also await ``closer()`` (what a user keeps beside
        the pool with this transport's credentials, e.g. the CLI's WebSocket session)."""
        self._closers.append(closer)

    async def close(self) -> None:
        closers, self._closers = self._closers, []
        for closer in closers:
            await closer()
        if self._pool is not None:
            await self._pool.close()
            self._pool = None
