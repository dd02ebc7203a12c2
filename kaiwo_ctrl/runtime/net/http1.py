"""A lean HTTP/1.1 client: keep-alive connection pools on asyncio protocols.

For hops where CPU per request matters (a proxy's upstream hop): answers are
parsed by httptools (llhttp, in C); nothing is decoded unasked.

* :class:`Pool` keeps idle connections per ``host:port``, reused last-in
  first-out. One the server closes leaves at once; one idle longer than
  ``idle_timeout`` is closed (a sweep runs while any is idle, so a server that
  went away leaves no connections behind).
* :meth:`Pool.request` sends a request with a bytes body, or a
  :class:`~kaiwo_ctrl.runtime.net.http1body.StreamBody` (a known length, sent as
  it is produced, always on a new connection: it cannot be sent twice, should a
  kept-alive one turn out closed). Its :class:`Response` comes once its headers
  are in; the body is read whole or iterated (``async for``), reading paused
  while more than ``buffer_limit`` bytes wait. Cancelling a request or
  abandoning a response closes the connection, so the server sees the client go.
* Errors are :class:`TransportError` (an ``OSError``): :class:`ConnectError`
  (refused, or no connection within ``connect_timeout``), :class:`RemoteClosed`
  (closed before the response ended), :class:`ProtocolError`; an optional
  ``read_timeout`` bounds each wait for the server and raises ``TimeoutError``.

Framing (RFC 9112) is strict, because a pooled connection that is out of step
with its server hands one caller's answer to the next caller:

* interim answers (``100 Continue``, ``103 Early Hints``, ...) are skipped; a
  ``101`` (an upgrade nobody asked for) is a :class:`ProtocolError`;
* a connection goes back to the pool only when its request went out whole, its
  answer was read to the end and no byte beyond it has arrived (a server that
  answers before a streamed body ended has its answer read, and sending stops);
* the answer's head (interim answers included) is bounded by
  ``max_head_bytes`` (:class:`HeadTooLarge`); it, invalid framing
  (:class:`ProtocolError`) and an answer cut short (:class:`RemoteClosed`)
  close the connection.

TLS: with an ``ssl`` context the certificate is checked against the authority's
host. Not supported (not needed): HEAD, upgrades, proxies, pipelining.
"""

from __future__ import annotations

import asyncio
import ssl as ssl_module
from collections.abc import Iterable

import httptools

from kaiwo_ctrl.runtime.net.http1body import StreamBody
from kaiwo_ctrl.runtime.net.http1common import WriteFlow, encode_head
from kaiwo_ctrl.runtime.net.http1response import ConnectError, HeadTooLarge, ProtocolError, RemoteClosed, Response, TransportError

__all__ = ["ConnectError", "HeadTooLarge", "Pool", "ProtocolError", "RemoteClosed", "Response", "StreamBody", "TransportError"]

BUFFER_LIMIT = 1 << 20
MAX_HEAD_BYTES = 64 << 10
SEND_SLICE = 256 << 10


