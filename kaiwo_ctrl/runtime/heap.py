"""Garbage-collector settings for a process whose heap is mostly caches.

An operator's heap is dominated by cached API objects: many small dicts that
live as long as the objects they mirror and never form reference cycles. The
cyclic collector's full (generation 2) passes walk all of them anyway; with
1,000 KaiwoJobs arriving they took about a third of a second per 1,000
reconciles. Two settings avoid that:

* :func:`tune` raises the collection thresholds, so young collections and
  the promotions that lead to full passes happen less often;
* :func:`settle` collects once and then freezes what is left (``gc.freeze``):
  the survivors (the synced caches, the process's set-up) move to a
  permanent generation the collector no longer walks. Objects made later are
  collected as usual; a frozen object that later becomes part of a cycle is
  freed only by reference counting, which is all the cache's acyclic dicts
  need. The manager settles after its caches sync and then every
  ``interval`` seconds, so the caches' growth is frozen too;
* :class:`CollectorPause` keeps the collector off during the start-up: while
  20k objects arrive, young collections walk the newest ones and full ones
  all of them, which cost as much CPU as decoding them (~0.5 s of a 1.2 s
  sync). Informers hold a pause while they fill at start-up, and the command
  that runs the manager holds one from before its imports
  (:func:`pause_startup`) until the caches are synced (:func:`end_startup`).
  When the last pause ends, everything alive is frozen (little garbage is
  left by then: a few hundred objects) and the collector resumes; the
  manager's first :func:`settle` then walks only what came after. Only the
  first fill of the process is paused: a relist later runs with the
  collector on. A list that fails ends its pause; the manager's cache-sync
  timeout bounds one that hangs.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time

log = logging.getLogger("kaiwo_ctrl.runtime.heap")

#: (young, middle, old) thresholds; CPython's defaults are (700, 10, 10)
THRESHOLDS = (20_000, 20, 20)


def tune() -> None:
    gc.set_threshold(*THRESHOLDS)


def settle() -> float:
    """Collect, then freeze the survivors; returns the CPU seconds it took."""
    t0 = time.process_time()
    gc.collect()
    gc.freeze()
    took = time.process_time() - t0
    log.debug("heap settled", extra={"frozen": gc.get_freeze_count(), "cpu_seconds": round(took, 3)})
    return took


async def settle_every(interval: float) -> None:
    """A runnable: :func:`settle` every ``interval`` seconds."""
    while True:
        await asyncio.sleep(interval)
        settle()


class _Pauses:
    holders = 0
    #: the collector was enabled when the first pause began
    resume = False
    #: the start-up is over: no more pauses
    done = False


class CollectorPause:
    """One holder of the start-up pause; ``release`` is idempotent."""

    def __init__(self) -> None:
        self._held = not _Pauses.done
        if not self._held:
            return
        if _Pauses.holders == 0:
            _Pauses.resume = gc.isenabled()
            gc.disable()
        _Pauses.holders += 1

    def release(self) -> None:
        if not self._held:
            return
        self._held = False
        _Pauses.holders -= 1
        if _Pauses.holders == 0:
            _Pauses.done = True
            if _Pauses.resume:
                gc.freeze()
                gc.enable()


_startup: CollectorPause | None = None


def pause_startup() -> None:
    """Pause the collector until :func:`end_startup` (call before the imports)."""
    global _startup
    if _startup is None:
        _startup = CollectorPause()


def end_startup() -> None:
    """End the pause :func:`pause_startup` began (the manager: once its caches sync)."""
    global _startup
    if _startup is not None:
        _startup.release()
        _startup = None
