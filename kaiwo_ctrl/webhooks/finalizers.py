"""Backstop for the fail-open DELETE webhook.

The Job webhook releases ``kaiwo.silogen.ai/finalizer`` when an adopted Job
is deleted. A delete that happens while the operator is down is let through
without it (``failurePolicy: Ignore``), and the Job would then hang in
Terminating, holding up its namespace's deletion too. The leader therefore
also watches for Jobs that are being deleted and still carry the finalizer,
and does the same cleanup: release the finalizer, delete the tracking
KaiwoJob.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from kaiwo_ctrl.kinds import KAIWOJOBS
from kaiwo_ctrl.runtime.client import ApiError
from kaiwo_ctrl.runtime.manager import Manager
from kaiwo_ctrl.runtime.resources import JOBS

from .jobs import FINALIZER, controlled_by_kaiwojob, release_finalizer

log = logging.getLogger("kaiwo_ctrl.webhooks.finalizers")


def stuck(job: Mapping[str, Any]) -> bool:
    meta = job.get("metadata") or {}
    return bool(meta.get("deletionTimestamp")) and FINALIZER in (meta.get("finalizers") or ()) and not controlled_by_kaiwojob(job)


class FinalizerSweeper:
    def __init__(self, mgr: Manager) -> None:
        self.mgr = mgr
        self.jobs = mgr.cache.informer(JOBS)
        self.pending: set[tuple[str, str]] = set()
        self.wake = asyncio.Event()

    def register(self) -> None:
        self.jobs.add_handler(self)
        self.mgr.add_leader_runnable("adopted-job-finalizers", self.run)

    def _offer(self, job: Mapping[str, Any]) -> None:
        if stuck(job):
            meta = job["metadata"]
            self.pending.add((meta.get("namespace") or "", meta["name"]))
            self.wake.set()

    def on_add(self, obj: Mapping[str, Any], initial: bool) -> None:
        self._offer(obj)

    def on_update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
        self._offer(new)

    def on_delete(self, obj: Mapping[str, Any], tombstone: bool) -> None:
        pass

    async def run(self) -> None:
        while True:
            await self.wake.wait()
            self.wake.clear()
            while self.pending:
                ns, name = self.pending.pop()
                try:
                    await release_finalizer(self.mgr.client, ns, name)
                    await self.mgr.client.delete(KAIWOJOBS, name, ns)
                    log.info("released the finalizer of a Job deleted while the webhook was away", extra={"namespace": ns, "object": name})
                except ApiError as e:
                    log.warning("finalizer release failed; retrying", extra={"namespace": ns, "object": name, "error": str(e)})
                    self.pending.add((ns, name))
                    await asyncio.sleep(2.0)
