"""A GpuWorkload's desired status from one pass's observation (pure), and the events
of its phase changes. Kept apart from the decision in :mod:`.reclaim`.

Writes are bounded by design: a GPU's stored sample moves only when it changes by at
least ``STEP`` points, so a steady workload's record is not rewritten every pass.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from kaiwo_ctrl.runtime.observe.conditions import format_time, set_condition

from .reclaim import ACTIVE, DELETED, IDLE, PENDING_GPU, PENDING_OTHER, PREEMPTED, PREEMPTING, Observation, phase_of
from .reclaimsettings import Settings

#: percentage points a stored sample must move before it is rewritten
STEP = 1.0
CONDITION = "PhaseUpdated"
NORMAL, WARNING = "Normal", "Warning"


def _metrics(previous: list[Mapping[str, Any]] | None, fresh: Mapping[str, float] | None, stamp: str) -> tuple[list[dict], bool]:
    old = {str(m.get("gpuId") or ""): dict(m) for m in previous or ()}
    if not fresh:
        return [old[k] for k in sorted(old)], False
    out, changed = [], set(old) != set(fresh)
    for gpu in sorted(fresh):
        value = round(fresh[gpu], 2)
        kept = old.get(gpu)
        if kept is not None and abs(float(kept.get("utilization") or 0) - value) < STEP:
            out.append(kept)
            continue
        out.append({"gpuId": gpu, "utilization": value, "lastUpdate": stamp})
        changed = True
    return out, changed


def tracked_pods(previous: Iterable[Mapping[str, Any]] | None, obs: Observation, stamp: str) -> tuple[list[dict], bool]:
    """The workload's Pods (sorted by name) with their GPUs' samples, and whether a sample moved."""
    before = {p.get("podName"): p for p in previous or ()}
    out, changed = [], False
    for name in sorted({(p.get("metadata") or {}).get("name") or "" for p in obs.pods} - {""}):
        metrics, moved = _metrics((before.get(name) or {}).get("gpuMetrics"), obs.samples.get(name) if obs.scrape_ok else None, stamp)
        changed |= moved
        out.append({"podName": name, "gpuMetrics": metrics} if metrics else {"podName": name})
    return out, changed


def _message(phase: str, value: float | None, ref: Mapping[str, Any]) -> tuple[str, str, str]:
    """(event type, reason, message) announcing ``phase``."""
    pct = f"{value:.1f}%" if value is not None else "unknown"
    return {
        IDLE: (NORMAL, "WorkloadIdle", f"GPU utilization is {pct}, below the threshold: the workload is idle"),
        ACTIVE: (NORMAL, "WorkloadActive", f"GPU utilization is {pct}: the workload is using its GPUs"),
        PENDING_GPU: (WARNING, "WorkloadPendingGpu", "Pods cannot be scheduled or admitted for lack of GPUs"),
        PENDING_OTHER: (NORMAL, "WorkloadPending", "Waiting for Pods to run (scheduling, image pull, volumes, init containers)"),
        DELETED: (NORMAL, "WorkloadDeleted", f"{ref.get('kind')}/{ref.get('name')} no longer exists; the record is kept until its TTL"),
    }[phase]


def desired_status(
    record: Mapping[str, Any], obs: Observation, settings: Settings, now: datetime
) -> tuple[dict, list[tuple[str, str, str]], bool]:
    """(new status, events, evidence) of a non-terminal, non-Preempting record."""
    spec = record.get("spec") or {}
    prev = dict(record.get("status") or {})
    before = prev.get("phase") or ""
    phase, value, evidence = phase_of(before, obs, settings, (spec.get("gpuResources") or {}).keys())
    stamp = format_time(now)
    new = copy.deepcopy(prev)
    new["phase"] = phase
    if phase == DELETED:
        for k in ("trackedPods", "aggregatedUtilization", "idleSince"):
            new.pop(k, None)
        new["finishedAt"] = stamp
    else:
        pods, moved = tracked_pods(prev.get("trackedPods"), obs, stamp)
        new["trackedPods"] = pods
        if not pods:
            new.pop("trackedPods")
        if moved:
            new["lastMetricsUpdate"] = stamp
        old_value = prev.get("aggregatedUtilization")
        if value is None:
            new.pop("aggregatedUtilization", None)
        elif not isinstance(old_value, (int, float)) or abs(old_value - value) >= STEP or phase != before:
            new["aggregatedUtilization"] = value
        if phase == IDLE:
            new["idleSince"] = prev.get("idleSince") if before == IDLE and prev.get("idleSince") else stamp
        else:
            new.pop("idleSince", None)
    events = []
    if phase != before:
        type_, reason, message = _message(phase, value, spec.get("workloadRef") or {})
        events.append((type_, reason, message))
        conditions = new.setdefault("conditions", [])
        set_condition(conditions, CONDITION, "True", f"Phase{phase}", message, (record.get("metadata") or {}).get("generation") or 0, now)
    return new, events, evidence


def preempting_status(record: Mapping[str, Any], reason: str, preempted_for: str, now: datetime) -> dict:
    new = copy.deepcopy(dict(record.get("status") or {}))
    new.update({"phase": PREEMPTING, "preemptionReason": reason[:1000], "preemptedAt": format_time(now)})
    if preempted_for:
        new["preemptedFor"] = preempted_for
    new.pop("idleSince", None)
    return new


def finished_status(record: Mapping[str, Any], phase: str, now: datetime) -> dict:
    """Preempted (reclaim done) or back to Idle (the owner could not be deleted)."""
    new = copy.deepcopy(dict(record.get("status") or {}))
    new["phase"] = phase
    if phase == PREEMPTED:
        new["finishedAt"] = format_time(now)
        for k in ("trackedPods", "aggregatedUtilization", "idleSince"):
            new.pop(k, None)
    else:
        for k in ("preemptedFor", "preemptionReason", "preemptedAt"):
            new.pop(k, None)
        new["idleSince"] = format_time(now)
    return new


__all__ = ["desired_status", "finished_status", "preempting_status", "tracked_pods"]
