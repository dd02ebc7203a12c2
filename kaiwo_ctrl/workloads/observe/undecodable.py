"""ERROR status for a workload the operator cannot hold.

A KaiwoJob or KaiwoService whose unstructured fields (``spec.job``,
``spec.rayJob``, ...) nest too deeply to decode or encode again is left out
of the informer's cache (runtime/cache/informerskip.py): it is never reconciled,
and every other workload is. Its owner still learns why: the leader writes
``status.status: ERROR`` with ``SpecValid=False/InvalidSpec`` naming the
field, by a merge patch of the status subresource alone (the answer, the
whole object, is not decoded; runtime/manager/skipreport.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from kaiwo_ctrl.runtime.api.deepjson import ENCODE_LIMIT
from kaiwo_ctrl.runtime.manager.manager import Manager
from kaiwo_ctrl.runtime.manager.skipreport import SkippedObjectReporter
from kaiwo_ctrl.runtime.observe.conditions import find_condition, set_condition

from ..base.childstatus import ERROR
from ..base.condtypes import SPEC_VALID
from ..kinds import OWN_RESOURCES

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


def reporter(mgr: Manager, kind: str) -> SkippedObjectReporter:
    """The informer handler that writes :func:`error_status` on a skipped workload."""
    return SkippedObjectReporter(
        mgr, kind, error_status, lambda ns, name, patch: mgr.client.patch_status(OWN_RESOURCES[kind], name, patch, ns, decode=False)
    )
