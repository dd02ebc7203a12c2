"""The Kaiwo status machine as a pure function: spec validity, schedulability,
storage and download progress, the underlying object's state and Kueue
admission (in that order of precedence), duration-based preemption and early
termination.

``observe`` maps the Kaiwo object, the world, its observed children and the
Kueue Workload(s) onto the complete desired ``status``. Re-observing an
unchanged world returns the stored status unchanged, so the reconciler can
compare and skip the write.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from pydantic import ValidationError

from kaiwo_ctrl.runtime.observe.conditions import find_condition, format_time, remove_condition, set_condition

from ..base.childstatus import (
    ACTIVE,
    COMPLETE,
    DOWNLOADING,
    ERROR,
    FAILED,
    NEW,
    PENDING,
    RUNNING,
    STARTING,
    TERMINAL,
    TERMINATED,
    TERMINATING,
    UP,
    is_admitted,
    pvc_phase,
)
from ..base.condtypes import (  # the condition types live in one place; re-exported here
    ADMITTED,
    DOWNLOAD_JOB_SUCCEEDED,
    PREEMPTABLE,
    PRIORITY_CLASS_NOT_FOUND,
    PVC_READY,
    SCHEDULABLE,
    SPEC_CHANGE_NOT_APPLIED,
    SPEC_VALID,
    WORKLOAD_TERMINATED_EARLY,
)
from ..base.kaiwoobject import KaiwoObject
from ..base.observed import ObservedChildren
from ..base.timing import parse_duration, parse_time
from ..base.world import World, as_dict
from ..builders.plan import WorkloadPlan
from ..builders.storage import StoragePlan
from ..builders.validation import SpecError, spec_error_from_validation
from ..kinds import WORKLOAD_KINDS, WorkloadKind
from ..kinds.batchjob.status import batch_job_status
from ..kinds.storage import DATA_PVC, DOWNLOAD_CONFIGMAP, DOWNLOAD_JOB, HF_PVC
from .preemption import (  # re-exported: the reconciler's helpers
    STATUS_EVENTS,
    download_succeeded,
    has_gpu_demand,
    requeue_after,
    status_events,
    sweep_expired,
)


@dataclass
class _Observation:
    status: str
    conditions: list[tuple[str, str, str, str]]
    #: condition types to drop from the stored list
    removed: tuple[str, ...] = ()


def _cond(type_: str, status: bool | str, reason: str, message: str = "") -> tuple[str, str, str, str]:
    value = status if isinstance(status, str) else ("True" if status else "False")
    return (type_, value, reason, message)


# --------------------------------------------------------------------------- observation


def _storage(plan: StoragePlan, children: ObservedChildren, prev_conditions: Sequence[dict]) -> tuple[str, list]:
    """Storage: every expected PVC/ConfigMap/Job must exist; PvcReady follows
    the PVC phases (Lost fails the workload) and DownloadJobSucceeded the
    download Job. Returns (storage status, conditions)."""
    expected: list[Any] = []
    pvcs: list[dict | None] = []
    if plan.data_requested:
        pvcs.append(children.get(DATA_PVC.slot))
    if plan.hf_requested:
        pvcs.append(children.get(HF_PVC.slot))
    expected += pvcs
    if plan.downloads_configured:
        expected += [children.get(DOWNLOAD_CONFIGMAP.slot), children.get(DOWNLOAD_JOB.slot)]
    if any(x is None for x in expected):
        return NEW, []
    conds = []
    lost = False
    if pvcs:
        phases = [pvc_phase(p) for p in pvcs]
        lost = "Lost" in phases
        not_bound = next((ph for ph in phases if ph != "Bound"), "Bound")
        if not_bound == "Bound":
            conds.append(_cond(PVC_READY, True, "Bound"))
        elif not_bound is None:
            conds.append(_cond(PVC_READY, "Unknown", "Unknown"))
        else:
            conds.append(_cond(PVC_READY, False, not_bound))
    if not plan.downloads_configured:
        return (FAILED if lost else COMPLETE), conds
    prev = find_condition(prev_conditions, DOWNLOAD_JOB_SUCCEEDED)
    previous = RUNNING if prev and prev.get("message") == "Download job in progress" else NEW
    job = batch_job_status(children.get(DOWNLOAD_JOB.slot), previous)
    if job == PENDING:
        conds.append(_cond(DOWNLOAD_JOB_SUCCEEDED, False, "JobPending", "Download job pending"))
    elif job == STARTING:
        conds.append(_cond(DOWNLOAD_JOB_SUCCEEDED, False, "JobInProgress", "Download job starting"))
    elif job == RUNNING:
        conds.append(_cond(DOWNLOAD_JOB_SUCCEEDED, False, "JobInProgress", "Download job in progress"))
    elif job == FAILED:
        conds.append(_cond(DOWNLOAD_JOB_SUCCEEDED, False, "JobFailed", "Download job failed"))
    elif job == COMPLETE:
        conds.append(_cond(DOWNLOAD_JOB_SUCCEEDED, True, "JobCompleted", "Download job succeeded"))
    # A lost PVC fails the workload whether or not downloads are configured.
    return (FAILED if lost else job), conds


def _main_status(wk: WorkloadKind, o: KaiwoObject, children: ObservedChildren, previous: str) -> str:
    """The underlying object's state, by the status mapper of its ``ChildSpec``."""
    mapper = wk.main_child(o.is_ray).status
    return mapper(children, previous) if mapper is not None else NEW


