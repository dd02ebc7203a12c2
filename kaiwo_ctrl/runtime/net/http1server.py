"""A lean HTTP/1.1 server on asyncio protocols and httptools' request parser.

The serving half of :mod:`kaiwo_ctrl.runtime.net.http1`, for a hop where CPU per request
matters (a proxy's front door): llhttp (in C) parses, strictly (both Content-Length and
chunked framing, a duplicate or bad Content-Length, a bad chunk size, obs-folded header
lines: 400); headers stay the raw bytes they came in; a response is one
``transport.write``, as uvicorn does. Messages: :mod:`kaiwo_ctrl.runtime.net.http1message`.

* One handler, ``async (Request) -> Response | Streamed``, runs in a task of
  its own per request, once its body is in; when the client goes away the
  task is cancelled.
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
* ``body_budget``: the request bodies held across all connections
  (:mod:`kaiwo_ctrl.runtime.net.http1budget`); a request waits, reading paused,
  until its body fits, and gets 503 after ``budget_wait`` of waiting;
* pipelining: while a request is answered the next is read; once one waits its
  turn, reading pauses, so a connection holds at most two bodies (the one being
  answered, the next) and one read (at most 256 KiB) beyond them.

:meth:`Server.close` stops listening, closes idle connections and gives
requests in flight ``drain_timeout`` before cancelling them.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable

import httptools

from kaiwo_ctrl.runtime.net.http1budget import BodyBudget
from kaiwo_ctrl.runtime.net.http1common import WriteFlow
from kaiwo_ctrl.runtime.net.http1message import Handler, Headers, Request, Response, Streamed, plain_500, response_head

__all__ = ["Handler", "Headers", "Request", "Response", "Server", "Streamed"]

log = logging.getLogger("kaiwo_ctrl.runtime.net.http1server")

_IDLE, _HEAD, _BODY = 0, 1, 2  # what the connection's deadline is for
_NEVER = float("inf")


class _Conn(WriteFlow):
    def __init__(self, server: Server) -> None:
        super().__init__()
        self.server = server
        self.loop = server.loop
        self.transport: asyncio.Transport = None  # type: ignore[assignment]
        self.parser = httptools.HttpRequestParser(self)
        self.closed = False
        self._url = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._head_bytes = 0
        self._body: bytes | bytearray = b""
        self._current: Request | None = None  # being parsed
        self._queue: deque[Request] = deque()  # parsed, waiting their turn (what one read held)
        self._held: list[bytes] | None = None  # bytes not fed to the parser while a request waits its turn
        self._task: asyncio.Task[None] | None = None
        self._serving: Request | None = None
        self._deadline = _NEVER  # checked by the server's sweep (cheaper than a timer per request)
        self._length: bytes | None = None  # the request's Content-Length, Expect and Transfer-Encoding
        self._expect: bytes | None = None
        self._chunked = False
        self._refusal: bytes | None = None  # the answer refusing a request, sent after those before it
        self._budget_wait = False  # reading paused until the body budget covers the current request
        self._need = 0  # what the current request reserves of the body budget
        self._expecting = False  # 100 Continue is due once the body budget is granted
        self._waiting = _IDLE
        self._last = 0.0  # when the last body bytes came

    # asyncio protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.server._conns.add(self)
        self._arm(_IDLE, self.server.keepalive_timeout)

    def data_received(self, data: bytes) -> None:
        if self._held is not None:
            self._held.append(data)  # reading is paused; at most what was already read lands here
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            # an Upgrade request (h2c, websocket) parsed whole is answered as plain HTTP/1.1, and the
            # connection closes after it (the parser reads nothing more); one with a body is refused
            last = self._queue[-1] if self._queue else self._serving
            if self._current is None and last is not None:
                last.keep_alive = False
            else:
                self._refuse_quietly(400, b"upgrades are not supported")
        except httptools.HttpParserError:
            if not self.closed and self._refusal is None:  # else a callback refused the request already
                self._refuse_quietly(400, b"bad request")
        if (self._queue or self._refusal is not None) and self._held is None and not self.closed:
            self._held = []  # requests wait their turn: read no further until they are served
            self.transport.pause_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.server._conns.discard(self)
        self._disarm()
        if self._budget_wait:
            self._budget_wait = False
            self.server.budget.cancel(self._granted)
        for req in (*self._queue, self._current):
            if req is not None:
                self._give_back(req)
        self._queue.clear()
        self._held = None
        if self._task is not None:
            self._task.cancel()  # the client went away: so does its request
        self.drain_failed(ConnectionResetError("the client went away"))

    # one deadline per connection, for the keep-alive idle time, the head or the body
    def _arm(self, what: int, after: float) -> None:
        self._waiting = what
        self._deadline = self.loop.time() + after

    def _disarm(self) -> None:
        self._deadline = _NEVER

    def _expired(self) -> None:
        self._deadline = _NEVER
        if self.closed:
            return
        if self._waiting == _IDLE:
            self.close()
        elif self._held is not None:
            # the request waits behind the one being answered (reading paused by us): not the client's stall
            self._arm(self._waiting, self.server.body_idle_timeout)
        elif self._budget_wait:  # the body budget stayed spent for budget_wait: busy, not the client's fault
            self._budget_wait = False
            self.server.budget.cancel(self._granted)
            self._refuse_quietly(503, b"server busy, try again")
        elif self._waiting == _BODY and (left := self._last + self.server.body_idle_timeout - self.loop.time()) > 0:
            self._arm(_BODY, left)  # body bytes came since: wait the rest
        else:
            self._refuse_quietly(408, b"request timeout")

    # httptools callbacks
    def on_message_begin(self) -> None:
        self._url, self._headers, self._head_bytes, self._body = b"", [], 0, b""
        self._length, self._expect, self._chunked = None, None, False
        self._arm(_HEAD, self.server.head_timeout)

    def on_url(self, url: bytes) -> None:
        self._url += url
        self._head_bytes += len(url)
        if self._head_bytes > self.server.max_header_bytes:
            self._refuse(414 if len(self._url) > self.server.max_header_bytes else 431, b"request head too large")

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name, value))
        n = len(name)
        self._head_bytes += n + len(value)
        if self._head_bytes > self.server.max_header_bytes:
            self._refuse(431, b"request head too large")
        if n == 14 and name.lower() == b"content-length":
            self._length = value
        elif n == 6 and name.lower() == b"expect":
            self._expect = value
        elif n == 17 and name.lower() == b"transfer-encoding":
            self._chunked = True

    def on_headers_complete(self) -> None:
        p = self.parser
        req = Request(self, p.get_method().decode(), self._url, p.get_http_version(), p.should_keep_alive(), self._headers)
        self._current = req
        length, expect = self._length, self._expect
        if length is not None and int(length) > self.server.max_body_bytes:  # llhttp checked it is digits
            self._refuse(413, b"request body too large")
        if expect is not None and expect.lower() != b"100-continue":
            self._refuse(417, b"expectation not supported")
        self._expecting = expect is not None and self._task is None and not self._queue
        budget = self.server.budget
        need = int(length) if length is not None else (self.server.max_body_bytes if self._chunked else 0)
        self._need = need = min(need, budget.total)
        if need and not budget.take(need, self._granted):
            self._budget_wait = True
            self.transport.pause_reading()
            self._arm(_BODY, self.server.budget_wait)
            return
        self._granted()

    def _granted(self) -> None:
        """The body budget covers the current request: read its body."""
        if self._current is not None:
            self._current.reserved = self._need
        self._last = self.loop.time()
        self._arm(_BODY, self.server.body_idle_timeout)
        if self._expecting:
            self._expecting = False
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        if self._budget_wait:
            self._budget_wait = False
            if self._held is None:
                self.transport.resume_reading()

    def _give_back(self, req: Request) -> None:
        if req.reserved:
            self.server.budget.give(req.reserved)
            req.reserved = 0

    def on_body(self, body: bytes) -> None:
        self._last = self.loop.time()
        have = self._body
        if len(have) + len(body) > self.server.max_body_bytes:
            self._refuse(413, b"request body too large")
        if not have:
            self._body = body
        elif isinstance(have, bytearray):
            have += body
        else:
            self._body = bytearray(have) + body  # several reads: gathered in place, not joined at the end

    def on_message_complete(self) -> None:
        req = self._current
        assert req is not None
        self._current = None
        req.body, self._body = self._body, b""
        self._disarm()
        if self._task is None:
            self._start(req)
        else:
            self._queue.append(req)

    # request handling
    def _start(self, req: Request) -> None:
        self._serving = req
        self._task = self.loop.create_task(self._run(req))

    async def _run(self, req: Request) -> None:
        server = self.server
        server._in_flight += 1
        try:
            try:
                resp = await server.handler(req)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("request handler failed", extra={"path": req.path[:200]})
                resp = None
            if self.closed:
                return
            streamed = req._streamed
            if streamed is not None:  # its status went out already: it ends cleanly, or broken
                if resp is streamed:
                    await streamed.end()
                elif not streamed.ended:
                    streamed.abort()  # the handler failed, or answered anew (a deadline mid-stream)
            elif isinstance(resp, Response):
                self._send(req, resp)
            else:
                self._send(req, server.error_response())
        finally:
            server._in_flight -= 1
            self._give_back(req)
            self._task = self._serving = None
            self._next(req)

    def _send(self, req: Request, resp: Response) -> None:
        extra = b"Content-Length: %d\r\n\r\n" % len(resp.body)
        if not req.keep_alive:
            extra = b"Connection: close\r\n" + extra
        elif req.version == "1.0":
            extra = b"Connection: keep-alive\r\n" + extra
        head = response_head(resp.status, resp.headers, extra, req.version.encode() if req.version in ("1.0", "1.1") else b"1.1")
        body = resp.body if req.method != "HEAD" else b""  # a HEAD answer has the headers only
        if len(body) < 65536:
            self.transport.write(head + body)
        else:
            self.transport.write(head)
            self.transport.write(body)

    def _next(self, done: Request) -> None:
        if self.closed:
            return
        if not done.keep_alive or self.server.closing:
            self.close()
            return
        if self._queue:
            self._start(self._queue.popleft())
            if self._queue or self._refusal is not None:
                return  # still more parsed than answered: keep the rest of the bytes held
        if self._refusal is not None:
            self.transport.write(self._refusal)
            self.close()
            return
        held, self._held = self._held, None
        if held is not None:
            if not self._budget_wait:
                self.transport.resume_reading()
            for data in held:
                self.data_received(data)
        if self._task is None and self._current is None and not self.closed:
            self._arm(_IDLE, self.server.keepalive_timeout)

    def _refuse(self, status: int, message: bytes) -> None:
        """From a parser callback: answer (unless a response is due first), close, stop the parser."""
        self._refuse_quietly(status, message)
        raise _Refused()

    def _refuse_quietly(self, status: int, message: bytes) -> None:
        """Answer ``status`` and close; after the answers due first, when a request is being answered."""
        if self.closed or self._refusal is not None:
            return
        answer = response_head(status, [(b"Content-Type", b"text/plain")],
                               b"Connection: close\r\nContent-Length: %d\r\n\r\n" % len(message)) + message
        if self._task is None:
            self.transport.write(answer)
            self.close()
        else:
            self._refusal = answer  # read nothing more; sent once the requests before it are answered
            self._disarm()

    def close(self, abort: bool = False) -> None:
        if not self.closed:
            self.closed = True
            self._disarm()
            if abort:
                self.transport.abort()
            else:
                self.transport.close()


class _Refused(Exception):
    """Stops the parser after a refused request."""


class Server:
    """Serves ``handler`` on one listening socket; see the module docstring.

    ``error_response`` makes the answer to a request whose handler raised
    (the exception is logged, never sent)."""

    def __init__(
        self, handler: Handler, *, keepalive_timeout: float = 75.0, max_body_bytes: int = 32 << 20,
        max_header_bytes: int = 64 << 10, head_timeout: float = 30.0, body_idle_timeout: float = 30.0,
        body_budget: int | None = None, budget_wait: float = 120.0, error_response: Callable[[], Response] = plain_500,
    ) -> None:
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
