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
* ``body_idle_timeout``: the longest pause between body bytes (408);
* ``max_header_bytes`` (431, or 414 for the target alone);
* ``max_body_bytes``: 413, before any of the body is read when the
  Content-Length announces it (and without ``100 Continue``);
* ``linger_timeout`` (2 s): after refusing a request (4xx, 503) the server
  half-closes and drops what the client still sends until the client closes,
  for at most this long, so the answer is not lost to a connection reset;
* ``body_budget``: the request bodies held across all connections
  (:mod:`kaiwo_ctrl.runtime.net.http1budget`; a streamed body counts what the
  handler holds plus what waits unread, or all of it once its handler asks to
  hold it whole, waiting the same way); a request waits, reading paused,
  until its body fits, and gets 503 after ``budget_wait`` of waiting;
* pipelining: while a request is answered the next is read; once one waits its
  turn, reading pauses, so a connection holds at most two bodies (the one being
  answered, the next) and one read (at most 256 KiB) beyond them.

:meth:`Server.close` stops listening, closes idle connections and gives
requests in flight ``drain_timeout`` before cancelling them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from kaiwo_ctrl.runtime.net.http1budget import BodyBudget
from kaiwo_ctrl.runtime.net.http1conn import _Conn
from kaiwo_ctrl.runtime.net.http1message import Handler, Headers, Request, Response, Streamed, plain_500

__all__ = ["Handler", "Headers", "Request", "Response", "Server", "Streamed"]

class Server:
    """Serves ``handler`` on one listening socket; see the module docstring.

    ``error_response`` makes the answer to a request whose handler raised
    (the exception is logged, never sent)."""

    def __init__(
        self, handler: Handler, *, keepalive_timeout: float = 75.0, max_body_bytes: int = 32 << 20,
        max_header_bytes: int = 64 << 10, head_timeout: float = 30.0, body_idle_timeout: float = 30.0,
        body_budget: int | None = None, budget_wait: float = 120.0, error_response: Callable[[], Response] = plain_500,
        stream_body: Callable[[Request], int | None] | None = None, linger_timeout: float = 2.0,
    ) -> None:
        self.stream_body, self.linger_timeout = stream_body, linger_timeout
        self.budget_wait = budget_wait
        self.budget = BodyBudget(body_budget or max(8 * max_body_bytes, 256 << 20))
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