def _child_conditions(wk: WorkloadKind, o: KaiwoObject, children: ObservedChildren) -> list:
    """The conditions children add through their ``ChildSpec.condition`` mapper."""
    out = []
    for spec in wk.applicable(o.is_ray):
        if spec.condition is not None:
            cond = spec.condition(children.get(spec.slot))
            if cond is not None:
                out.append(cond)
    return out


def _priority(o: KaiwoObject, world: World) -> tuple[list, tuple[str, ...]]:
    name = o.priority_class
    if not name:
        return [], (PRIORITY_CLASS_NOT_FOUND,)
    if name in world.workload_priority_classes or name in world.priority_classes:
        return [_cond(PRIORITY_CLASS_NOT_FOUND, False, "PriorityClassFound", f"Priority class '{name}' exists")], ()
    return [
        _cond(
            PRIORITY_CLASS_NOT_FOUND,
            True,
            PRIORITY_CLASS_NOT_FOUND,
            f"Neither a WorkloadPriorityClass nor a PriorityClass named '{name}' exists",
        )
    ], ()


def _spec_invalid(error: SpecError) -> _Observation:
    return _Observation(ERROR, [_cond(SPEC_VALID, False, "InvalidSpec", str(error))])


def _observe_active(
    wk: WorkloadKind, p: WorkloadPlan, children: ObservedChildren, workload: Any, now: datetime
) -> _Observation:
    o, world, queue = p.o, p.world, p.queue
    prev = o.status
    prev_status = prev.get("status") or NEW
    prev_conditions = prev.get("conditions") or []
    if p.errors:
        return _spec_invalid(p.errors[0])
    removed: list[str] = [SPEC_VALID]

    # 1. Schedulable
    failure = p.schedulable()
    if not failure.status:
        return _Observation(ERROR, [_cond(SCHEDULABLE, False, failure.reason, failure.message)], tuple(removed))
    conds = [_cond(SCHEDULABLE, True, failure.reason, failure.message)]
    pconds, premoved = _priority(o, world)
    conds += pconds
    removed += premoved
    if children.unapplied_fields:
        conds.append(_spec_change_not_applied(children.unapplied_fields))
    else:
        removed.append(SPEC_CHANGE_NOT_APPLIED)
    conds += _child_conditions(wk, o, children)

    # 2. Storage
    plan = p.storage
    if plan.enabled:
        st, sconds = _storage(plan, children, prev_conditions)
        conds += sconds
        if st == FAILED:
            return _Observation(FAILED, conds, tuple(removed))
        if plan.downloads_configured and st != COMPLETE:
            return _Observation(DOWNLOADING, conds, tuple(removed))

    # 3. Workload
    obj_status = _main_status(wk, o, children, prev_status)
    admitted = is_admitted(workload)
    if obj_status in TERMINAL:
        # A finished underlying object is final whatever Kueue's Workload says
        # now (Kueue may release or delete it once the job finished).
        if admitted:
            conds.append(_cond(ADMITTED, True, "Admitted", "Workload is admitted"))
        return _Observation(obj_status, conds, tuple(removed))
    if not admitted:
        conds.append(_cond(ADMITTED, False, "Pending", f"Workload is pending admission into '{queue}'"))
        return _Observation(PENDING, conds, tuple(removed))
    conds.append(_cond(ADMITTED, True, "Admitted", "Workload is admitted"))
    dconds, terminating = _duration(o, children, now)
    conds += dconds
    return _Observation(TERMINATING if terminating else (obj_status or STARTING), conds, tuple(removed))


def _spec_change_not_applied(fields: Sequence[str]) -> tuple[str, str, str, str]:
    return _cond(
        SPEC_CHANGE_NOT_APPLIED,
        True,
        "ImmutableFieldChanged",
        "These fields changed in the spec but cannot be changed on the existing object: " + ", ".join(fields),
    )


