"""What the reconciler and the duration sweep read from a stored status:
the download gate, the duration requeue, GPU demand, the expired-workload
sweep and the events a status change calls for."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from pydantic import ValidationError

from kaiwo_ctrl.runtime.observe.conditions import find_condition, set_condition

from ..base.childstatus import COMPLETE, FAILED, NEW, PENDING, RUNNING, STARTING, TERMINATED, TERMINATING, UP
from ..base.condtypes import DOWNLOAD_JOB_SUCCEEDED, PREEMPTABLE, PRIORITY_CLASS_NOT_FOUND, WORKLOAD_TERMINATED_EARLY
from ..base.kaiwoobject import KaiwoObject
from ..base.timing import parse_duration, parse_time
from ..base.world import World


def download_succeeded(status: Mapping | None) -> bool:
    """Whether the stored status says the download Job succeeded (the main object is only built after it)."""
    cond = find_condition((status or {}).get("conditions"), DOWNLOAD_JOB_SUCCEEDED)
    return bool(cond and cond.get("status") == "True")


def requeue_after(obj: Any, now: datetime, typed: KaiwoObject | None = None) -> timedelta | None:
    """While the stored ``Preemptable`` is False for the current generation,
    requeue when the duration will have run out. ``typed``: the already
    parsed view of ``obj`` (its spec is used; the status comes from ``obj``)."""
    if typed is not None:
        o = typed.with_object(obj)
    else:
        try:
            o = KaiwoObject.of(obj)
        except (ValidationError, ValueError):
            return None
    status = o.status
    if status.get("status") not in UP or not o.spec.get("duration"):
        return None
    cond = find_condition(status.get("conditions"), PREEMPTABLE)
    if not cond or cond.get("status") != "False" or cond.get("observedGeneration") != (o.generation or 0):
        return None
    start = parse_time(status.get("startTime"))
    if start is None:
        return None
    remaining = parse_duration(o.spec["duration"]) - (now - start)
    return max(remaining, timedelta(0))


def has_gpu_demand(obj: Any, others: Iterable[Any], world: World, now: datetime) -> bool:
    """GPU demand: some other KaiwoJob/KaiwoService is PENDING, wants GPUs, uses the
    same queue and vendor, and was created longer ago than the threshold."""
    o = KaiwoObject.of(obj)
    settings = world.settings
    try:
        threshold = parse_duration(settings.pending_threshold_for_preemption)
    except ValueError:
        return False
    queue = o.queue_name(settings)
    for other in others:
        try:
            x = KaiwoObject.of(other)
        except (ValidationError, ValueError):
            continue
        if x.uid and x.uid == o.uid:
            continue
        if x.status.get("status") != PENDING or x.gpus <= 0:
            continue
        if x.queue_name(settings) != queue or x.gpu_vendor.lower() != o.gpu_vendor.lower():
            continue
        created = parse_time(x.meta.get("creationTimestamp"))
        if created is not None and now - created > threshold:
            return True
    return False


def sweep_expired(objects: Iterable[Any], now: datetime) -> list[tuple[dict, dict]]:
    """The expired-workload sweep: every workload that is up with
    ``Preemptable=True`` -> TERMINATING.
    Returns ``(object, new status)`` pairs to write."""
    out = []
    for item in objects:
        try:
            x = KaiwoObject.of(item)
        except (ValidationError, ValueError):
            continue
        status = x.status
        if status.get("status") not in UP:
            continue
        cond = find_condition(status.get("conditions"), PREEMPTABLE)
        if not cond or cond.get("status") != "True":
            continue
        new = copy.deepcopy(status)
        conditions = new.setdefault("conditions", [])
        set_condition(
            conditions,
            WORKLOAD_TERMINATED_EARLY,
            "False",
            "DurationExceeded",
            "Workload is terminating due to exceeding its duration and active GPU demand",
            x.generation or 0,
            now,
        )
        new["status"] = TERMINATING
        new["observedGeneration"] = x.generation or 0
        out.append((x.doc, new))
    return out


STATUS_EVENTS = {
    PENDING: ("Normal", "WorkloadPending", "Workload is pending admission"),
    STARTING: ("Normal", "WorkloadStarting", "Workload was admitted, starting"),
    RUNNING: ("Normal", "WorkloadRunning", "Workload has started"),
    COMPLETE: ("Normal", "WorkloadComplete", "Workload has completed"),
    FAILED: ("Warning", "WorkloadFailed", "Workload has failed"),
    TERMINATING: ("Normal", "WorkloadTermination", "Workload has been flagged for termination"),
    TERMINATED: ("Normal", "WorkloadTerminated", "Workload has been terminated"),
    # Not in the reference (it never produced READY): the same kind of event.
    "READY": ("Normal", "WorkloadReady", "Workload is ready"),
}


def status_events(old: Mapping | None, new: Mapping) -> list[tuple[str, str, str]]:
    """Events (type, reason, message) the reconciler emits for a status write:
    one per new status, Preemptable turning true, the early-termination reason
    and a missing priority class."""
    old = old or {}
    out = []
    if old.get("status", NEW) != new.get("status", NEW) and new.get("status") in STATUS_EVENTS:
        out.append(STATUS_EVENTS[new["status"]])
    was = find_condition(old.get("conditions"), PREEMPTABLE)
    now_c = find_condition(new.get("conditions"), PREEMPTABLE)
    if now_c and now_c.get("status") == "True" and not (was and was.get("status") == "True"):
        out.append(("Normal", "Preemptable", "Workload has exceeded its duration"))
    if new.get("status") == TERMINATED and old.get("status") != TERMINATED:
        c = find_condition(new.get("conditions"), WORKLOAD_TERMINATED_EARLY)
        if c:
            out.append(("Warning", c.get("reason", ""), c.get("message", "")))
    was = find_condition(old.get("conditions"), PRIORITY_CLASS_NOT_FOUND)
    now_c = find_condition(new.get("conditions"), PRIORITY_CLASS_NOT_FOUND)
    if now_c and now_c.get("status") == "True" and not (was and was.get("status") == "True"):
        out.append(("Warning", PRIORITY_CLASS_NOT_FOUND, now_c.get("message", "")))
    return out
