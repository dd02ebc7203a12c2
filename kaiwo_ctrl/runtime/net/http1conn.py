"""One connection of the HTTP/1.1 server (:mod:`kaiwo_ctrl.runtime.net.http1server`):
parsing, limits, pipelining, and the task that answers each request."""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import Any

import httptools

from kaiwo_ctrl.runtime.net.http1body import STREAM_BUFFER, BodyStream
from kaiwo_ctrl.runtime.net.http1common import WriteFlow
from kaiwo_ctrl.runtime.net.http1message import Request, Response, response_head

log = logging.getLogger("kaiwo_ctrl.runtime.net.http1server")

_IDLE, _HEAD, _BODY = 0, 1, 2  # what the connection's deadline is for
_NEVER = float("inf")


class _Conn(WriteFlow):
    def __init__(self, server: Any) -> None:  # an http1server.Server (not imported: it imports this module)
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
        self._stream: BodyStream | None = None  # the current request's body, streamed to its handler
        self._stream_paused = False  # reading paused until the handler takes what waits of it
        self._lingering = False  # answered before its streamed body ended: the rest is dropped, then we close
        self._draining = False  # refused and half-closed: what still comes is dropped until the client closes

    # asyncio protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.server._conns.add(self)
        self._arm(_IDLE, self.server.keepalive_timeout)

    def data_received(self, data: bytes) -> None:
        if self._draining:
            return
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
        self._draining = False
        self.server._conns.discard(self)
        self._disarm()
        if self._budget_wait:
            self._budget_wait = False
            self.server.budget.cancel(self._granted)
        for req in (*self._queue, self._current):
            if req is not None:
                self._give_back(req)
        if self._stream is not None:
            self._stream.fail(ConnectionResetError("the client went away"))
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
        if self._draining:
            self.close()
            return
        if self.closed:
            return
        if self._waiting == _IDLE:
            self.close()
        elif self._held is not None or self._stream_paused:
            # the request waits behind the one being answered, or its handler (reading paused by us): not the client's stall
            self._arm(self._waiting, self.server.body_idle_timeout)
        elif self._budget_wait:  # the body budget stayed spent for budget_wait: busy, not the client's fault
            self._budget_wait = False
            self.server.budget.cancel(self._granted)
            self._refuse_quietly(503, b"server busy, try again")
        elif self._waiting == _BODY and (left := self._last + self.server.body_idle_timeout - self.loop.time()) > 0:
            self._arm(_BODY, left)  # body bytes came since: wait the rest
        elif self._lingering:
            self.close()
        elif self._stream is not None and self._task is not None:
            self._stream_stalled()
        else:
            self._refuse_quietly(408, b"request timeout")

    def _stream_stalled(self) -> None:
        """The client stalled mid-body while its handler reads it: 408 (unless an answer began), close, cancel the handler."""
        req = self._serving
        if req is not None and req._streamed is None:
            self.transport.write(response_head(408, [(b"Content-Type", b"text/plain")],
                                               b"Connection: close\r\nContent-Length: 15\r\n\r\n") + b"request timeout")
        self._stream.fail(TimeoutError("the client stalled"))  # type: ignore[union-attr]
        self.close()
        self._task.cancel()  # type: ignore[union-attr]

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
        stream = self.server.stream_body
        if need and length is not None and stream is not None and self._task is None and not self._queue:
            hold = stream(req)
            if hold is not None:
                self._stream = req.body_stream = BodyStream(need, self._stream_taken, lambda: self._hold_whole(req))
                need = min(need, hold + 2 * STREAM_BUFFER)  # what the handler holds, what waits unread and one read
        self._need = need = min(need, budget.total)
        if need and not budget.take(need, self._granted):
            self._budget_wait = True
            self.transport.pause_reading()
            self._arm(_BODY, self.server.budget_wait)
            return
        self._granted()

    def _granted(self) -> None:
        """The body budget covers the current request: read its body."""
        req = self._current
        if req is not None:
            req.reserved = self._need
            if req.body_stream is not None and self._task is None:
                self._start(req)  # its handler reads the body as it comes
        self._last = self.loop.time()
        self._arm(_BODY, self.server.body_idle_timeout)
        if self._expecting:
            self._expecting = False
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        if self._budget_wait:
            self._budget_wait = False
            if self._held is None:
                self.transport.resume_reading()

    async def _hold_whole(self, req: Request) -> None:
        """Its handler holds the streamed body whole after all: reserve the rest of it (BudgetBusy after budget_wait)."""
        budget = self.server.budget
        more = min(req.body_stream.length, budget.total) - req.reserved  # type: ignore[union-attr]
        if more > 0:
            await budget.reserve(more, self.server.budget_wait)
            req.reserved += more

    def _give_back(self, req: Request) -> None:
        if req.reserved:
            self.server.budget.give(req.reserved)
            req.reserved = 0

    def _stream_taken(self) -> None:
        """The handler took what waited of its streamed body: read on."""
        if self._stream_paused:
            self._stream_paused = False
            self._last = self.loop.time()
            if self._held is None and not self._budget_wait and not self.closed:
                self.transport.resume_reading()

    def on_body(self, body: bytes) -> None:
        self._last = self.loop.time()
        if (stream := self._stream) is not None:
            stream.feed(body)
            if stream.full and not self._stream_paused:
                self._stream_paused = True
                self.transport.pause_reading()
            return
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
        self._disarm()
        stream = self._stream
        if stream is not None:  # its handler runs already
            self._stream = None
            stream.end()
            if self._lingering:
                self.close()
            return
        req.body, self._body = self._body, b""
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
            if (body := req.body_stream) is not None and not body.complete:
                req.keep_alive = False  # answered before its body ended: the rest is dropped, then the connection closes
                body.discard()
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
        if self._stream is not None and self._stream.discarding:
            self._lingering = True  # until its body has come, or stalls
            self._stream_taken()
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
            self._drain_close()
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
            self._drain_close()
        else:
            self._refusal = answer  # read nothing more; sent once the requests before it are answered
            self._disarm()

    def _drain_close(self) -> None:
        """After a refusal: half-close and drop what comes until the client closes or ``linger_timeout``
        passes. Closing with bytes unread resets the connection, which can lose the answer (a 413 mid-upload)."""
        if self.closed:
            return
        t = self.transport
        if not t.can_write_eof():
            self.close()
            return
        self.closed = True
        self._draining = True
        self._held = None
        t.write_eof()
        t.resume_reading()
        self._arm(_IDLE, self.server.linger_timeout)

    def close(self, abort: bool = False) -> None:
        if self._draining:
            self._draining = False
            (self.transport.abort if abort else self.transport.close)()
            return
        if not self.closed:
            self.closed = True
            self._disarm()
            if abort:
                self.transport.abort()
            else:
                self.transport.close()


class _Refused(Exception):
    """Stops the parser after a refused request."""