def _duration(o: KaiwoObject, children: ObservedChildren, now: datetime) -> tuple[list, bool]:
    """Past ``spec.duration`` the workload is Preemptable, and under GPU demand
    it terminates itself. READY counts as up, like RUNNING (READY is new in this
    implementation and a ready service must not escape its duration).
    Returns (conditions, whether to terminate)."""
    prev = o.status
    start = parse_time(prev.get("startTime"))
    if not o.spec.get("duration") or (prev.get("status") or NEW) not in UP or start is None:
        return [], False
    if parse_duration(o.spec["duration"]) - (now - start) > timedelta(0):
        return [_cond(PREEMPTABLE, False, "DurationNotExceeded", "Workload is running and the duration has not been exceeded")], False
    conds = [_cond(PREEMPTABLE, True, "DurationExceeded", "Workload duration has exceeded")]
    if not children.gpu_demand:
        return conds, False
    conds.append(
        _cond(
            WORKLOAD_TERMINATED_EARLY,
            False,
            "DurationExceededWithActiveGpuDemand",
            "Terminated since duration was exceeded and there is active GPU demand",
        )
    )
    return conds, True


def _terminate(prev_conditions: Sequence[dict]) -> _Observation:
    """Early termination, first step: TERMINATED with WorkloadTerminatedEarly
    (keeping the reason given when it was flagged)."""
    existing = find_condition(prev_conditions, WORKLOAD_TERMINATED_EARLY)
    if existing:
        cond = _cond(WORKLOAD_TERMINATED_EARLY, True, existing.get("reason") or "EarlyTermination", existing.get("message") or "")
    else:
        cond = _cond(
            WORKLOAD_TERMINATED_EARLY,
            True,
            "EarlyTermination",
            "Workload terminated early (check events and other conditions for likely causes)",
        )
    return _Observation(TERMINATED, [cond])


def _comparable(status: Mapping) -> tuple:
    conds = tuple(
        (c.get("type"), c.get("status"), c.get("reason"), c.get("message"), c.get("observedGeneration"))
        for c in status.get("conditions") or []
    )
    return (status.get("status") or NEW, conds, status.get("observedGeneration"))


def observe(
    kind: str | WorkloadKind,
    obj: Any,
    world: World,
    children: ObservedChildren,
    workload: Mapping | Sequence[Mapping] | None,
    now: datetime,
    plan: WorkloadPlan | None = None,
) -> dict[str, Any]:
    """The complete desired ``status`` of a KaiwoJob/KaiwoService.

    ``workload`` is the Kueue Workload of the underlying object (a list for a
    Deployment: one Workload per pod), ``None`` when there is none yet.
    ``plan``: the reconcile's :class:`WorkloadPlan` of ``obj`` (its spec is
    used; the status comes from ``obj``), built here when not given.
    ``now`` must be timezone-aware. Raises
    :class:`~kaiwo_ctrl.workloads.base.childstatus.UnknownChildStatus` for a child
    status this operator does not understand (reconcile error, retry).
    """
    raw = as_dict(obj)
    kind_name = kind.kind if isinstance(kind, WorkloadKind) else kind
    if kind_name and not raw.get("kind"):
        raw = {**raw, "kind": kind_name}
    prev: dict[str, Any] = copy.deepcopy(raw.get("status") or {})
    prev_status = prev.get("status") or NEW
    generation = (raw.get("metadata") or {}).get("generation") or 0
    if prev_status in TERMINAL:
        return prev
    try:
        p = plan if plan is not None else WorkloadPlan.of(raw, world)
    except ValidationError as exc:
        observation = _spec_invalid(spec_error_from_validation(exc))
    else:
        if prev_status == TERMINATING:
            observation = _terminate(prev.get("conditions") or [])
        else:
            wk = kind if isinstance(kind, WorkloadKind) else WORKLOAD_KINDS[p.o.kind]
            observation = _observe_active(wk, p, children, workload, now)

    conditions = copy.deepcopy(prev.get("conditions") or [])
    for type_ in observation.removed:
        remove_condition(conditions, type_)
    for type_, value, reason, message in observation.conditions:
        set_condition(conditions, type_, value, reason, message, generation, now)

    new: dict[str, Any] = {"status": observation.status}
    if conditions:
        new["conditions"] = conditions
    new["observedGeneration"] = generation
    for key in ("startTime", "completionTime", "duration"):
        if prev.get(key) is not None:
            new[key] = prev[key]
    if _comparable(new) == _comparable(prev):
        return prev  # nothing changed: no write, no churn of duration

    stamp = format_time(now)
    if observation.status in UP and prev_status not in UP:
        new["startTime"] = stamp
    if raw.get("kind") == "KaiwoJob" and observation.status in (COMPLETE, FAILED) and prev_status != observation.status:
        new["completionTime"] = stamp
    start = parse_time(new.get("startTime"))
    if start is not None and observation.status in (UP | {COMPLETE, FAILED, TERMINATING, TERMINATED}):
        new["duration"] = max(0, int((now - start).total_seconds()))
    return new


__all__ = [
    "ACTIVE",
    "STATUS_EVENTS",
    "ObservedChildren",
    "download_succeeded",
    "has_gpu_demand",
    "observe",
    "requeue_after",
    "status_events",
    "sweep_expired",
]
