"""The Kaiwo status values, what every child kind's status mapper
(``kinds/<kind>/status.py``) uses to read conditions, the PVC phase and
Kueue admission. A child that does not exist yet maps to ``""``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

NEW = ""
DOWNLOADING = "DOWNLOADING"
PENDING = "PENDING"
STARTING = "STARTING"
RUNNING = "RUNNING"
READY = "READY"
COMPLETE = "COMPLETE"
ERROR = "ERROR"
FAILED = "FAILED"
TERMINATING = "TERMINATING"
TERMINATED = "TERMINATED"

TERMINAL = frozenset({COMPLETE, FAILED, TERMINATED})
ACTIVE = frozenset({NEW, DOWNLOADING, PENDING, STARTING, RUNNING})
#: Statuses in which the workload's pods are up (startTime, duration, preemption).
UP = frozenset({RUNNING, READY})


class UnknownChildStatus(ValueError):
    """A child reports a status this operator does not know (reconcile error, retry)."""


def conditions_of(obj: Mapping | None) -> list[dict]:
    return list(((obj or {}).get("status") or {}).get("conditions") or [])


def condition_of(obj: Mapping | None, type_: str) -> dict | None:
    return next((c for c in conditions_of(obj) if c.get("type") == type_), None)


def pvc_phase(pvc: Mapping | None) -> str | None:
    return ((pvc or {}).get("status") or {}).get("phase")


def is_admitted(workloads: Mapping | Sequence[Mapping] | None) -> bool:
    """Admitted: at least one Kueue Workload and every one has ``Admitted=True``.

    The reference counted any status but ``False`` (so ``Unknown``) as
    admitted; Kueue only ever means admission with ``True``, so that is
    required here.
    """
    items = _as_list(workloads)
    if not items:
        return False
    for wl in items:
        cond = condition_of(wl, "Admitted")
        if cond is None or cond.get("status") != "True":
            return False
    return True


def _as_list(workloads: Any) -> list[Mapping]:
    if workloads is None:
        return []
    if isinstance(workloads, Mapping):
        return [workloads]
    return [w for w in workloads if w is not None]
