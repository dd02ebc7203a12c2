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
  ``interval`` seconds, so the caches' growth is frozen too.

The settle at sync freezes without collecting first: that full pass walks
every cached object (about 0.1 s with 10k + 10k cached objects) and, at that
moment, found a few hundred objects of garbage (the imports' leftovers), so
it only delayed the first reconciles and the first ``/readyz`` answer.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time

log = logging.getLogger("kaiwo_ctrl.runtime.process.heap")

#: (young, middle, old) thresholds; CPython's defaults are (700, 10, 10)
THRESHOLDS = (20_000, 20, 20)


def tune() -> None:
    gc.set_threshold(*THRESHOLDS)


def settle(collect: bool = True) -> float:
    """Collect (unless ``collect`` is false), then freeze the survivors;
    returns the CPU seconds it took."""
    t0 = time.process_time()
    if collect:
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
