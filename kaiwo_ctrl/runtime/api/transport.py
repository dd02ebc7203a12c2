"""How requests reach the API server: two connection pools and the headers.

* Requests (get, list, create, replace, patch, delete) go through the lean
  keep-alive HTTP/1.1 pool of :mod:`.http1`, at most ``max_connections`` in
  flight; its per-request CPU is a fraction of aiohttp's, which mattered at
  several requests per reconcile. An informer's list is read from that pool
  as it arrives (:meth:`Transport.stream`).
* Streams (watches, log follows) go through an aiohttp session: they live
  for minutes and need its read-inactivity timeout.

Both pools use the TLS context and credentials of one :class:`RestConfig`.
Header sets are built once per content type when the credentials are static
(a token hook, e.g. an exec plugin or a rotating service-account token, may
change them, so then they are built per request).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlencode

import aiohttp
import orjson
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
        self._session: aiohttp.ClientSession | None = None

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
        """The full URL for the stream session, built from encoded parts so it is not parsed again."""
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
    async def stream(self, target: str, timeout: float) -> AsyncIterator[http1.Response]:
        """A GET whose answer is read as it arrives (a list decoded item by
        item); ``timeout`` bounds the wait for its headers. Transport
        failures raise as in :meth:`exchange`."""
        headers = await self.raw_headers(None)
        pool = self._requests_pool()
        async with self._slots:
            async with asyncio.timeout(timeout):
                resp = await pool.request("GET", self.authority, target, headers)
            async with resp:
                yield resp

    def session(self) -> aiohttp.ClientSession:
        """The stream session (watches, log follows)."""
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(
                limit=self.max_connections, ssl=self.config.ssl_context(), keepalive_timeout=60, enable_cleanup_closed=True
            )
            self._session = aiohttp.ClientSession(
                connector=connector, json_serialize=lambda o: orjson.dumps(o).decode(), read_bufsize=2**21
            )
        return self._session

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None
        if self._session is not None:
            await self._session.close()
            self._session = None
