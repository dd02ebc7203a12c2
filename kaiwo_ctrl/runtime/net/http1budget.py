"""The memory the HTTP/1.1 server (:mod:`kaiwo_ctrl.runtime.net.http1server`) may hold
in request bodies, across all its connections.

A request reserves its body's size (its Content-Length; for a chunked body,
the body limit) once its head is in, before any of the body is read. While
the budget cannot cover it, reading from that client pauses; reservations
are granted in the order they were asked for, as finished requests give
theirs back. A request is never granted part of its body, so the ones
admitted can always finish, and the process's body memory never exceeds the
budget (plus one read per connection).

A request that holds a part of its body already (a streamed one whose handler
finds it must hold it whole after all) asks for the rest with
:meth:`BodyBudget.reserve`, which waits in the same queue and gives up after
the server's budget wait (:class:`BudgetBusy`).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable


class BudgetBusy(Exception):
    """The budget stayed spent for the whole wait (the server answers 503)."""


class BodyBudget:
    __slots__ = ("total", "free", "_waiting")

    def __init__(self, total: int) -> None:
        self.total = self.free = total
        self._waiting: deque[tuple[int, Callable[[], None]]] = deque()

    def take(self, n: int, granted: Callable[[], None]) -> bool:
        """Reserve ``n`` bytes now (True), or queue and call ``granted`` once they are reserved (False)."""
        if not self._waiting and n <= self.free:
            self.free -= n
            return True
        self._waiting.append((n, granted))
        return False

    async def reserve(self, n: int, wait: float) -> None:
        """Reserve ``n`` bytes, waiting in turn up to ``wait`` seconds (:class:`BudgetBusy` after).

        On return the caller owns the ``n`` bytes; on any exception (cancelled
        too) none are reserved."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        got = False

        def granted() -> None:
            nonlocal got
            got = True  # counted even if the waiter was cancelled meanwhile: given back below
            if not fut.done():
                fut.set_result(None)

        if self.take(n, granted):
            return
        try:
            async with asyncio.timeout(wait):
                await fut
        except BaseException as e:
            if got:
                self.give(n)
            else:
                self.cancel(granted)
            if isinstance(e, TimeoutError):
                raise BudgetBusy(f"{n} bytes of the body budget not free after {wait}s") from None
            raise

    def cancel(self, granted: Callable[[], None]) -> None:
        """Give up a queued reservation (its client went away, or waited too long)."""
        for i, (_, cb) in enumerate(self._waiting):
            if cb == granted:
                del self._waiting[i]
                break
        self._grant()

    def give(self, n: int) -> None:
        self.free += n
        self._grant()

    def _grant(self) -> None:
        while self._waiting and self._waiting[0][0] <= self.free:
            n, cb = self._waiting.popleft()
            self.free -= n
            cb()
