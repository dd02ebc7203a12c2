"""ERROR status for a workload the operator cannot hold.

A KaiwoJob or KaiwoService whose unstructured fields (``spec.job``,
``spec.rayJob``, ...) nest too deeply to decode or encode again is left out
of the informer's cache (runtime/informerskip.py): it is never reconciled,
and every other workload is. Its owner still learns why: the leader writes
``status.status: ERROR`` with ``SpecValid=False/InvalidSpec`` naming the
field, by a merge patch of the status subresource alone (the answer, the
whole object, is not decoded). The write is made once per object version.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from kaiwo_ctrl.runtime.client import ApiError, Client
from kaiwo_ctrl.runtime.conditions import find_condition, set_condition
from kaiwo_ctrl.runtime.deepjson import ENCODE_LIMIT
from kaiwo_ctrl.runtime.manager import Manager

from .childstatus import ERROR
from .condtypes import SPEC_VALID
from .kinds import OWN_RESOURCES

log = logging.getLogger("kaiwo_ctrl.workloads.undecodable")

REASON = "InvalidSpec"


def too_deep_message(path: str) -> str:
    return f"{path}: nested deeper than {ENCODE_LIMIT} levels; the operator cannot read this object"


def error_status(stub: Mapping[str, Any], path: str) -> dict[str, Any] | None:
    """The status to write, or ``None`` when the stub already carries it."""
    status = dict(stub.get("status") or {})
    conditions = [dict(c) for c in status.get("conditions") or [] if isinstance(c, Mapping)]
    gen = int((stub.get("metadata") or {}).get("generation") or 0)
    message = too_deep_message(path)
    current = find_condition(conditions, SPEC_VALID)
    if status.get("status") == ERROR and current and current.get("message") == message and current.get("observedGeneration") == gen:
        return None
    set_condition(conditions, SPEC_VALID, "False", REASON, message, gen, datetime.now(timezone.utc))
    return {"status": ERROR, "conditions": conditions}


class UndecodableReporter:
    """Informer handler (``on_undecodable``) plus a leader runnable that writes."""

    def __init__(self, mgr: Manager, kind: str) -> None:
        self.client: Client = mgr.client
        self.kind = kind
        self.pending: dict[tuple[str, str], tuple[dict, str]] = {}
        self.wake = asyncio.Event()
        mgr.add_leader_runnable(f"undecodable-{kind}", self.run)

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
                await self._report(ns, name, stub, path)

    async def _report(self, ns: str, name: str, stub: dict, path: str) -> None:
        status = error_status(stub, path)
        if status is None:
            return
        rv = (stub.get("metadata") or {}).get("resourceVersion")
        patch = {"metadata": {"resourceVersion": rv}, "status": status}
        try:
            await self.client.patch_status(OWN_RESOURCES[self.kind], name, patch, ns, decode=False)
            log.info("too deeply nested workload reported", extra={"namespace": ns, "object": name, "field": path})
        except ApiError as e:  # changed since (its next version comes again) or gone
            log.info("status of a too deeply nested workload not written", extra={"namespace": ns, "object": name, "error": str(e)})
