"""Write flow control shared by the HTTP/1.1 client (``http1``) and server (``http1server``)."""

from __future__ import annotations

import asyncio


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
