"""The memory the HTTP/1.1 server (:mod:`kaiwo_ctrl.runtime.net.http1server`) may hold
in request bodies, across all its connections.

A request reserves its body's size (its Content-Length; for a chunked body,
the body limit) once its head is in, before any of the body is read. While
the budget cannot cover it, the server parses nothing more from that client
and reading pauses; reservations are granted in the order they were asked
for, as finished requests give theirs back. A request is never granted part
of its body, so the ones admitted can always finish, and the process's body
memory never exceeds the budget (plus one read per connection).

Each reservation is made for a key (the client's address, or what the server
is told to use), and one key holds at most ``share`` bytes: a request over its
key's share waits without holding up the requests of other keys behind it, so
a few slow clients of one address can hold no more than their share.

A request that holds a part of its body already (a streamed one whose handler
finds it must hold it whole after all) asks for the rest with
:meth:`BodyBudget.reserve`, which waits in the same queue and gives up after
the server's budget wait (:class:`BudgetBusy`).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Hashable


class BudgetBusy(Exception):
    """The budget stayed spent for the whole wait (the server answers 503)."""


class BodyBudget:
    __slots__ = ("total", "free", "share", "held", "_waiting", "_blocked")

    def __init__(self, total: int, share: int | None = None) -> None:
        self.total = self.free = total
        self.share = min(share or total, total)
        self.held: dict[Hashable, int] = {}  # bytes reserved per key (keys holding none are dropped)
        self._waiting: deque[tuple[int, Hashable, Callable[[], None]]] = deque()
        self._blocked = False  # a waiter is short of free bytes (not of its share): later ones queue behind it

    def _fits(self, n: int, key: Hashable) -> bool:
        return n <= self.free and self.held.get(key, 0) + n <= self.share

    def _hold(self, n: int, key: Hashable) -> None:
        self.free -= n
        self.held[key] = self.held.get(key, 0) + n

    def take(self, n: int, granted: Callable[[], None], key: Hashable = None) -> bool:
        """Reserve ``n`` bytes for ``key`` now (True), or queue and call ``granted`` once they are reserved (False)."""
        if not self._blocked and self._fits(n, key):
            self._hold(n, key)
            return True
        self._waiting.append((n, key, granted))
        if n > self.free:
            self._blocked = True
        return False

    async def reserve(self, n: int, wait: float, key: Hashable = None) -> None:
        """Reserve ``n`` bytes for ``key``, waiting in turn up to ``wait`` seconds (:class:`BudgetBusy` after).

        On return the caller owns the ``n`` bytes; on any exception (cancelled
        too) none are reserved."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        got = False

        def granted() -> None:
            nonlocal got
            got = True  # counted even if the waiter was cancelled meanwhile: given back below
            if not fut.done():
                fut.set_result(None)

        if self.take(n, granted, key):
            return
        try:
            async with asyncio.timeout(wait):
                await fut
        except BaseException as e:
            if got:
                self.give(n, key)
            else:
                self.cancel(granted)
            if isinstance(e, TimeoutError):
                raise BudgetBusy(f"{n} bytes of the body budget not free after {wait}s") from None
            raise

    def cancel(self, granted: Callable[[], None]) -> None:
        """Give up a queued reservation (its client went away, or waited too long)."""
        for i, (_, _, cb) in enumerate(self._waiting):
            if cb == granted:
                del self._waiting[i]
                break
        self._grant()

    def give(self, n: int, key: Hashable = None) -> None:
        self.free += n
        left = self.held.get(key, 0) - n
        if left > 0:
            self.held[key] = left
        else:
            self.held.pop(key, None)
        self._grant()

    def _grant(self) -> None:
        """Grant waiters in order; one over its key's share is passed over, one short of free bytes stops the rest."""
        self._blocked = False
        if not self._waiting:
            return
        keep: deque[tuple[int, Hashable, Callable[[], None]]] = deque()
        ready: list[Callable[[], None]] = []
        while self._waiting:
            w = self._waiting.popleft()
            n, key, cb = w
            if n > self.free:
                self._blocked = True
                keep.append(w)
                keep.extend(self._waiting)
                self._waiting.clear()
                break
            if self.held.get(key, 0) + n > self.share:
                keep.append(w)
                continue
            self._hold(n, key)
            ready.append(cb)
        self._waiting = keep
        for cb in ready:  # after the queue is consistent: a callback may take or give again
            cb()
