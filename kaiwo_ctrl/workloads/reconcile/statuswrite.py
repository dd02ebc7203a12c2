"""The one status writer of a workload: a merge patch of the status
subresource guarded by the object's resourceVersion, registered with the
shared read-your-writes expectations (so the watch event of our own write is
not reconciled again), followed by the events the change calls for.

Also the two statuses the reconciler writes itself rather than through
:func:`~kaiwo_ctrl.workloads.observe.status.observe`: a failed build/observe stage and a refused child.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from kaiwo_ctrl.runtime.api.client import ApiError
from kaiwo_ctrl.runtime.objects.fielderrors import FieldError
from kaiwo_ctrl.runtime.observe.conditions import find_condition, set_condition

from ..base.childstatus import ERROR
from ..kinds import OWN_RESOURCES, WorkloadKind
from ..observe.status import SCHEDULABLE, SPEC_CHANGE_NOT_APPLIED, SPEC_VALID, status_events
from .caches import SharedCaches

log = logging.getLogger("kaiwo_ctrl.workloads.reconcile.statuswrite")

CHILD_REJECTED = "ChildRejected"


class Gone(Exception):
    """The workload disappeared under a write (stop quietly)."""


class StatusWriter:
    def __init__(self, shared: SharedCaches, kind: WorkloadKind, recorder: Any) -> None:
        self.shared, self.kind, self.recorder = shared, kind, recorder
        self.client = shared.mgr.client

    async def write(self, raw: dict, new: dict, *, events: bool = True) -> dict:
        """Write ``new`` as the status of ``raw``; returns the written object.
        Raises :class:`Gone` when the workload no longer exists."""
        meta = raw["metadata"]
        name, ns = meta["name"], meta.get("namespace")
        old = raw.get("status") or {}
        try:
            result = await self.shared.expectations.write_status(
                (self.kind.kind, ns or "", name),
                raw,
                new,
                lambda patch: self.client.patch_status(OWN_RESOURCES[self.kind.kind], name, patch, ns),
                own=True,
            )
        except ApiError as e:
            if e.not_found:
                raise Gone() from e
            raise
        if events:
            for type_, reason, message in status_events(old, new):
                self.recorder.event(result, type_, reason, message)
            for type_ in (SPEC_VALID, SCHEDULABLE, SPEC_CHANGE_NOT_APPLIED):
                self._problem_event(result, old, new, type_)
        return result

    def _problem_event(self, obj: dict, old: Mapping, new: Mapping, type_: str) -> None:
        """A Warning event when a problem condition appears or changes its message."""
        now_c = find_condition(new.get("conditions"), type_)
        if now_c is None or now_c.get("status") != ("True" if type_ == SPEC_CHANGE_NOT_APPLIED else "False"):
            return
        was = find_condition(old.get("conditions"), type_)
        fields = ("status", "reason", "message")
        if was is not None and all(was.get(f) == now_c.get(f) for f in fields):
            return
        self.recorder.warning(obj, now_c.get("reason") or type_, now_c.get("message") or "")


def failed_stage_status(stored: Mapping[str, Any], stage: str, exc: Exception, generation: int, now: datetime) -> dict:
    """ERROR with ``SpecValid=False`` and reason ``<stage>Failed`` naming the
    field (a FieldError) or the exception type; the message is bounded."""
    if isinstance(exc, FieldError):
        message = str(exc)
    else:
        message = f"{stage.lower()} failed: {type(exc).__name__}: {exc}"
    new = copy.deepcopy(dict(stored))
    set_condition(new.setdefault("conditions", []), SPEC_VALID, "False", f"{stage}Failed", message[:1000], generation, now)
    new["status"] = ERROR
    new["observedGeneration"] = generation
    return new


def refused_status(stored: dict, observed: dict, message: str, generation: int, now: datetime) -> dict:
    """ERROR with SpecValid=False/ChildRejected: the API server refused a child
    built from this spec (its message names the field). Unchanged when the
    stored status already says so."""
    cond = find_condition(stored.get("conditions"), SPEC_VALID)
    if (
        stored.get("status") == ERROR
        and cond is not None
        and (cond.get("status"), cond.get("reason"), cond.get("message")) == ("False", CHILD_REJECTED, message)
    ):
        return stored
    new = copy.deepcopy(observed)
    set_condition(new.setdefault("conditions", []), SPEC_VALID, "False", CHILD_REJECTED, message, generation, now)
    new["status"] = ERROR
    new["observedGeneration"] = generation
    return new
