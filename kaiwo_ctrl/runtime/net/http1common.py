"""What the HTTP/1.1 client (``http1``) and server (``http1server``) share: header encoding, write flow control."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable


def first_header(headers: Iterable[tuple[bytes, bytes]], name: bytes) -> bytes | None:
    """The first value of header ``name`` (lower-case) in raw ``headers``; None when absent."""
    n = len(name)
    for k, v in headers:
        if len(k) == n and k.lower() == name:  # the length first: most names differ in it, and lower() makes bytes
            return v
    return None


def encode_head(first_line: bytes, headers: Iterable[tuple[bytes, bytes]], ensure: bytes, default: bytes, tail: bytes) -> bytes:
    """A message head: the first line, ``headers`` as given, ``ensure: default`` unless
    ``headers`` has that header (``ensure`` 4 letters, lower-case), then ``tail``."""
    parts = [first_line]
    found = False
    for k, v in headers:
        if not found and len(k) == 4 and k.lower() == ensure:
            found = True
        parts += (k, b": ", v, b"\r\n")  # joined once at the end: no bytes made per header
    if not found:
        parts += (ensure.capitalize(), b": ", default, b"\r\n")
    parts.append(tail)
    return b"".join(parts)


class WriteFlow(asyncio.Protocol):
    """Write flow control of a protocol: :meth:`drain` waits while the transport's buffer is full."""

    __slots__ = ("write_paused", "_drain")

    def __init__(self) -> None:
        self.write_paused = False
        self._drain: asyncio.Future[None] | None = None

    def pause_writing(self) -> None:
        self.write_paused = True

    def resume_writing(self) -> None:
        self.write_paused = False
        if self._drain is not None and not self._drain.done():
            self._drain.set_result(None)

    async def drain(self) -> None:
        if self.write_paused:
            self._drain = asyncio.get_running_loop().create_future()
            try:
                await self._drain
            finally:
                self._drain = None

    def drain_failed(self, exc: BaseException) -> None:
        """The connection is gone: a waiting :meth:`drain` raises ``exc``, later ones return at once."""
        self.write_paused = False
        if self._drain is not None and not self._drain.done():
            self._drain.set_exception(exc)
