"""The answering half of a connection of the HTTP/1.1 server (:mod:`kaiwo_ctrl.runtime.net.http1conn`):
the task that runs each request's handler, whole answers, refusals, the turn of
the next pipelined request, which waits until the client has read enough of the
answers before it (write flow control), and the connection's one deadline."""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import Any

from kaiwo_ctrl.runtime.net.http1common import WriteFlow
from kaiwo_ctrl.runtime.net.http1message import Request, Response, response_head

log = logging.getLogger("kaiwo_ctrl.runtime.net.http1server")

_IDLE, _HEAD, _BODY, _DRAIN = 0, 1, 2, 3  # what the connection's deadline is for
_NEVER = float("inf")


class Answering(WriteFlow):
    """Mixed into ``http1conn._Conn``, whose state it shares."""


    server: Any
    loop: asyncio.AbstractEventLoop
    transport: asyncio.Transport
    closed: bool
    _task: asyncio.Task[None] | None
    _serving: Request | None
    _current: Request | None
    _held: list[bytes] | None
    _stream: Any
    _queue: deque[Request]
    _waiting: int
    _deadline: float

    def __init__(self) -> None:
        WriteFlow.__init__(self)
        self._refusal: bytes | None = None  # the answer refusing a request, sent after those before it
        self._lingering = False  # answered before its streamed body ended: the rest is dropped, then we close
        self._draining = False  # refused and half-closed: what still comes is dropped until the client closes
        self._after: Request | None = None  # answered; the next waits until the client reads (the write buffer drains)
        self._wbuf = 0  # the write buffer's size when that wait began (or last shrank)
        self._saved: tuple[int, float] | None = None  # the deadline the wait set aside

    _budget_wait: bool
    _stream_paused: bool
    _last: float
    _body_start: float
    _received: int

    # supplied by http1conn
    def _granted(self) -> None: ...
    def _give_back(self, req: Request) -> None: ...
    def _unblock(self) -> None: ...

    # one deadline per connection, for the keep-alive idle time, the head, the body or a full write buffer
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
        elif self._waiting == _DRAIN:
            self._drain_expired()
        elif self._budget_wait:  # the body budget stayed spent for budget_wait: busy, not the client's fault
            self._budget_wait = False
            self.server.budget.cancel(self._granted)
            self._refuse_quietly(503, b"server busy, try again")
        elif self._held is not None or self._stream_paused:
            # the request waits behind the one being answered, its gate, or its handler (reading paused by us): not the client's stall
            self._arm(self._waiting, self.server.body_idle_timeout)
        elif self._waiting == _BODY and (left := self._body_time_left()) > 0:
            self._arm(_BODY, left)  # body bytes came since, fast enough: wait the rest
        elif self._lingering:
            self.close()
        elif self._stream is not None and self._task is not None:
            self._stream_stalled()
        else:
            self._refuse_quietly(408, b"request timeout")

    def _body_time_left(self) -> float:
        """Until the body stalls: no byte for body_idle_timeout, or (after that long) under min_body_rate on average."""
        s, now = self.server, self.loop.time()
        left = self._last + s.body_idle_timeout - now
        if s.min_body_rate:
            left = min(left, self._body_start + s.body_idle_timeout + self._received / s.min_body_rate - now)
        return left

    def _drain_expired(self) -> None:
        """The client read none of its answers for body_idle_timeout: it is not coming back for them."""
        size = self.transport.get_write_buffer_size()
        if size < self._wbuf:
            self._wbuf = size
            self._arm(_DRAIN, self.server.body_idle_timeout)
        else:
            self.close(abort=True)

    def resume_writing(self) -> None:
        super().resume_writing()
        done, self._after = self._after, None
        if done is not None:  # the client read its answers: the next request's turn
            if self._saved is not None:
                what, deadline = self._saved
                self._saved = None
                self._arm(what, deadline - self.loop.time())
            self._next(done)

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
        if self.write_paused:
            # the client reads slower than it asks: start nothing, read nothing, until its answers drain
            # (else one connection that never reads queues every pipelined answer in memory)
            self._after = done
            if self._held is None:
                self._held = []
                self.transport.pause_reading()
            self._wbuf = self.transport.get_write_buffer_size()
            self._saved = (self._waiting, self._deadline)
            self._arm(_DRAIN, self.server.body_idle_timeout)
            return
        if self._queue:
            self._start(self._queue.popleft())
            if self._queue or self._refusal is not None:
                return  # still more parsed than answered: keep the rest of the bytes held
        if self._refusal is not None:
            self.transport.write(self._refusal)
            self._drain_close()
            return
        self._unblock()
        if self._task is None and self._current is None and not self.closed and self._held is None:
            self._arm(_IDLE, self.server.keepalive_timeout)

    def _stream_taken(self) -> None: ...

    def _refuse(self, status: int, message: bytes) -> None:
        """From a parser callback: answer (unless a response is due first), close, stop the parser."""
        self._refuse_quietly(status, message)
        raise Refused()

    def _refuse_quietly(self, status: int, message: bytes) -> None:
        """Answer ``status`` and close; after the answers due first, when a request is being answered."""
        self._refuse_with(Response(status, [(b"Content-Type", b"text/plain")], message))

    def _refuse_with(self, resp: Response) -> None:
        if self.closed or self._refusal is not None:
            return
        answer = response_head(resp.status, resp.headers,
                               b"Connection: close\r\nContent-Length: %d\r\n\r\n" % len(resp.body)) + resp.body
        if self._task is None and self._after is None:
            self.transport.write(answer)
            self._drain_close()
        else:
            self._refusal = answer  # read nothing more; sent once the requests before it are answered
            self._disarm()

    def _stream_stalled(self) -> None:
        """The client stalled mid-body while its handler reads it: 408 (unless an answer began), close, cancel the handler."""
        req = self._serving
        if req is not None and req._streamed is None:
            self.transport.write(response_head(408, [(b"Content-Type", b"text/plain")],
                                               b"Connection: close\r\nContent-Length: 15\r\n\r\n") + b"request timeout")
        self._stream.fail(TimeoutError("the client stalled"))
        self.close()
        self._task.cancel()  # type: ignore[union-attr]

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


class Refused(Exception):
    """Stops the parser after a refused request."""