class _Conn(WriteFlow):
    """One connection; carries one exchange at a time."""

    __slots__ = (
        "pool", "key", "loop", "transport", "parser", "spare", "idle_since", "closed", "response",
        "reused", "head_bytes", "interim", "sent_whole", "_waiter", "_paused",
    )

    def __init__(self, pool: Pool, key: str) -> None:
        super().__init__()
        self.pool, self.key = pool, key
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.parser: httptools.HttpResponseParser | None = None
        self.spare: httptools.HttpResponseParser | None = None  # the parser of the last complete answer, for the next
        self.idle_since = 0.0
        self.closed = False
        self.response: Response | None = None
        self.reused = False  # served an exchange before
        self.head_bytes = 0  # of the answer being read, interim answers included
        self.interim = False  # the message being parsed is a 1xx answer
        self.sent_whole = False  # the current request went out to its last byte
        self._waiter: asyncio.Future[None] | None = None
        self._paused = False

    # asyncio protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self.parser is None:
            self.abort()  # bytes while idle: the server is confused; never reuse this connection
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as e:
            cause = e.__context__
            self._fail(cause if isinstance(cause, ProtocolError) else ProtocolError(f"bad response: {e}"))
            self.abort()

    def eof_received(self) -> bool:
        return False  # close the transport; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.pool._forget(self)
        r = self.response
        if r is not None and not r.complete:
            if r._headers_done and r._until_eof and exc is None:
                self.on_message_complete()  # a body delimited by the connection's end
            else:
                self._fail(RemoteClosed("connection closed before the response ended" + (f": {exc}" if exc else "")))
        self.drain_failed(RemoteClosed("connection closed while sending"))

    # httptools callbacks
    def on_message_begin(self) -> None:
        r = self.response
        if r is None or r.complete:
            # bytes after the answer (a second answer to one request): the connection is out of step
            raise ProtocolError("data after the end of the response")

    def on_status(self, status: bytes) -> None:
        self._count(len(status) + 15)

    def on_header(self, name: bytes, value: bytes) -> None:
        self.head_bytes += len(name) + len(value) + 4
        if self.head_bytes > self.pool.max_head_bytes:
            raise HeadTooLarge(f"response head over {self.pool.max_head_bytes} bytes")
        self.response.headers.append((name, value))  # type: ignore[union-attr]

    def _count(self, n: int) -> None:
        self.head_bytes += n
        if self.head_bytes > self.pool.max_head_bytes:
            raise HeadTooLarge(f"response head over {self.pool.max_head_bytes} bytes")

    def on_headers_complete(self) -> None:
        r = self.response
        assert r is not None and self.parser is not None
        status = self.parser.get_status_code()
        if status < 200:
            if status == 101:
                raise ProtocolError("unexpected 101 Switching Protocols")
            self.interim = True  # 100 Continue, 103 Early Hints, ...: not the answer; skipped
            r.headers.clear()
            return
        r.status = status
        r.keep_alive = self.parser.should_keep_alive()
        chunked = False
        for k, v in r.headers:
            n = len(k)  # the length first: lower() makes bytes
            if n == 14 and k.lower() == b"content-length":
                r.content_length = int(v)
            elif n == 17 and k.lower() == b"transfer-encoding":
                chunked = b"chunked" in v.lower()
        r._until_eof = r.content_length is None and not chunked and r.status not in (204, 304)
        r._headers_done = True
        self._wake()

    def on_body(self, body: bytes) -> None:
        r = self.response
        assert r is not None
        r._chunks.append(body)
        r._buffered += len(body)
        if r._buffered > self.pool.buffer_limit and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        r = self.response
        assert r is not None
        if self.interim:
            self.interim = False  # the final answer follows on the same parser
            return
        r.complete = True
        self.spare, self.parser = self.parser, None  # llhttp is ready for the next message: reused if kept alive
        self._wake()

    # helpers
    def _wake(self) -> None:
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    def _fail(self, exc: BaseException) -> None:
        r = self.response
        if r is not None and r._error is None:
            r._error = exc
        w = self._waiter
        if w is not None and not w.done():
            w.set_exception(exc)

    async def wait(self) -> None:
        """Until the parser reports progress (or the read timeout passes)."""
        self._waiter = w = self.loop.create_future()
        timeout = self.pool.read_timeout
        handle = self.loop.call_later(timeout, self._timed_out, w) if timeout is not None else None
        try:
            await w
        finally:
            self._waiter = None
            if handle is not None:
                handle.cancel()

    def _timed_out(self, w: asyncio.Future[None]) -> None:
        if not w.done():
            w.set_exception(TimeoutError("no data from the server within the read timeout"))
            self.abort()

    def consumed(self, n: int) -> None:
        r = self.response
        assert r is not None
        r._buffered -= n
        if self._paused and r._buffered <= self.pool.buffer_limit // 2 and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()

    def abort(self) -> None:
        if not self.closed:
            self.closed = True
            if self.transport is not None:
                self.transport.abort()
        self.pool._forget(self)

    async def send(self, head: bytes, body: bytes | bytearray) -> None:
        t = self.transport
        assert t is not None
        if len(body) < 65536:
            t.write(head + body)
        else:  # in slices, each written once the last has gone: the transport never copies the whole body
            t.write(head)
            view = memoryview(body)
            for i in range(0, len(body), SEND_SLICE):
                t.write(view[i:i + SEND_SLICE])
                await self.drain()
        await self.drain()
        self.sent_whole = True

    async def send_stream(self, head: bytes, body: StreamBody) -> None:
        """Send ``body`` as it comes; stop early (the connection is then never reused) when the server answered whole, or went."""
        t = self.transport
        assert t is not None
        t.write(head)
        async for chunk in body:
            if self.closed or (self.response is not None and self.response.complete):
                break
            t.write(chunk)
            try:
                await self.drain()
            except RemoteClosed:
                break
        else:
            self.sent_whole = True
            return
        if self.response is None or not self.response._headers_done:  # gone without an answer
            raise RemoteClosed("connection closed while sending the body")


class _Host:
    __slots__ = ("host", "port", "idle")

    def __init__(self, key: str) -> None:
        host, _, port = key.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"authority must be host:port, got {key!r}")
        self.host, self.port = host.strip("[]"), int(port)
        self.idle: list[_Conn] = []  # the oldest first

    def trim(self, idle_before: float) -> None:
        while self.idle and self.idle[0].idle_since < idle_before:
            self.idle.pop(0).abort()


