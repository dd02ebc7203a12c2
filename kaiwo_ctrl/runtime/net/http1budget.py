"""The memory the HTTP/1.1 server (:mod:`kaiwo_ctrl.runtime.net.http1server`) may hold
in request bodies, across all its connections.

A request reserves its body's size (its Content-Length; for a chunked body,
the body limit) once its head is in, before any of the body is read. While
the budget cannot cover it, reading from that client pauses; reservations
are granted in the order they were asked for, as finished requests give
theirs back. A request is never granted part of its body, so the ones
admitted can always finish, and the process's body memory never exceeds the
budget (plus one read per connection).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable


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
