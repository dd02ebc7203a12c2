"""Helpers shared by the integration and e2e tests.

The suite's one polling helper: :func:`eventually` (await it in async code)
and :func:`wait_until`, its synchronous form for sync fixtures and helpers.
Both poll ``fn`` under the same rules and fail with the same message; no
test waits with a fixed sleep. An exception ``fn`` raises ends the wait,
unless the caller's ``transient`` predicate calls it passing (a server that
answers 429 while it restarts): then it counts as "not yet", and a timeout
reports it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: the repository's root, and the unit tests' fixture files
REPO = Path(__file__).resolve().parents[2]
UNIT_FIXTURES = REPO / "test" / "unit" / "fixtures"


class _Poll:
    """One polling run: a deadline, an interval, what is waited for, and
    which errors of ``fn`` only mean "not yet"."""

    def __init__(
        self,
        timeout: float,
        interval: float,
        what: str,
        clock: Callable[[], float],
        transient: Callable[[Exception], bool] | None,
    ) -> None:
        self.clock, self.interval, self.what, self.timeout = clock, interval, what, timeout
        self.transient = transient
        self.deadline = clock() + timeout

    def check(self, last: Any) -> Any:
        """``last`` when truthy; raises once the deadline passed; else None (poll again)."""
        if last:
            return last
        if self.clock() > self.deadline:
            raise self.expired(f"last value: {last!r}")
        return None

    def expired(self, last: str) -> AssertionError:
        """The failure when the deadline passed; ``last`` says what ``fn`` last gave."""
        return AssertionError(f"timed out after {self.timeout}s waiting for {self.what}; {last}")

    def tolerates(self, error: Exception) -> bool:
        """Whether an error of ``fn`` only means "poll again" (a transient one
        while time remains); a transient one past the deadline raises the timeout."""
        if self.transient is None or not self.transient(error):
            return False
        if self.clock() > self.deadline:
            raise self.expired(f"last error: {error}") from error
        return True


async def eventually(
    fn,
    timeout: float = 30.0,
    interval: float = 0.05,
    what: str = "condition",
    transient: Callable[[Exception], bool] | None = None,
):
    """Poll ``fn`` (sync or async) until it returns a truthy value."""
    poll = _Poll(timeout, interval, what, asyncio.get_running_loop().time, transient)
    while True:
        try:
            last = fn()
            if asyncio.iscoroutine(last):
                last = await last
        except Exception as e:
            if not poll.tolerates(e):
                raise
            last = None
        if poll.check(last):
            return last
        await asyncio.sleep(interval)


def wait_until(
    fn,
    timeout: float = 30.0,
    interval: float = 0.05,
    what: str = "condition",
    transient: Callable[[Exception], bool] | None = None,
):
    """:func:`eventually` for synchronous code: poll ``fn`` until it returns a truthy value."""
    poll = _Poll(timeout, interval, what, time.monotonic, transient)
    while True:
        try:
            last = fn()
        except Exception as e:
            if not poll.tolerates(e):
                raise
            last = None
        if poll.check(last):
            return last
        time.sleep(interval)
