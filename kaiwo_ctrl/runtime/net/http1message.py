"""The messages of the HTTP/1.1 server (:mod:`kaiwo_ctrl.runtime.net.http1server`):
a request as parsed, a whole response, and a response sent as it is written."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Hashable, Iterable
from email.utils import formatdate
from http import HTTPStatus
from typing import Any

from kaiwo_ctrl.runtime.net.http1body import BodyStream
from kaiwo_ctrl.runtime.net.http1common import encode_head, first_header

Headers = Iterable[tuple[bytes, bytes]]
_REASONS = {s.value: s.phrase.encode() for s in HTTPStatus}
_date_cache: tuple[int, bytes] = (0, b"")


def _date() -> bytes:
    global _date_cache
    now = int(time.time())
    if _date_cache[0] != now:
        _date_cache = (now, formatdate(now, usegmt=True).encode())
    return _date_cache[1]


_status_lines: dict[tuple[bytes, int], bytes] = {}


def response_head(status: int, headers: Headers, extra: bytes, version: bytes = b"1.1") -> bytes:
    """A response's head: status line, ``headers``, ``Date`` unless given, then ``extra`` (ending the head)."""
    line = _status_lines.get((version, status))
    if line is None:
        line = b"HTTP/%s %d %s\r\n" % (version, status, _REASONS.get(status, b"Unknown"))
        if len(_status_lines) < 1024:  # statuses are 3 digits and versions two: bounded anyway
            _status_lines[(version, status)] = line
    return encode_head(line, headers, b"date", _date(), extra)


class Response:
    """A whole response; ``headers`` as (name, value) bytes, Content-Length is added."""

    __slots__ = ("status", "headers", "body")

    def __init__(self, status: int = 200, headers: list[tuple[bytes, bytes]] | None = None, body: bytes = b"") -> None:
        self.status, self.headers, self.body = status, headers or [], body


class Streamed:
    """A response sent as it is written (see :meth:`Request.stream`): chunked, or
    with the Content-Length given up front, or delimited by the connection's end."""

    __slots__ = ("status", "_conn", "_chunked", "_left", "ended")

    def __init__(self, status: int, conn: Any, chunked: bool, length: int | None = None) -> None:
        self.status, self._conn, self._chunked, self.ended = status, conn, chunked, False
        self._left = length

    async def write(self, data: bytes) -> None:
        if not data:
            return
        c = self._conn
        if c.closed:
            raise ConnectionResetError("the client went away")
        if self._left is not None:
            if len(data) > self._left:
                raise ValueError("more body than the Content-Length announced")
            self._left -= len(data)
        c.transport.write(b"%x\r\n%b\r\n" % (len(data), data) if self._chunked else data)
        if c.write_paused:
            await c.drain()

    async def end(self) -> None:
        if self.ended:
            return
        if self._left:  # shorter than announced: the client must see it broken, not complete
            self.abort()
            return
        self.ended = True
        if self._chunked and not self._conn.closed:
            self._conn.transport.write(b"0\r\n\r\n")

    def abort(self) -> None:
        """Break the response off: the client sees an incomplete body."""
        self.ended = True
        self._conn.close(abort=True)


class Request:
    __slots__ = ("method", "path", "query", "headers", "body", "body_stream", "version", "keep_alive", "reserved", "budget_key",
                 "admitted", "_conn", "_streamed")

    def __init__(self, conn: Any, method: str, url: bytes, version: str, keep_alive: bool, headers: list[tuple[bytes, bytes]]) -> None:
        path, _, query = url.partition(b"?")
        self.method = method
        self.path = path.decode("latin-1")  # as sent (percent-encoded)
        self.query = query.decode("latin-1")  # raw query string, without "?"
        self.headers = headers  # as received, in order
        self.body: bytes | bytearray = b""  # whole; a bytearray when it came in several reads (not copied again)
        self.body_stream: BodyStream | None = None  # instead, when the server streams the body to the handler
        self.version = version
        self.keep_alive = keep_alive
        self.reserved = 0  # bytes of the server's body budget held for this request
        self.budget_key: Hashable = None  # whose share of the body budget it holds (the client's address by default)
        self.admitted: Any = None  # what the head gate learned of the request (e.g. its caller), for the handler
        self._conn = conn
        self._streamed: Streamed | None = None

    def header(self, name: bytes) -> bytes | None:
        """The first value of a header (``name`` lower-case)."""
        return first_header(self.headers, name)

    def header_values(self, name: bytes) -> list[bytes]:
        n = len(name)
        return [v for k, v in self.headers if len(k) == n and k.lower() == name]

    async def stream(self, status: int, headers: Headers, length: int | None = None) -> Streamed:
        """Send the status line and headers now; the body follows in :meth:`Streamed.write`:
        ``length`` bytes when given, else chunked (HTTP/1.1) or up to the connection's end."""
        conn = self._conn
        if self.body_stream is not None and not self.body_stream.complete:
            self.keep_alive = False  # answered before its body ended: the connection closes after the rest
        chunked = self.version == "1.1" and length is None
        if length is not None:
            extra = b"Content-Length: %d\r\n\r\n" % length
        elif chunked:
            extra = b"Transfer-Encoding: chunked\r\n\r\n"
        else:
            extra = b"Connection: close\r\n\r\n"
            self.keep_alive = False
        if not self.keep_alive and not extra.startswith(b"Connection"):
            extra = b"Connection: close\r\n" + extra
        version = self.version.encode() if self.version in ("1.0", "1.1") else b"1.1"
        conn.transport.write(response_head(status, headers, extra, version))
        self._streamed = s = Streamed(status, conn, chunked, length)
        return s


Handler = Callable[[Request], Awaitable["Response | Streamed"]]


def plain_500() -> Response:
    """The server's answer to a request whose handler raised, unless it is given another."""
    return Response(500, [(b"Content-Type", b"text/plain")], b"500 Internal Server Error")


#: Runs when a request's head is complete, before any of its body is read or budgeted (see ``http1server.Server``)
HeadGate = Callable[[Request], "Response | None | Awaitable[Response | None]"]
