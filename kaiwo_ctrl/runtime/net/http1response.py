"""The client side's answer to one request (:mod:`kaiwo_ctrl.runtime.net.http1`):
headers as received, the body read whole or iterated as it arrives, and the
hand-back of its connection to the pool; and the client's errors."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from kaiwo_ctrl.runtime.net.http1common import first_header


class TransportError(OSError):
    """The exchange failed below HTTP: no connection, a broken one, or garbage."""


class ConnectError(TransportError):
    pass


class RemoteClosed(TransportError):
    pass


class ProtocolError(TransportError):
    pass


class HeadTooLarge(ProtocolError):
    """The answer's head is longer than the pool's ``max_head_bytes``."""


class Response:
    """The answer to one request; read it, or iterate it, then :meth:`release`."""

    __slots__ = (
        "status", "headers", "content_length", "keep_alive", "complete", "_conn",
        "_chunks", "_buffered", "_headers_done", "_until_eof", "_error", "_released",
    )

    def __init__(self, conn: Any) -> None:
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []  # as received, in order
        self.content_length: int | None = None
        self.keep_alive = False
        self.complete = False
        self._conn = conn
        self._chunks: list[bytes] = []
        self._buffered = 0
        self._headers_done = False
        self._until_eof = False
        self._error: BaseException | None = None
        self._released = False

    def header(self, name: bytes) -> bytes | None:
        """The first value of a header (``name`` lower-case)."""
        return first_header(self.headers, name)

    def _take(self) -> bytes:
        chunks = self._chunks
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        self._chunks = []
        self._conn.consumed(len(data))
        return data

    async def read(self) -> bytes:
        """The whole (rest of the) body."""
        parts = []
        while True:  # the loop of _iter, without an async generator (the loop registers each one)
            if self._chunks:
                parts.append(self._take())
            elif self.complete:
                return parts[0] if len(parts) == 1 else b"".join(parts)
            elif self._error is not None:
                raise self._error
            else:
                await self._conn.wait()

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._iter()

    async def _iter(self) -> AsyncIterator[bytes]:
        while True:
            if self._chunks:
                yield self._take()
                continue
            if self.complete:
                return
            if self._error is not None:
                raise self._error
            await self._conn.wait()

    def release(self) -> None:
        """Give the connection back (kept alive only after a complete, keep-alive exchange)."""
        if self._released:
            return
        self._released = True
        conn = self._conn
        conn.response = None
        if self.complete and self.keep_alive and not conn.closed:
            conn.pool._put(conn)
        else:
            conn.abort()

    async def __aenter__(self) -> Response:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.release()
