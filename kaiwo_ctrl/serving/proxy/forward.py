"""The upstream half of a proxied request: header hygiene, retries, relaying.

* Hop-by-hop headers (and any header the ``Connection`` header names) are
  dropped both ways, as are inbound ``Forwarded``/``X-Forwarded-*``; the
  client's ``Host`` is kept.
* Up to 3 retries (4 attempts) on a transport error or a 500/502/503/504
  answer, each on a newly chosen endpoint (one not yet tried when there is
  one). After the last attempt a 5xx answer passes through and a transport
  error becomes 502.
* Bodies are never decoded: a response with a Content-Length is read whole
  and sent back; anything else (SSE, chunked) is relayed chunk by chunk as it
  arrives.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import aiohttp
from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy

from kaiwo_ctrl.serving.proxy.balance import Endpoint

RETRY_STATUSES = frozenset({500, 502, 503, 504})
ATTEMPTS = 4
HOP_BY_HOP = frozenset(
    h.lower()
    for h in (
        "Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Proxy-Connection",
        "TE", "Trailer", "Transfer-Encoding", "Upgrade", "Content-Length",
    )
)
PROXY_HEADER = ("X-Proxy", "kaiwo-ctrl")

Acquire = Callable[[frozenset[str]], Awaitable[Endpoint]]
Release = Callable[[Endpoint], None]


class UpstreamFailed(Exception):
    """Every attempt ended in a transport error."""


def _dropped(headers: CIMultiDictProxy[str] | CIMultiDict[str]) -> frozenset[str]:
    named = {t.strip().lower() for v in headers.getall("Connection", ()) for t in v.split(",")}
    return HOP_BY_HOP | named


def request_headers(headers: CIMultiDictProxy[str]) -> CIMultiDict[str]:
    drop = _dropped(headers)
    out: CIMultiDict[str] = CIMultiDict()
    for k, v in headers.items():
        lk = k.lower()
        if lk in drop or lk == "forwarded" or lk.startswith("x-forwarded-"):
            continue
        out.add(k, v)
    return out


def response_headers(headers: CIMultiDictProxy[str]) -> CIMultiDict[str]:
    drop = _dropped(headers)
    out: CIMultiDict[str] = CIMultiDict((k, v) for k, v in headers.items() if k.lower() not in drop)
    out[PROXY_HEADER[0]] = PROXY_HEADER[1]
    return out


async def forward(
    request: web.Request,
    session: aiohttp.ClientSession,
    path: str,
    body: bytes,
    headers: CIMultiDict[str],
    acquire: Acquire,
    release: Release,
    on_retry: Callable[[str], None],
    on_sent: Callable[[], None] = lambda: None,
) -> web.StreamResponse:
    tried: set[str] = set()
    for attempt in range(ATTEMPTS):
        last = attempt == ATTEMPTS - 1
        ep = await acquire(frozenset(tried))
        tried.add(ep.key)
        try:
            on_sent()
            try:
                up = await session.request(
                    request.method, f"http://{ep.address}{path}", data=body, headers=headers, allow_redirects=False
                )
            except (aiohttp.ClientError, OSError) as e:
                if last:
                    raise UpstreamFailed(str(e) or type(e).__name__) from e
                on_retry("transport")
                continue
            try:
                if up.status in RETRY_STATUSES and not last:
                    on_retry(str(up.status))
                    continue
                return await relay(request, up)
            finally:
                up.release()
        finally:
            release(ep)
    raise AssertionError("unreachable")


async def relay(request: web.Request, up: aiohttp.ClientResponse) -> web.StreamResponse:
    headers = response_headers(up.headers)
    if up.content_length is not None:
        return web.Response(status=up.status, reason=up.reason, headers=headers, body=await up.read())
    out = web.StreamResponse(status=up.status, reason=up.reason, headers=headers)
    await out.prepare(request)
    try:
        async for chunk in up.content.iter_any():
            await out.write(chunk)
    except (aiohttp.ClientError, OSError):
        # the server broke off mid-stream: break the client's stream off too (no clean end)
        if request.transport is not None:
            request.transport.abort()
        return out
    await out.write_eof()
    return out
