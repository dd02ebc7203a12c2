"""One connection of the HTTP/1.1 server (:mod:`kaiwo_ctrl.runtime.net.http1server`):
parsing, limits, the head gate, pipelining, and the task that answers each request.
Answers and refusals: :mod:`kaiwo_ctrl.runtime.net.http1answer`."""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import Any

import httptools

from kaiwo_ctrl.runtime.net.http1answer import _BODY, _HEAD, _IDLE, _NEVER, Answering, Refused
from kaiwo_ctrl.runtime.net.http1body import STREAM_BUFFER, BodyStream
from kaiwo_ctrl.runtime.net.http1message import Request, Response
from kaiwo_ctrl.runtime.net.http1read import Reader

log = logging.getLogger("kaiwo_ctrl.runtime.net.http1server")



class _Conn(Answering, Reader):
    # slots: more than 30 instance attributes would cost every attribute access its specialization
    __slots__ = (
        "_after", "_body", "_body_start", "_bodiless", "_budget_wait", "_chunked", "_count", "_current", "_deadline", "_draining",
        "_expect", "_expecting", "_gating", "_head_end", "_head_limit", "_headers", "_held", "_in_body", "_in_head",
        "_last", "_left", "_length", "_lingering", "_need", "_paused_at", "_peer", "_queue", "_received", "_refusal",
        "_replaying", "_saved", "_serving", "_stopped_at_head", "_stream", "_stream_paused", "_tail", "_task", "_url",
        "_waiting", "_wbuf", "_wire", "closed", "loop", "parser", "server", "transport"
    )

    def __init__(self, server: Any) -> None:  # an http1server.Server (not imported: it imports this module)
        Answering.__init__(self)
        Reader.__init__(self)
        self.server = server
        self.loop = server.loop
        self.transport: asyncio.Transport = None  # type: ignore[assignment]
        self.parser = httptools.HttpRequestParser(self)
        self.closed = False
        self._peer: Any = None  # the client's address: its key in the body budget unless the server names another
        self._url = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._count = 0  # header lines of the current head
        self._wire = 0  # bytes of the current head as they came (Reader counts them)
        self._head_limit = server.max_header_bytes
        self._in_body = False  # between the end of a head and the end of its message
        self._in_head = False  # between the start of a message and the end of its head
        self._replaying = False  # a new parser is brought to the end of the current head: its callbacks are no news
        # a head whose gate is awaited ended its message (no body): it completes once the gate lets it on
        self._bodiless = False
        self._left = -1  # Content-Length bytes still to come (-1: chunked, or none)
        self._body: bytes | bytearray = b""
        self._current: Request | None = None  # being parsed
        self._queue: deque[Request] = deque()  # parsed, waiting their turn
        self._held: list[bytes] | None = None  # bytes not parsed while parsing is stopped (reading paused)
        self._task: asyncio.Task[None] | None = None
        self._serving: Request | None = None
        self._deadline = _NEVER  # checked by the server's sweep (cheaper than a timer per request)
        self._length: bytes | None = None  # the request's Content-Length, Expect and Transfer-Encoding
        self._expect: bytes | None = None
        self._chunked = False
        self._gating: asyncio.Future[Any] | None = None  # the head gate's verdict, while it is awaited
        self._budget_wait = False  # parsing stopped until the body budget covers the current request
        self._need = 0  # what the current request reserves of the body budget
        self._expecting = False  # 100 Continue is due once the body budget is granted
        self._waiting = _IDLE
        self._last = 0.0  # when the last body bytes came
        self._body_start = 0.0  # when the body could start coming (its grant), moved on by our own pauses
        self._received = 0  # body bytes of the current request so far
        self._paused_at = 0.0  # when we paused reading mid-body (not the client's time)
        self._stream: BodyStream | None = None  # the current request's body, streamed to its handler
        self._stream_paused = False  # reading paused until the handler takes what waits of it

    # asyncio protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        self._peer = peer[0] if isinstance(peer, tuple) else None
        self.server._conns.add(self)
        self._arm(_IDLE, self.server.keepalive_timeout)

    def data_received(self, data: bytes) -> None:
        if self._draining:
            return
        if self._held is not None:
            self._held.append(data)  # reading is paused; at most what was already read lands here
            return
        self._feed(data)
        if (self._queue or self._refusal is not None) and self._held is None and not self.closed:
            self._held = []  # requests wait their turn: read no further until they are served
            self.transport.pause_reading()

    def _parse(self, piece: bytes | memoryview) -> bool:
        try:
            self.parser.feed_data(piece)
            return True
        except httptools.HttpParserUpgrade:
            # an Upgrade request (h2c, websocket) parsed whole is answered as plain HTTP/1.1, and the
            # connection closes after it (the parser reads nothing more); one with a body is refused
            last = self._queue[-1] if self._queue else self._serving
            if self._current is None and last is not None:
                last.keep_alive = False
            else:
                self._refuse_quietly(400, b"upgrades are not supported")
        except httptools.HttpParserError as e:
            if isinstance(e.__context__, _StopParser):
                return False
            if not self.closed and self._refusal is None:  # else a callback refused the request already
                self._refuse_quietly(400, b"bad request")
        return False

    def _replay(self, head: memoryview) -> None:
        self.parser = httptools.HttpRequestParser(self)
        self._replaying = True
        try:
            self.parser.feed_data(head)
        finally:
            self._replaying = False

    def _stopped(self) -> bool:
        """Parse no further for now: a request waits for the budget or the head gate, the pipeline is full, or we close."""
        return (self._budget_wait or self._gating is not None or len(self._queue) >= self.server.max_pipelined
                or self._refusal is not None or self.closed or self._held is not None)

    def _hold(self, rest: bytes) -> None:
        if self._held is None:
            self._held = []
            self.transport.pause_reading()
            if self._in_body:
                self._paused_at = self.loop.time()
        if rest:
            self._held.insert(0, rest)

    def _unblock(self) -> None:
        """Parse what was held and read on, unless something still stops it."""
        if (self.closed or self._budget_wait or self._gating is not None or self._after is not None
                or self._queue or self._refusal is not None):
            return
        held, self._held = self._held, None
        if held is None:
            return
        if self._paused_at:
            self._body_start += self.loop.time() - self._paused_at
            self._paused_at = 0.0
        if not self._stream_paused:
            self.transport.resume_reading()
        for i, data in enumerate(held):
            self.data_received(data)
            if self._held is not None and i + 1 < len(held):
                self._held.extend(held[i + 1:])  # stopped again: the rest waits behind what that read left
                return

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._draining = False
        self._after = None
        self.server._conns.discard(self)
        self._disarm()
        if self._gating is not None:
            self._gating.cancel()
            self._gating = None
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

    # httptools callbacks
    def on_message_begin(self) -> None:
        if self._replaying:
            return
        self._in_head = True
        self._url, self._headers, self._count, self._body = b"", [], 0, b""
        self._length, self._expect, self._chunked = None, None, False
        self._arm(_HEAD, self.server.head_timeout)

    def on_url(self, url: bytes) -> None:
        if self._replaying:
            return
        self._url += url
        if self._wire > self._head_limit:
            self._refuse(414 if len(self._url) > self._head_limit else 431, b"request head too large")

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._replaying:
            return
        self._headers.append((name, value))
        self._count += 1
        if self._wire > self._head_limit or self._count > self.server.max_headers:
            self._refuse(431, b"request head too large")
        n = len(name)
        if n == 14 and name.lower() == b"content-length":
            self._length = value
        elif n == 6 and name.lower() == b"expect":
            self._expect = value
        elif n == 17 and name.lower() == b"transfer-encoding":
            self._chunked = True

    def _head_too_large(self) -> None:
        self._refuse_quietly(414 if self._current is None and not self._headers and len(self._url) > self._head_limit else 431,
                             b"request head too large")

    def on_headers_complete(self) -> None:
        if self._replaying:
            return
        self._in_head = False
        self._received = 0
        p = self.parser
        req = Request(self, p.get_method().decode(), self._url, p.get_http_version(), p.should_keep_alive(), self._headers)
        self._current = req
        self._in_body = True
        length, expect = self._length, self._expect
        self._left = int(length) if length is not None and not self._chunked else -1  # llhttp checked it is digits
        if length is not None and self._left > self.server.max_body_bytes:
            self._refuse(413, b"request body too large")
        if expect is not None and expect.lower() != b"100-continue":
            self._refuse(417, b"expectation not supported")
        gate = self.server.head_gate
        if gate is not None:
            verdict = gate(req)
            if isinstance(verdict, Response):
                self._refuse_with(verdict)
                raise Refused()
            if verdict is not None:  # decided later: parse nothing more until then (the piece ends with this head)
                self._gating = asyncio.ensure_future(verdict)
                self._gating.add_done_callback(self._gated)
                self._hold(b"")
                self._stop_at_head()
                return
        self._admit(req)
        if self._budget_wait:
            self._stop_at_head()

    def _stop_at_head(self) -> None:
        """Parse nothing past this head for now: a read fed whole is cut here (see Reader._feed_one)."""
        if self._head_end:
            self._stopped_at_head = True
            raise _StopParser()

    def _gated(self, fut: asyncio.Future[Any]) -> None:
        if fut is not self._gating:
            return  # the connection went away meanwhile
        self._gating = None
        req = self._current
        if self.closed or req is None:
            return
        exc = fut.exception()
        if exc is not None:
            log.error("head gate failed", extra={"error": repr(exc)[:300], "path": req.path[:200]})
            self._refuse_with(self.server.error_response())
        elif isinstance(verdict := fut.result(), Response):
            self._refuse_with(verdict)
        else:
            self._admit(req)
            if self._bodiless:  # a request with no body ended with its head, while the gate was awaited
                self._bodiless = False
                self.on_message_complete()
            self._unblock()

    def _admit(self, req: Request) -> None:
        """The head passed its gate: reserve its body of the budget (parsing stops until granted)."""
        server = self.server
        idle = self._task is None and not self._queue and self._after is None
        self._expecting = self._expect is not None and idle
        budget = server.budget
        need = self._left if self._left >= 0 else (server.max_body_bytes if self._chunked else 0)
        stream = server.stream_body
        if need and self._left >= 0 and stream is not None and idle:
            hold = stream(req)
            if hold is not None:
                self._stream = req.body_stream = BodyStream(need, self._stream_taken, lambda: self._hold_whole(req))
                need = min(need, hold + 2 * STREAM_BUFFER)  # what the handler holds, what waits unread and one read
        self._need = need = min(need, budget.total)
        if server.budget_key is not None:
            req.budget_key = server.budget_key(req)
        elif req.budget_key is None:  # unless the head gate named one: the client's address
            req.budget_key = self._peer
        if need and not budget.take(need, self._granted, req.budget_key):
            self._budget_wait = True
            if self._held is None:
                self._held = []
                self.transport.pause_reading()
            self._arm(_BODY, server.budget_wait)
            return
        self._grant()

    def _granted(self) -> None:
        """Called by the budget once it covers the current request (maybe from another connection's give)."""
        req = self._current
        if req is not None:
            req.reserved = self._need  # owned at once, so the connection going away gives it back
        self.loop.call_soon(self._grant_later)

    def _grant_later(self) -> None:
        if self.closed or not self._budget_wait:
            return
        self._budget_wait = False
        self._grant()
        self._unblock()

    def _grant(self) -> None:
        """The body budget covers the current request: read its body."""
        req = self._current
        if req is not None:
            req.reserved = self._need
            if req.body_stream is not None and self._task is None:
                self._start(req)  # its handler reads the body as it comes
        self._last = self._body_start = self.loop.time()
        self._received, self._paused_at = 0, 0.0
        self._arm(_BODY, self.server.body_idle_timeout)
        if self._expecting:
            self._expecting = False
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    async def _hold_whole(self, req: Request) -> None:
        """Its handler holds the streamed body whole after all: reserve the rest of it (BudgetBusy after budget_wait)."""
        budget = self.server.budget
        more = min(req.body_stream.length, budget.total) - req.reserved  # type: ignore[union-attr]
        if more > 0:
            await budget.reserve(more, self.server.budget_wait, req.budget_key)
            req.reserved += more

    def _give_back(self, req: Request) -> None:
        if req.reserved:
            self.server.budget.give(req.reserved, req.budget_key)
            req.reserved = 0

    def _stream_taken(self) -> None:
        """The handler took what waited of its streamed body: read on."""
        if self._stream_paused:
            self._stream_paused = False
            self._last = now = self.loop.time()
            if self._paused_at:
                self._body_start += now - self._paused_at
                self._paused_at = 0.0
            if self._held is None and not self._budget_wait and not self.closed:
                self.transport.resume_reading()

    def on_body(self, body: bytes) -> None:
        self._last = self.loop.time()
        self._received += len(body)
        if self._left > 0:
            self._left -= len(body)
        if (stream := self._stream) is not None:
            stream.feed(body)
            if stream.full and not self._stream_paused:
                self._stream_paused = True
                self._paused_at = self._last
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
        if self._replaying or self._gating is not None:  # a head without a body, its gate's verdict awaited:
            self._bodiless = True  # the request ends once the gate lets it on (see _gated), never before
            return
        req = self._current
        assert req is not None
        self._current = None
        self._in_body, self._wire, self._left = False, 0, -1
        self._disarm()
        stream = self._stream
        if stream is not None:  # its handler runs already
            self._stream = None
            stream.end()
            if self._lingering:
                self.close()
            return
        req.body, self._body = self._body, b""
        if self._task is None and self._after is None:
            self._start(req)
        else:
            self._queue.append(req)


class _StopParser(Exception):
    """Stops the parser at the end of a head whose body must wait (the read is then cut there)."""