class Pool:
    """Keep-alive HTTP/1.1 connections per ``host:port``; see the module docstring."""

    def __init__(
        self, *, connect_timeout: float | None = 5.0, read_timeout: float | None = None, idle_timeout: float = 60.0,
        max_idle_per_host: int = 256, buffer_limit: int = BUFFER_LIMIT, ssl: ssl_module.SSLContext | None = None,
        max_head_bytes: int = MAX_HEAD_BYTES,
    ) -> None:
        self.ssl = ssl
        self.max_head_bytes = max_head_bytes
        self.connect_timeout, self.read_timeout, self.idle_timeout = connect_timeout, read_timeout, idle_timeout
        self.max_idle_per_host, self.buffer_limit = max_idle_per_host, buffer_limit
        self._hosts: dict[str, _Host] = {}
        self._busy: set[_Conn] = set()
        self._sweeper: asyncio.TimerHandle | None = None

    def idle_count(self, authority: str) -> int:
        h = self._hosts.get(authority)
        return len(h.idle) if h else 0

    async def request(
        self, method: str, authority: str, target: str, headers: Iterable[tuple[bytes, bytes]] = (),
        body: bytes | bytearray | StreamBody = b"",
    ) -> Response:
        """Send ``method target`` to ``authority`` (``host:port``).

        ``headers`` are sent as given (name, value) plus ``Content-Length``
        for the body; add ``Host`` yourself (the authority is used when absent
        from ``headers``). Returns once the response's headers are in.
        """
        if method == "HEAD":
            raise ValueError("HEAD is not supported")
        data = encode_head(f"{method} {target} HTTP/1.1\r\n".encode("latin-1"), headers, b"host", authority.encode("latin-1"),
                           b"Content-Length: %d\r\n\r\n" % (body.length if isinstance(body, StreamBody) else len(body)))
        while True:
            conn = await self._acquire(authority, fresh=isinstance(body, StreamBody))
            resp = conn.response = Response(conn)
            conn.parser, conn.spare = conn.spare or httptools.HttpResponseParser(conn), None
            conn.head_bytes, conn.interim, conn.sent_whole = 0, False, False
            try:
                if isinstance(body, StreamBody):
                    await conn.send_stream(data, body)
                else:
                    await conn.send(data, body)
                while not resp._headers_done:
                    if resp._error is not None:
                        raise resp._error
                    await conn.wait()
            except RemoteClosed:
                resp.release()
                if conn.reused and not conn.head_bytes and resp._error is not None and not isinstance(body, StreamBody):
                    continue  # a kept-alive connection the server had just closed: once more on a new one
                raise
            except BaseException:
                resp.release()  # not complete: closes the connection, so the server sees us go
                raise
            return resp

    async def _acquire(self, key: str, fresh: bool = False) -> _Conn:
        h = self._hosts.get(key)
        if h is None:
            h = self._hosts[key] = _Host(key)
        idle = h.idle
        while idle and not fresh:
            conn = idle.pop()
            if conn.closed:
                continue
            if conn.loop.time() - conn.idle_since > self.idle_timeout:
                conn.abort()
                continue
            conn.reused = True
            self._busy.add(conn)
            return conn
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect_timeout):
                _, conn = await loop.create_connection(
                    lambda: _Conn(self, key), h.host, h.port, ssl=self.ssl, server_hostname=h.host if self.ssl else None
                )
        except TimeoutError as e:
            raise ConnectError(f"no connection to {key} within {self.connect_timeout}s") from e
        except OSError as e:
            raise ConnectError(f"cannot connect to {key}: {e.strerror or e}") from e
        self._busy.add(conn)
        return conn

    def _put(self, conn: _Conn) -> None:
        self._busy.discard(conn)
        h = self._hosts.get(conn.key)
        if h is None or len(h.idle) >= self.max_idle_per_host or not conn.sent_whole:
            conn.abort()
            return
        if conn._paused and conn.transport is not None:
            conn._paused = False
            conn.transport.resume_reading()
        conn.idle_since = conn.loop.time()
        h.trim(conn.idle_since - self.idle_timeout)
        h.idle.append(conn)
        if self._sweeper is None:
            self._sweeper = conn.loop.call_later(self.idle_timeout, self._sweep)

    def _sweep(self) -> None:
        """Close connections idle longer than ``idle_timeout``; forget hosts with none left."""
        self._sweeper = None
        loop = asyncio.get_running_loop()
        now = loop.time()
        for key, h in list(self._hosts.items()):
            h.trim(now - self.idle_timeout)
            if not h.idle and not any(c.key == key for c in self._busy):
                del self._hosts[key]
        if any(h.idle for h in self._hosts.values()):
            self._sweeper = loop.call_later(self.idle_timeout, self._sweep)

    def _forget(self, conn: _Conn) -> None:
        self._busy.discard(conn)
        h = self._hosts.get(conn.key)
        if h is not None and conn in h.idle:
            h.idle.remove(conn)

    async def close(self) -> None:
        """Close every connection, idle or busy."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        conns = [c for h in self._hosts.values() for c in h.idle] + list(self._busy)
        for c in conns:
            c.abort()
        self._hosts.clear()
        self._busy.clear()
