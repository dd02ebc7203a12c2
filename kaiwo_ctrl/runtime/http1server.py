"""A lean HTTP/1.1 server on asyncio protocols and httptools' request parser.

The serving half of :mod:`kaiwo_ctrl.runtime.http1`, for a hop where CPU per
request matters (a proxy's front door): requests are parsed by llhttp (in C,
strict about framing: a request with both Content-Length and chunked framing
is refused), headers stay the raw bytes they came in, and a response is one
``transport.write``. Uvicorn serves HTTP the same way.

* One handler, ``async (Request) -> Response | Streamed``, runs in a task of
  its own per request; when the client goes away the task is cancelled.
* A :class:`Response` is sent whole with its Content-Length. For a stream,
  the handler calls :meth:`Request.stream`, writes chunks (each goes out at
  once, chunked encoding; close-delimited for HTTP/1.0) and returns the
  :class:`Streamed` it got; :meth:`Streamed.abort` breaks the stream off.
* Keep-alive (``keepalive_timeout`` idle), pipelined requests answered in
  order, ``Expect: 100-continue``, a body limit (413) and a header limit (431).
* :meth:`Server.close` stops listening, closes idle connections and gives
  requests in flight ``drain_timeout`` before cancelling them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from email.utils import formatdate
from http import HTTPStatus

import httptools

from kaiwo_ctrl.runtime.http1common import WriteFlow, encode_head, first_header

log = logging.getLogger("kaiwo_ctrl.runtime.http1server")

Headers = Iterable[tuple[bytes, bytes]]
_REASONS = {s.value: s.phrase.encode() for s in HTTPStatus}
_date_cache: tuple[int, bytes] = (0, b"")


def _date() -> bytes:
    global _date_cache
    now = int(time.time())
    if _date_cache[0] != now:
        _date_cache = (now, formatdate(now, usegmt=True).encode())
    return _date_cache[1]


def _head(status: int, headers: Headers, extra: bytes, version: bytes = b"1.1") -> bytes:
    return encode_head(b"HTTP/%s %d %s\r\n" % (version, status, _REASONS.get(status, b"Unknown")), headers, b"date", _date(), extra)


class Response:
    """A whole response; ``headers`` as (name, value) bytes, Content-Length is added."""

    __slots__ = ("status", "headers", "body")

    def __init__(self, status: int = 200, headers: list[tuple[bytes, bytes]] | None = None, body: bytes = b"") -> None:
        self.status, self.headers, self.body = status, headers or [], body


class Streamed:
    """A response sent as it is written (see :meth:`Request.stream`)."""

    __slots__ = ("status", "_conn", "_chunked", "ended")

    def __init__(self, status: int, conn: _Conn, chunked: bool) -> None:
        self.status, self._conn, self._chunked, self.ended = status, conn, chunked, False

    async def write(self, data: bytes) -> None:
        if not data:
            return
        c = self._conn
        if c.closed:
            raise ConnectionResetError("the client went away")
        c.transport.write(b"%x\r\n%b\r\n" % (len(data), data) if self._chunked else data)
        if c.write_paused:
            await c.drain()

    async def end(self) -> None:
        if not self.ended:
            self.ended = True
            if self._chunked and not self._conn.closed:
                self._conn.transport.write(b"0\r\n\r\n")

    def abort(self) -> None:
        """Break the response off: the client sees an incomplete body."""
        self.ended = True
        self._conn.close(abort=True)


class Request:
    __slots__ = ("method", "path", "query", "headers", "body", "version", "keep_alive", "_conn", "_streamed")

    def __init__(self, conn: _Conn, method: str, url: bytes, version: str, keep_alive: bool, headers: list[tuple[bytes, bytes]]) -> None:
        path, _, query = url.partition(b"?")
        self.method = method
        self.path = path.decode("latin-1")  # as sent (percent-encoded)
        self.query = query.decode("latin-1")  # raw query string, without "?"
        self.headers = headers  # as received, in order
        self.body = b""
        self.version = version
        self.keep_alive = keep_alive
        self._conn = conn
        self._streamed: Streamed | None = None

    def header(self, name: bytes) -> bytes | None:
        """The first value of a header (``name`` lower-case)."""
        return first_header(self.headers, name)

    def header_values(self, name: bytes) -> list[bytes]:
        return [v for k, v in self.headers if k.lower() == name]

    async def stream(self, status: int, headers: Headers) -> Streamed:
        """Send the status line and headers now; the body follows in :meth:`Streamed.write`."""
        conn = self._conn
        chunked = self.version == "1.1"
        extra = b"Transfer-Encoding: chunked\r\n\r\n" if chunked else b"Connection: close\r\n\r\n"
        if not chunked:
            self.keep_alive = False
        elif not self.keep_alive:
            extra = b"Connection: close\r\n" + extra
        conn.transport.write(_head(status, headers, extra, self.version.encode()))
        self._streamed = s = Streamed(status, conn, chunked)
        return s


Handler = Callable[[Request], Awaitable["Response | Streamed"]]


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
        self._body: list[bytes] = []
        self._body_len = 0
        self._current: Request | None = None  # being parsed
        self._queue: deque[Request] = deque()  # parsed, waiting their turn
        self._task: asyncio.Task[None] | None = None
        self._serving: Request | None = None
        self._idle: asyncio.TimerHandle | None = None

    # asyncio protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.server._conns.add(self)
        self._arm_idle()

    def data_received(self, data: bytes) -> None:
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
            if not self.closed:  # else a callback refused the request and answered already
                self._refuse_quietly(400, b"bad request")

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.server._conns.discard(self)
        if self._idle is not None:
            self._idle.cancel()
        self._queue.clear()
        if self._task is not None:
            self._task.cancel()  # the client went away: so does its request
        self.drain_failed(ConnectionResetError("the client went away"))

    # httptools callbacks
    def on_message_begin(self) -> None:
        self._url, self._headers, self._head_bytes, self._body, self._body_len = b"", [], 0, [], 0
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None

    def on_url(self, url: bytes) -> None:
        self._url += url
        self._head_bytes += len(url)
        if self._head_bytes > self.server.max_header_bytes:
            self._refuse(414 if len(self._url) > self.server.max_header_bytes else 431, b"request head too large")

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name, value))
        self._head_bytes += len(name) + len(value)
        if self._head_bytes > self.server.max_header_bytes:
            self._refuse(431, b"request head too large")

    def on_headers_complete(self) -> None:
        p = self.parser
        req = Request(self, p.get_method().decode(), self._url, p.get_http_version(), p.should_keep_alive(), self._headers)
        self._current = req
        expect = req.header(b"expect")
        if expect is not None and expect.lower() == b"100-continue" and not self._queue and self._task is None:
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def on_body(self, body: bytes) -> None:
        self._body_len += len(body)
        if self._body_len > self.server.max_body_bytes:
            self._refuse(413, b"request body too large")
        self._body.append(body)

    def on_message_complete(self) -> None:
        req = self._current
        assert req is not None
        self._current = None
        req.body = self._body[0] if len(self._body) == 1 else b"".join(self._body)
        self._body = []
        if self._task is None:
            self._start(req)
        else:
            self._queue.append(req)
            if len(self._queue) >= 8:
                self.transport.pause_reading()  # a client pipelining far ahead waits

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
            if isinstance(resp, Response):
                self._send(req, resp)
            elif resp is None and req._streamed is None:
                self._send(req, Response(500, [(b"Content-Type", b"text/plain")], b"500 Internal Server Error"))
            elif req._streamed is not None and not req._streamed.ended:
                if resp is None:
                    req._streamed.abort()  # a stream whose handler failed ends broken, not clean
                else:
                    await req._streamed.end()
        finally:
            server._in_flight -= 1
            self._task = self._serving = None
            self._next(req)

    def _send(self, req: Request, resp: Response) -> None:
        extra = b"Content-Length: %d\r\n\r\n" % len(resp.body)
        if not req.keep_alive:
            extra = b"Connection: close\r\n" + extra
        elif req.version == "1.0":
            extra = b"Connection: keep-alive\r\n" + extra
        head = _head(resp.status, resp.headers, extra, req.version.encode() if req.version in ("1.0", "1.1") else b"1.1")
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
            req = self._queue.popleft()
            if len(self._queue) < 8:
                self.transport.resume_reading()
            self._start(req)
        elif self._current is None:
            self._arm_idle()

    def _arm_idle(self) -> None:
        if self._idle is not None:
            self._idle.cancel()
        self._idle = self.loop.call_later(self.server.keepalive_timeout, self.close)

    def _refuse(self, status: int, message: bytes) -> None:
        """From a parser callback: answer (unless a response is due first), close, stop the parser."""
        self._refuse_quietly(status, message)
        raise _Refused()

    def _refuse_quietly(self, status: int, message: bytes) -> None:
        if not self.closed and self._task is None:
            self.transport.write(_head(status, [(b"Content-Type", b"text/plain")],
                                       b"Connection: close\r\nContent-Length: %d\r\n\r\n" % len(message)) + message)
        self.close()

    def close(self, abort: bool = False) -> None:
        if not self.closed:
            self.closed = True
            if abort:
                self.transport.abort()
            else:
                self.transport.close()


class _Refused(Exception):
    """Stops the parser after a refused request."""


class Server:
    """Serves ``handler`` on one listening socket; see the module docstring."""

    def __init__(
        self, handler: Handler, *, keepalive_timeout: float = 75.0, max_body_bytes: int = 256 << 20,
        max_header_bytes: int = 64 << 10,
    ) -> None:
        self.handler = handler
        self.keepalive_timeout, self.max_body_bytes, self.max_header_bytes = keepalive_timeout, max_body_bytes, max_header_bytes
        self.loop = asyncio.get_running_loop()
        self.closing = False
        self._server: asyncio.Server | None = None
        self._conns: set[_Conn] = set()
        self._in_flight = 0

    async def start(self, host: str, port: int, *, backlog: int = 4096) -> int:
        """Listen; returns the bound port."""
        self._server = await self.loop.create_server(lambda: _Conn(self), host, port, backlog=backlog, reuse_address=True)
        return int(self._server.sockets[0].getsockname()[1])

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
        if self._server is not None:
            await self._server.wait_closed()
