"""Request deadlines checked by one sweep, not a timer per request.

``asyncio.timeout`` schedules and cancels a timer for every request: with
uvloop that was about 7 µs of a proxied request's CPU. Requests in flight are
few (bounded by the connections) and their deadlines long (seconds to
minutes), so one sweep every ``tick`` while any deadline is armed finds the
ones that passed and cancels their tasks; a deadline is acted on up to
``tick`` late, never early. The task then sees ``CancelledError``, and
:meth:`Deadlines.disarm` tells a deadline's cancellation from a client that
went away (as ``asyncio.timeout`` does, by ``Task.uncancel``).
"""

from __future__ import annotations

import asyncio
from typing import Any

TICK = 0.1


class Deadlines:
    def __init__(self, tick: float = TICK) -> None:
        self.tick = tick
        self._armed: dict[asyncio.Task[Any], float] = {}
        self._expired: set[asyncio.Task[Any]] = set()
        self._timer: asyncio.TimerHandle | None = None

    def arm(self, task: asyncio.Task[Any], seconds: float) -> None:
        """Cancel ``task`` once ``seconds`` have passed, unless it is disarmed first."""
        loop = task.get_loop()
        self._armed[task] = loop.time() + seconds
        if self._timer is None:
            self._timer = loop.call_later(self.tick, self._sweep, loop)

    def disarm(self, task: asyncio.Task[Any]) -> bool:
        """Stop watching ``task``. True when its deadline passed and cancelled it, and
        that cancellation is the only one (then it is withdrawn: the task goes on to
        answer the timeout); False otherwise (a client that went away stays cancelled)."""
        self._armed.pop(task, None)
        if task not in self._expired:
            return False
        self._expired.discard(task)
        return task.uncancel() == 0

    def __len__(self) -> int:
        return len(self._armed)

    def _sweep(self, loop: asyncio.AbstractEventLoop) -> None:
        now = loop.time()
        for task in [t for t, at in self._armed.items() if at <= now]:
            del self._armed[task]
            if not task.done():
                self._expired.add(task)
                task.cancel()
        self._timer = loop.call_later(self.tick, self._sweep, loop) if self._armed else None

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
