"""Background tasks that never die silently.

:func:`supervise` runs ``factory()`` as a task and starts it again whenever it
raises, after an exponential backoff (0.1 s doubling to 30 s, reset after a
minute without a crash). The first crash, and any crash whose error differs
from the previous one, is logged with its traceback; repeats of the same error
are logged on one line, so a crash loop cannot flood the log. A task that
returns normally is done and is not restarted; cancelling the supervised task
cancels the running attempt.

Every supervised task is also recorded (weakly) so the manager's ``/healthz``
can fail when one of them is crash-looping, i.e. crashed ``CRASH_LOOP_LIMIT``
times within ``CRASH_LOOP_WINDOW`` seconds: then Kubernetes restarts the pod,
which is the right cure for a state the restarts did not fix.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections import deque
from collections.abc import Awaitable, Callable

log = logging.getLogger("kaiwo_ctrl.runtime.process.supervise")

CRASH_LOOP_LIMIT = 5
CRASH_LOOP_WINDOW = 300.0

_SUPERVISED: "weakref.WeakSet[Supervised]" = weakref.WeakSet()


class Supervised:
    """The record of one supervised task: its name, crashes and last error."""

    def __init__(self, name: str, loop: asyncio.AbstractEventLoop, clock: Callable[[], float]) -> None:
        self.name = name
        self.loop = loop
        self.clock = clock
        self.crashes = 0
        self.last_error = ""
        self._recent: deque[float] = deque(maxlen=CRASH_LOOP_LIMIT)

    def crashed(self, exc: BaseException) -> None:
        self.crashes += 1
        self._recent.append(self.clock())
        error = f"{type(exc).__name__}: {exc}"[:500]
        if error != self.last_error:
            log.error("background task crashed, restarting it", extra={"task": self.name, "crashes": self.crashes},
                      exc_info=(type(exc), exc, exc.__traceback__))
        else:
            log.error("background task crashed again, restarting it",
                      extra={"task": self.name, "crashes": self.crashes, "error": error})
        self.last_error = error

    def crash_looping(self) -> bool:
        return len(self._recent) == CRASH_LOOP_LIMIT and self.clock() - self._recent[0] < CRASH_LOOP_WINDOW


def supervise(
    name: str,
    factory: Callable[[], Awaitable[None]],
    *,
    initial_delay: float = 0.1,
    max_delay: float = 30.0,
    reset_after: float = 60.0,
    clock: Callable[[], float] = time.monotonic,
) -> asyncio.Task[None]:
    """Run ``factory()`` in a task, restarting it with backoff whenever it raises."""
    loop = asyncio.get_running_loop()
    record = Supervised(name, loop, clock)
    _SUPERVISED.add(record)

    async def run() -> None:
        delay = initial_delay
        while True:
            started = clock()
            try:
                await factory()
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - logged and restarted, never silent
                record.crashed(exc)
            if clock() - started > reset_after:
                delay = initial_delay
            await asyncio.sleep(delay)
            delay = min(delay * 2, max_delay)

    task = loop.create_task(run(), name=name)
    task.supervised = record  # type: ignore[attr-defined]
    return task


def crash_looping() -> list[str]:
    """Names of this event loop's supervised tasks that keep crashing."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return []
    return sorted(r.name for r in list(_SUPERVISED) if r.loop is loop and r.crash_looping())
