"""The cyclic garbage collector stays out of the start-up cache fill.

Informer caches hold decoded JSON: dicts, lists and strings, with no
reference cycles, so the collector can never free any of them. It still
scans them: while tens of thousands of objects arrive, every young collection
walks the newest ones and every full collection walks all of them, which
cost about as much CPU as decoding them (about half of a 20k-object cache
sync). So while the informers fill their caches at start-up the collector is
paused; when the last one is filled, everything alive (the imported modules
and the caches) is moved to the permanent generation (``gc.freeze``), so
later full collections skip it too, and the collector resumes. Those objects
are still freed by reference counting when a relist or a delete drops them.

The command that runs the operator holds a pause of its own from before its
imports until the manager's caches are synced (module imports make many
long-lived objects too). Only the first fill of the process is paused: a relist later, while
controllers run, leaves the collector alone. A list that fails ends its
pause; the manager's cache-sync timeout bounds a list that hangs.
"""

from __future__ import annotations

import asyncio
import gc


class _State:
    holders = 0
    #: the collector was enabled when the first pause began
    resume = False
    #: the start-up fill is over: no more pauses
    done = False


class CollectorPause:
    """Held by an informer during its start-up list; release is idempotent."""

    def __init__(self) -> None:
        self._waiter: asyncio.Task | None = None
        self._held = not _State.done
        if not self._held:
            return
        if _State.holders == 0:
            _State.resume = gc.isenabled()
            gc.disable()
        _State.holders += 1

    def release(self) -> None:
        if not self._held:
            return
        self._held = False
        _State.holders -= 1
        if _State.holders == 0:
            _State.done = True
            if _State.resume:
                gc.freeze()
                gc.enable()

    def release_when_set(self, event: asyncio.Event) -> None:
        """Release once ``event`` is set (e.g. the manager's caches are synced)."""

        async def wait() -> None:
            await event.wait()
            self.release()

        self._waiter = asyncio.create_task(wait(), name="collector-pause")
