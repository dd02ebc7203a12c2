"""The upstream half of a proxied request: header hygiene, retries, relaying.

* Hop-by-hop headers (and any header the ``Connection`` header names) are
  dropped both ways, as are inbound ``Forwarded``/``X-Forwarded-*``; the
  client's ``Host`` is kept. Headers travel as the raw bytes they came in.
* Up to 3 retries (4 attempts) on a transport error or a 500/502/503/504
  answer, each on a newly chosen endpoint (one not yet tried when there is
  one). After the last attempt a 5xx answer passes through and a transport
  error becomes 502. A streamed request body (a multipart upload) cannot be
  sent twice: once any of it went out, there is no retry (a transport error is
  a 502, a 5xx answer passes through), and that connection is never reused.
* ``Expect`` is answered by the proxy's own server (``100 Continue``) and
  never forwarded: a model server's interim answer must not reach the client.
* Bodies are never decoded: a response with a Content-Length up to
  ``WHOLE_LIMIT`` is read whole (so a break is retried) and sent back; a
  larger one, or one without a length (SSE, chunked), is relayed chunk by
  chunk as it arrives, reading paused while the client is slower. A stream
  the server breaks off is broken off for the client, and a client that goes
  away mid-answer closes the upstream connection (never reused).
* Each attempt reports once when its answer's first body byte arrives (a
  stream's first token) or it ends without one: routing counts the requests
  still waiting for admission or in their prefill (``Endpoint.pending``).
* The upstream hop is :class:`kaiwo_ctrl.runtime.net.http1.Pool` (keep-alive
  connections, httptools parser): about a third of the CPU per request of
  aiohttp's client, which dominated the proxy's cost.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from kaiwo_ctrl.runtime.net.http1 import Pool, StreamBody
from kaiwo_ctrl.runtime.net.http1 import Response as Upstream
from kaiwo_ctrl.runtime.net.http1server import Request, Response, Streamed
from kaiwo_ctrl.aim.fence import TOKEN_HEADER_KEY
from kaiwo_ctrl.serving.routing.exchange import Exchange
from kaiwo_ctrl.serving.routing.router import Router

RETRY_STATUSES = frozenset({500, 502, 503, 504})
ATTEMPTS = 4
WHOLE_LIMIT = 1 << 20
HOP_BY_HOP = frozenset(
    h.lower().encode()
    for h in (
        "Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Proxy-Connection",
        "TE", "Trailer", "Transfer-Encoding", "Upgrade", "Content-Length",
    )
)
#: the Gateway route token is for the proxy only: a model server never sees it
_INBOUND_DROP = HOP_BY_HOP | {b"forwarded", b"expect", TOKEN_HEADER_KEY}
PROXY_HEADER = (b"X-Proxy", b"kaiwo-ctrl")

RawHeaders = Iterable[tuple[bytes, bytes]]


class UpstreamFailed(Exception):
    """Every attempt ended in a transport error."""


def _named(value: bytes) -> set[bytes]:
    return {t.strip().lower() for t in value.split(b",")}


_KEEP, _DROP, _CONNECTION = 0, 1, 2
#: what each header name (as sent) gets, memoised: names recur from request to request, and a
#: lookup is cheaper than lower-casing and testing each; bounded (names are the client's word)
_MEMO_NAMES, _MEMO_NAME_BYTES = 512, 64
_memo_in: dict[bytes, int] = {}
_memo_out: dict[bytes, int] = {}


def _verdict(name: bytes, drop: frozenset[bytes], inbound: bool) -> int:
    lk = name.lower()
    if lk == b"connection":
        return _CONNECTION
    return _DROP if lk in drop or (inbound and lk.startswith(b"x-forwarded-")) else _KEEP


def _without_hop_by_hop(raw: RawHeaders, drop: frozenset[bytes], inbound: bool) -> list[tuple[bytes, bytes]]:
    out = []
    named: set[bytes] | None = None
    memo = _memo_in if inbound else _memo_out
    for k, v in raw:
        verdict = memo.get(k)
        if verdict is None:
            verdict = _verdict(k, drop, inbound)
            if len(memo) < _MEMO_NAMES and len(k) <= _MEMO_NAME_BYTES:
                memo[k] = verdict
        if verdict == _KEEP:
            out.append((k, v))
        elif verdict == _CONNECTION:
            named = _named(v) if named is None else named | _named(v)
    if named:
        out = [(k, v) for k, v in out if k.lower() not in named]
    return out


def request_headers(raw: RawHeaders, drop_authorization: bool = False) -> list[tuple[bytes, bytes]]:
    """The client's headers to send upstream (raw name/value bytes, order kept); ``drop_authorization``
    (``--proxy-auth kubernetes``): the caller's Kubernetes token is the proxy's to check, never the model
    server's to see (a tenant's Pod could use it against the API server as the caller)."""
    out = _without_hop_by_hop(raw, _INBOUND_DROP, True)
    if drop_authorization:
        out = [(k, v) for k, v in out if k.lower() != b"authorization"]
    return out


def response_headers(raw: RawHeaders) -> list[tuple[bytes, bytes]]:
    """The server's headers to send the client, plus ``X-Proxy``."""
    out = _without_hop_by_hop(raw, HOP_BY_HOP, False)
    out.append(PROXY_HEADER)
    return out


