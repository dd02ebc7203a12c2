"""Backstop for the fail-open DELETE webhook.

The Job webhook releases ``kaiwo.silogen.ai/finalizer`` when an adopted Job
is deleted. A delete that happens while the operator is down is let through
without it (``failurePolicy: Ignore``), and the Job would then hang in
Terminating, holding up its namespace's deletion too. The leader therefore
also watches for Jobs that are being deleted and still carry the finalizer,
and does the same cleanup (checked against the API server, see jobdelete.py):
release the finalizer, delete the tracking KaiwoJob. A failed cleanup is
retried after 2 s doubling to 5 minutes, per Job.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Any

from kaiwo_ctrl.runtime.api.client import ApiError
from kaiwo_ctrl.runtime.manager.manager import Manager
from kaiwo_ctrl.runtime.api.resources import JOBS

from .jobdelete import FINALIZER, cleanup_deleted_job, controlled_by_kaiwojob

log = logging.getLogger("kaiwo_ctrl.webhooks.finalizers")

RETRY_BASE, RETRY_CAP = 2.0, 300.0


def stuck(job: Mapping[str, Any]) -> bool:
    meta = job.get("metadata") or {}
    return bool(meta.get("deletionTimestamp")) and FINALIZER in (meta.get("finalizers") or ()) and not controlled_by_kaiwojob(job)


class FinalizerSweeper:
    def __init__(self, mgr: Manager) -> None:
        self.mgr = mgr
        self.jobs = mgr.cache.informer(JOBS)
        #: (namespace, name, uid) -> (failed attempts, not before (monotonic))
        self.pending: dict[tuple[str, str, str], tuple[int, float]] = {}
        self.wake = asyncio.Event()

    def register(self) -> None:
        self.jobs.add_handler(self)
        self.mgr.add_runnable("adopted-job-finalizers", self.run, leader=True)

    def _offer(self, job: Mapping[str, Any]) -> None:
        if stuck(job):
            meta = job["metadata"]
            self.pending.setdefault((meta.get("namespace") or "", meta["name"], meta.get("uid") or ""), (0, 0.0))
            self.wake.set()

    def on_add(self, obj: Mapping[str, Any], initial: bool) -> None:
        self._offer(obj)

    def on_update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
        self._offer(new)

    def on_delete(self, obj: Mapping[str, Any], tombstone: bool) -> None:
        pass

    async def run(self) -> None:
        while True:
            now = time.monotonic()
            due = [k for k, (_n, at) in self.pending.items() if at <= now]
            for key in due:
                await self._sweep(key)
            waits = [at - time.monotonic() for _n, at in self.pending.values()]
            self.wake.clear()
            try:
                await asyncio.wait_for(self.wake.wait(), max(min(waits), 0.0) if waits else None)
            except asyncio.TimeoutError:
                pass

    async def _sweep(self, key: tuple[str, str, str]) -> None:
        ns, name, uid = key
        failures = self.pending[key][0]
        try:
            await cleanup_deleted_job(self.mgr.client, ns, name, uid)
            del self.pending[key]
        except ApiError as e:
            delay = min(RETRY_BASE * 2**failures, RETRY_CAP)
            log.warning("finalizer release failed; retrying", extra={"namespace": ns, "object": name, "error": str(e), "retryIn": delay})
            self.pending[key] = (failures + 1, time.monotonic() + delay)
