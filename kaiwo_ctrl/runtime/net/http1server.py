"""A lean HTTP/1.1 server on asyncio protocols and httptools' request parser.

The serving half of :mod:`kaiwo_ctrl.runtime.net.http1`, for a hop where CPU per request
matters (a proxy's front door): llhttp (in C) parses, strictly (both Content-Length and
chunked framing, a duplicate or bad Content-Length, a bad chunk size, obs-folded header
lines: 400); headers stay the raw bytes they came in; a response is one
``transport.write``, as uvicorn does. Messages: :mod:`kaiwo_ctrl.runtime.net.http1message`.

* One handler, ``async (Request) -> Response | Streamed``, runs in a task of
  its own per request, once its body is in; when the client goes away the
  task is cancelled. With ``stream_body(request)`` the server asks, once a head
  with a Content-Length is in on an otherwise idle connection, whether the
  handler takes that body as it arrives: None (read it whole), or the bytes the
  handler holds of it at most; then the handler runs at once and reads
  ``request.body_stream`` (:mod:`kaiwo_ctrl.runtime.net.http1body`). Its client
  stalling (408) or going away cancels the handler; a handler that answers before
  the body ended gets its answer sent with ``Connection: close``, and the rest of
  the body is read and dropped before the connection closes.
* A :class:`Response` is sent whole with its Content-Length. For a stream,
  the handler calls :meth:`Request.stream`, writes chunks and returns the
  :class:`Streamed` it got; :meth:`Streamed.abort` breaks the stream off.
* Keep-alive (``keepalive_timeout`` idle) and pipelined requests answered in
  order; ``Expect: 100-continue`` is answered here (any other expectation
  gets 417), never passed to the handler as something to act on.

Limits (each connection's memory is bounded by them; the times are checked
by one sweep over the connections, every second or a quarter of the shortest):

* ``head_timeout``: from a request's first byte to the end of its head (408);
* ``body_idle_timeout``: the longest pause between body bytes (408); and
  ``min_body_rate``: once a body has been coming for ``body_idle_timeout``, it
  must have averaged this many bytes a second (408), so a slow upload cannot
  hold its reservation of the body budget for long (time reading was paused
  by the server does not count);
* ``max_header_bytes``: a head's size as it came on the wire (names, values,
  separators, line endings, empty lines), counted before the parser sees the
  bytes, and ``max_headers`` header lines (trailers included): 431, then
  close (414 for the target alone);
* ``max_body_bytes``: 413, before any of the body is read when the
  Content-Length announces it (and without ``100 Continue``);
* ``linger_timeout`` (2 s): after refusing a request (4xx, 503) the server
  half-closes and drops what the client still sends until the client closes,
  for at most this long, so the answer is not lost to a connection reset;
* ``body_budget``: the request bodies held across all connections
  (:mod:`kaiwo_ctrl.runtime.net.http1budget`; a streamed body counts what the
  handler holds plus what waits unread, or all of it once its handler asks to
  hold it whole, waiting the same way); a request waits, parsing stopped and
  reading paused, until its body fits, and gets 503 after ``budget_wait`` of
  waiting; one client (``budget_key`` of the request: by default the peer's
  address) holds at most ``body_share`` of it, and its requests over that
  share wait without holding up other clients';
* write flow control and pipelining: after an answer, the next pipelined
  request starts, and more is read, only once the transport's write buffer is
  below its high-water mark (a client that reads none of its answers for
  ``body_idle_timeout`` is cut off); while one is answered the next are parsed,
  at most ``max_pipelined`` waiting, and once one waits its turn reading
  pauses, so a connection holds those requests, one read (at most 256 KiB)
  beyond them, and one answer beyond the high-water mark.

The head gate (``head_gate``) runs when a request's head is complete, before
any of the body budget is reserved or any body byte is parsed, and before
``100 Continue``. Its contract:

* it is called with the :class:`Request` (method, path, query, headers; no
  body yet, ``request.body`` is empty) in the event loop, and must not block;
* it returns None to let the request through, a :class:`Response` to refuse
  it at once (sent with ``Connection: close``, after the answers to the
  requests before it; the body is never read, only dropped while the server
  lingers), or an awaitable of either: then the server parses nothing more
  from that connection (reading paused) until it resolves. The awaitable must
  bound its own time (its wait is not the client's stall); if it raises, the
  request gets ``error_response()``; if the client goes away it is cancelled;
* it may set ``request.budget_key`` (whose share of the body budget the
  request takes; ``budget_key`` overrides it when given), and
  ``request.admitted`` (what it learned, e.g. the caller, for the handler).

An authorization check (a route token, a bearer token reviewed by an API
server) is such a gate: it sees exactly what the handler would, before the
request costs the server any memory beyond its head.

:meth:`Server.close` stops listening, closes idle connections and gives
requests in flight ``drain_timeout`` before cancelling them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable

from kaiwo_ctrl.runtime.net.http1budget import BodyBudget
from kaiwo_ctrl.runtime.net.http1conn import _Conn
from kaiwo_ctrl.runtime.net.http1message import Handler, HeadGate, Headers, Request, Response, Streamed, plain_500

__all__ = ["Handler", "HeadGate", "Headers", "Request", "Response", "Server", "Streamed"]

class Server:
    """Serves ``handler`` on one listening socket; see the module docstring.

    ``error_response`` makes the answer to a request whose handler raised
    (the exception is logged, never sent)."""

    def __init__(
        self, handler: Handler, *, keepalive_timeout: float = 75.0, max_body_bytes: int = 32 << 20,
        max_header_bytes: int = 64 << 10, head_timeout: float = 30.0, body_idle_timeout: float = 30.0,
        body_budget: int | None = None, budget_wait: float = 120.0, error_response: Callable[[], Response] = plain_500,
        stream_body: Callable[[Request], int | None] | None = None, linger_timeout: float = 2.0,
        max_headers: int = 100, max_pipelined: int = 16, min_body_rate: int = 0, body_share: int | None = None,
        budget_key: Callable[[Request], Hashable] | None = None, head_gate: HeadGate | None = None,
    ) -> None:
        self.stream_body, self.linger_timeout = stream_body, linger_timeout
        self.budget_wait = budget_wait
        self.budget = BodyBudget(body_budget or max(8 * max_body_bytes, 256 << 20), body_share)
        self.max_headers, self.max_pipelined, self.min_body_rate = max_headers, max(1, max_pipelined), min_body_rate
        self.budget_key, self.head_gate = budget_key, head_gate
        self.handler, self.error_response = handler, error_response
        self.keepalive_timeout, self.max_body_bytes, self.max_header_bytes = keepalive_timeout, max_body_bytes, max_header_bytes
        self.head_timeout, self.body_idle_timeout = head_timeout, body_idle_timeout
        self.loop = asyncio.get_running_loop()
        self.closing = False
        self._server: asyncio.Server | None = None
        self._conns: set[_Conn] = set()
        self._in_flight = 0
        # the connections' deadlines are checked this often: to within a second, or a quarter of the shortest limit
        self._tick = min(1.0, keepalive_timeout / 4, head_timeout / 4, body_idle_timeout / 4)
        self._sweeper: asyncio.TimerHandle | None = None

    async def start(self, host: str, port: int, *, backlog: int = 4096) -> int:
        """Listen; returns the bound port."""
        self._server = await self.loop.create_server(lambda: _Conn(self), host, port, backlog=backlog, reuse_address=True)
        self._sweeper = self.loop.call_later(self._tick, self._sweep)
        return int(self._server.sockets[0].getsockname()[1])

    def _sweep(self) -> None:
        now = self.loop.time()
        for c in [c for c in self._conns if c._deadline <= now]:
            c._expired()
        self._sweeper = self.loop.call_later(self._tick, self._sweep)

    async def close(self, drain_timeout: float = 10.0) -> None:
        self.closing = True
        if self._server is not None:
            self._server.close()
        for c in list(self._conns):
            if c._task is None and not c._queue:
                c.close()
        deadline = self.loop.time() + drain_timeout
        while self._in_flight and self.loop.time() < deadline:
            await asyncio.sleep(0.05)
        for c in list(self._conns):
            if c._task is not None:
                c._task.cancel()
            c.close(abort=True)
        if self._sweeper is not None:
            self._sweeper.cancel()
        if self._server is not None:
            await self._server.wait_closed()
