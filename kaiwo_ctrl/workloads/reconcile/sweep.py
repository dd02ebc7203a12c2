"""The duration sweep as its own leader runnable.

While some workload is PENDING, every workload that is up with
``Preemptable=True`` (its duration ran out) is terminated. The sweep only
marks those workloads and enqueues them; each one's own reconcile writes its
TERMINATING status, so a workload's status has one writer.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

from kaiwo_ctrl.runtime.control.handler import Request
from kaiwo_ctrl.runtime.manager.manager import Manager
from kaiwo_ctrl.runtime.objects.objpath import meta as _meta

from .caches import IDX_UP_PREEMPTABLE, SharedCaches

log = logging.getLogger("kaiwo_ctrl.workloads.reconcile.sweep")

RUNNABLE = "workload-duration-sweep"


class Sweeper:
    def __init__(self, mgr: Manager, shared: SharedCaches, controller_names: Mapping[str, str]) -> None:
        self.mgr, self.shared = mgr, shared
        #: workload kind -> name of its controller
        self.controller_names = dict(controller_names)
        self._wake = asyncio.Event()
        self._marked: set[tuple[str, str, str]] = set()

    def trigger(self) -> None:
        """A workload is PENDING: sweep soon (coalesced)."""
        self._wake.set()

    def take(self, kind: str, namespace: str, name: str) -> bool:
        """Whether the sweep marked this workload (the mark is consumed)."""
        key = (kind, namespace, name)
        if key in self._marked:
            self._marked.discard(key)
            return True
        return False

    def sweep_once(self) -> int:
        """Mark and enqueue every candidate; how many."""
        queues = {c.name: c.queue for c in self.mgr.controllers}
        n = 0
        for kind, inf in self.shared.own.items():
            queue = queues.get(self.controller_names.get(kind, ""))
            if queue is None:
                continue
            for obj in inf.by_index(IDX_UP_PREEMPTABLE, "y"):
                m = _meta(obj)
                self._marked.add((kind, m.get("namespace") or "", m["name"]))
                queue.add(Request(m.get("namespace") or "", m["name"]))
                n += 1
        return n

    async def run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            n = self.sweep_once()
            if n:
                log.info("duration sweep enqueued workloads", extra={"count": n})
