"""Helpers shared by the integration and e2e tests.

The suite's one polling helper: :func:`eventually` (await it in async code)
and :func:`wait_until`, its synchronous form for sync fixtures and helpers.
Both poll ``fn`` under the same rules and fail with the same message; no
test waits with a fixed sleep.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any


class _Poll:
    """One polling run: a deadline, an interval and what is waited for."""

    def __init__(self, timeout: float, interval: float, what: str, clock: Callable[[], float]) -> None:
        self.clock, self.interval, self.what, self.timeout = clock, interval, what, timeout
        self.deadline = clock() + timeout

    def check(self, last: Any) -> Any:
        """``last`` when truthy; raises once the deadline passed; else None (poll again)."""
        if last:
            return last
        if self.clock() > self.deadline:
            raise AssertionError(f"timed out after {self.timeout}s waiting for {self.what}; last value: {last!r}")
        return None


async def eventually(fn, timeout: float = 30.0, interval: float = 0.05, what: str = "condition"):
    """Poll ``fn`` (sync or async) until it returns a truthy value."""
    poll = _Poll(timeout, interval, what, asyncio.get_running_loop().time)
    while True:
        last = fn()
        if asyncio.iscoroutine(last):
            last = await last
        if poll.check(last):
            return last
        await asyncio.sleep(interval)


def wait_until(fn, timeout: float = 30.0, interval: float = 0.05, what: str = "condition"):
    """:func:`eventually` for synchronous code: poll ``fn`` until it returns a truthy value."""
    poll = _Poll(timeout, interval, what, time.monotonic)
    while True:
        last = fn()
        if poll.check(last):
            return last
        time.sleep(interval)