async def forward(
    request: Request,
    pool: Pool,
    path: str,
    body: bytes | bytearray | StreamBody,
    headers: list[tuple[bytes, bytes]],
    router: Router,
    ex: Exchange,
) -> Response | Streamed:
    """Each attempt's endpoint is leased from ``router`` for ``ex`` and the lease told of the answer's first
    body byte (a stream's first token), a retry and the attempt's end."""
    tried: set[str] = set()
    method = request.method
    for attempt in range(ATTEMPTS):
        last = attempt == ATTEMPTS - 1
        lease = await router.acquire(ex.target, ex.key, ex.size, frozenset(tried) if tried else frozenset(), ex.tenant)
        ex.waited += lease.waited
        tried.add(lease.endpoint.key)
        try:
            ex.sent()
            try:
                up = await pool.request(method, lease.address, path, headers, body)
            except OSError as e:  # http1.TransportError, or the read timeout
                last = last or _spent(body)
                if last:
                    raise UpstreamFailed(str(e) or type(e).__name__) from e
                lease.retry("transport")
                continue
            last = last or _spent(body)
            try:
                if up.status in RETRY_STATUSES and not last:
                    lease.retry(str(up.status))
                    continue
                if up.content_length is not None and up.content_length <= WHOLE_LIMIT:
                    try:
                        data = await up.read()
                    except OSError as e:  # broke off before anything reached the client: try again
                        if last:
                            raise UpstreamFailed(str(e) or type(e).__name__) from e
                        lease.retry("transport")
                        continue
                    return Response(up.status, response_headers(up.headers), data)
                return await relay(request, up, lease.answered)
            finally:
                up.release()
        finally:
            lease.release()
    raise AssertionError("unreachable")


def _spent(body: bytes | bytearray | StreamBody) -> bool:
    """The body cannot be sent again (a stream of which some went out)."""
    return isinstance(body, StreamBody) and body.started


async def relay(request: Request, up: Upstream, first: Callable[[], None] | None = None) -> Streamed:
    """Pass a body on chunk by chunk: with its Content-Length when it has one, else chunked;
    ``first()`` when the first chunk came."""
    out = await request.stream(up.status, response_headers(up.headers), up.content_length)
    try:
        async for chunk in up:
            if first is not None:
                first()
                first = None
            await out.write(chunk)
    except OSError:
        # the server broke off mid-stream (or the client went): break the client's stream off too
        out.abort()
        return out
    await out.end()
    return out
