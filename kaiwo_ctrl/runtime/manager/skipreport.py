"""Reporting objects an informer left out (runtime/cache/informerskip.py) on the objects themselves.

An object nested too deeply to decode or encode is never reconciled, but its
owner should still learn why. :class:`SkippedObjectReporter` is an informer
handler (``on_undecodable``) plus a leader runnable: for each skipped object
it asks ``status_for(stub, path)`` for the status to write (``None``: the
stub carries it already) and hands ``send(namespace, name, patch)`` the patch
of the status subresource, guarded by the stub's resourceVersion
(:func:`~kaiwo_ctrl.runtime.control.expectations.status_patch`; no cache holds
the object, so there is nothing to read back). The write is retried only when
a new version of the object arrives.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from kaiwo_ctrl.runtime.api.client import ApiError
from kaiwo_ctrl.runtime.control.expectations import status_patch
from kaiwo_ctrl.runtime.manager.manager import Manager

log = logging.getLogger("kaiwo_ctrl.runtime.manager.skipreport")

StatusFor = Callable[[Mapping[str, Any], str], "dict[str, Any] | None"]
Send = Callable[[str, str, dict[str, Any]], Awaitable[Any]]


class SkippedObjectReporter:
    def __init__(self, mgr: Manager, name: str, status_for: StatusFor, send: Send) -> None:
        self.status_for, self.send = status_for, send
        self.pending: dict[tuple[str, str], tuple[dict, str]] = {}
        self.wake = asyncio.Event()
        mgr.add_runnable(f"skipped-{name}", self.run, leader=True)

    def on_undecodable(self, stub: dict, path: str) -> None:
        meta = stub.get("metadata") or {}
        self.pending[(meta.get("namespace") or "", meta["name"])] = (stub, path)
        self.wake.set()

    def on_add(self, obj: Mapping[str, Any], initial: bool) -> None:
        pass

    def on_update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
        pass

    def on_delete(self, obj: Mapping[str, Any], tombstone: bool) -> None:
        pass

    async def run(self) -> None:
        while True:
            await self.wake.wait()
            self.wake.clear()
            while self.pending:
                (ns, name), (stub, path) = self.pending.popitem()
                status = self.status_for(stub, path)
                if status is None:
                    continue
                try:
                    await self.send(ns, name, status_patch(str((stub.get("metadata") or {}).get("resourceVersion") or ""), status))
                    log.info("status of a skipped object written", extra={"namespace": ns, "object": name, "field": path})
                except ApiError as e:  # changed since (its next version comes again) or gone
                    log.info("status of a skipped object not written", extra={"namespace": ns, "object": name, "error": str(e)})
