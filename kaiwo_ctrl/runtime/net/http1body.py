"""Request bodies that are not held whole: one the server hands its handler as it
arrives (:class:`BodyStream`), and one the client sends as it is produced
(:class:`StreamBody`).

A :class:`BodyStream` is fed by the server's parser and read by the handler
(``async for chunk in request.chunks()``). The server pauses reading from the
client while more than ``STREAM_BUFFER`` bytes wait unread (so it holds at most
that and one read beyond), and resumes once the handler has taken them. Its
reservation of the server's body budget covers only what the handler said it
holds; a handler that must hold the whole body after all calls
:meth:`BodyStream.hold_whole` first.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable

Chunk = bytes | bytearray | memoryview

#: bytes a streamed request body may wait unread in the server before it stops reading from the client
STREAM_BUFFER = 256 << 10


class BodyStream:
    """The body of one request, as it arrives; iterated once."""

    __slots__ = ("length", "buffered", "complete", "discarding", "_chunks", "_error", "_waiter", "_resume", "_hold")

    def __init__(self, length: int, resume: Callable[[], None],
                 hold: Callable[[], Awaitable[None]] | None = None) -> None:
        self.length = length  # the Content-Length
        self.buffered = 0  # bytes fed and not yet taken
        self.complete = False  # the whole body has been fed
        self.discarding = False  # nobody reads it any more: what comes is dropped
        self._chunks: deque[bytes] = deque()
        self._error: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._resume = resume  # called when the reader has taken what waited (reading may resume)
        self._hold = hold  # reserves the whole body of the server's budget

    async def hold_whole(self) -> None:
        """Have the server's body budget cover the whole body, before the handler holds all of it:
        waits in turn as a body read whole does (``http1budget.BudgetBusy`` after the server's
        budget wait). A stream fed by hand, with no server, has no budget to take from."""
        if self._hold is not None:
            await self._hold()

    def feed(self, data: bytes) -> None:
        if self.discarding:
            return
        self._chunks.append(data)
        self.buffered += len(data)
        self._wake()

    def end(self) -> None:
        self.complete = True
        self._wake()

    def fail(self, exc: BaseException) -> None:
        if self._error is None and not self.complete:
            self._error = exc
            self._wake()

    def discard(self) -> None:
        """The reader is done with it: drop what waits and what is still to come."""
        self.discarding = True
        self._chunks.clear()
        self.buffered = 0

    @property
    def full(self) -> bool:
        return self.buffered >= STREAM_BUFFER

    def _wake(self) -> None:
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    async def chunks(self) -> AsyncIterator[bytes]:
        while True:
            if self._chunks:
                chunk = self._chunks.popleft()
                self.buffered -= len(chunk)
                if not self._chunks:
                    self._resume()
                yield chunk
                continue
            if self.complete:
                return
            if self._error is not None:
                raise self._error
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None


class StreamBody:
    """A request body of a known ``length``, sent as ``chunks`` yields it (see ``http1.Pool.request``).

    It can be sent once: ``started`` tells whether any of it was taken (a
    request that failed after that cannot be sent again)."""

    __slots__ = ("length", "_chunks", "started", "sent")

    def __init__(self, length: int, chunks: AsyncIterator[Chunk]) -> None:
        self.length, self._chunks = length, chunks
        self.started = False
        self.sent = 0  # bytes taken from ``chunks`` so far

    async def __aiter__(self) -> AsyncIterator[Chunk]:
        if self.started:
            raise RuntimeError("a streamed body can be sent once")
        self.started = True
        async for chunk in self._chunks:
            self.sent += len(chunk)
            if self.sent > self.length:
                raise ValueError(f"the body is longer than its announced {self.length} bytes")
            yield chunk
        if self.sent != self.length:
            raise ValueError(f"the body ended after {self.sent} of its announced {self.length} bytes")
