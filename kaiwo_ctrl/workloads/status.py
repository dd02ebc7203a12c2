"""The Kaiwo status machine (§5.3-§5.6, §11.4, §12, §13) as a pure function.

``observe`` maps the Kaiwo object, the world, its observed children and the
Kueue Workload(s) onto the complete desired ``status``. Re-observing an
unchanged world returns the stored status unchanged, so the reconciler can
compare and skip the write.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from pydantic import ValidationError

from kaiwo_ctrl.runtime.conditions import find_condition, format_time, remove_condition, set_condition

from .childstatus import (
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
    batch_job_status,
    deployment_status,
    is_admitted,
    pvc_phase,
    ray_job_status,
    ray_service_status,
)
from .desired import MAIN_KINDS
from .gpu import check_gpus, check_queue, cluster_gpu_stats
from .kaiwoobject import KaiwoObject
from .naming import name_with_suffix
from .storage import StoragePlan
from .timing import parse_duration, parse_time
from .validation import SpecError, gpu_plan, spec_error_from_validation, validate
from .world import World, as_dict

# Condition types
SCHEDULABLE = "Schedulable"
ADMITTED = "Admitted"
PVC_READY = "PvcReady"
DOWNLOAD_JOB_SUCCEEDED = "DownloadJobSucceeded"
PREEMPTABLE = "Preemptable"
WORKLOAD_TERMINATED_EARLY = "WorkloadTerminatedEarly"
PRIORITY_CLASS_NOT_FOUND = "PriorityClassNotFound"
SPEC_VALID = "SpecValid"
SPEC_CHANGE_NOT_APPLIED = "SpecChangeNotApplied"


@dataclass(frozen=True)
class ObservedChildren:
    """What the caches hold for one workload (``None`` = does not exist).

    ``main`` is the underlying object (Job, RayJob, Deployment or AppWrapper);
    ``ray_service`` the RayService the AppWrapper controller created;
    ``unapplied_fields`` what :func:`kaiwo_ctrl.workloads.drift.immutable_drift`
    found; ``gpu_demand`` the §12.2 answer (see :func:`has_gpu_demand`).
    """

    data_pvc: dict | None = None
    hf_pvc: dict | None = None
    download_configmap: dict | None = None
    download_job: dict | None = None
    main: dict | None = None
    ray_service: dict | None = None
    unapplied_fields: tuple[str, ...] = ()
    gpu_demand: bool = False

    @classmethod
    def from_objects(cls, obj: Any, objects: Iterable[Mapping], **extra: Any) -> ObservedChildren:
        """Sort the objects the workload controls into their slots by kind and name."""
        o = KaiwoObject.of(obj)
        plan_names = {
            ("PersistentVolumeClaim", name_with_suffix(o.name, "data")): "data_pvc",
            ("PersistentVolumeClaim", name_with_suffix(o.name, "hf")): "hf_pvc",
            ("ConfigMap", name_with_suffix(o.name, "download")): "download_configmap",
            ("Job", name_with_suffix(o.name, "download")): "download_job",
            (MAIN_KINDS[(o.kind, o.is_ray)][1], o.name): "main",
            ("RayService", o.name): "ray_service",
        }
        slots: dict[str, Any] = {}
        for item in objects:
            key = (item.get("kind"), (item.get("metadata") or {}).get("name"))
            slot = plan_names.get(key)
            if slot:
                slots[slot] = dict(item)
        return cls(**slots, **extra)


@dataclass
class _Observation:
    status: str
    conditions: list[tuple[str, str, str, str]]
    #: condition types to drop from the stored list
    removed: tuple[str, ...] = ()


def _cond(type_: str, status: bool | str, reason: str, message: str = "") -> tuple[str, str, str, str]:
    value = status if isinstance(status, str) else ("True" if status else "False")
    return (type_, value, reason, message)


# --------------------------------------------------------------------------- helpers for the reconciler


def download_succeeded(status: Mapping | None) -> bool:
    """Whether the stored status says the download Job succeeded (§5.7 gate)."""
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
    """§12.2: some other KaiwoJob/KaiwoService is PENDING, wants GPUs, uses the
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
    """§12.3: every workload that is up with ``Preemptable=True`` -> TERMINATING.
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
    """Events (type, reason, message) the reconciler emits for a status write (§5.6, §13)."""
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


# --------------------------------------------------------------------------- observation


def _storage(plan: StoragePlan, children: ObservedChildren, prev_conditions: Sequence[dict]) -> tuple[str, list]:
    """§5.3 step 2 / §11.4. Returns (storage status, conditions)."""
    expected: list[Any] = []
    pvcs: list[dict | None] = []
    if plan.data_requested:
        pvcs.append(children.data_pvc)
    if plan.hf_requested:
        pvcs.append(children.hf_pvc)
    expected += pvcs
    if plan.downloads_configured:
        expected += [children.download_configmap, children.download_job]
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
    job = batch_job_status(children.download_job, previous)
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


def _main_status(o: KaiwoObject, children: ObservedChildren, previous: str) -> str:
    if o.is_job:
        if o.is_ray:
            return ray_job_status(children.main)
        return batch_job_status(children.main, previous)
    if o.is_ray:
        return ray_service_status(children.main, children.ray_service)
    return deployment_status(children.main)


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
    o: KaiwoObject, world: World, children: ObservedChildren, workload: Any, now: datetime
) -> _Observation:
    prev = o.status
    prev_status = prev.get("status") or NEW
    prev_conditions = prev.get("conditions") or []
    errors = validate(o, world)
    if errors:
        return _spec_invalid(errors[0])
    removed: list[str] = [SPEC_VALID]

    # 1. Schedulable
    settings = world.settings
    queue = o.queue_name(settings)
    failure = check_queue(queue, o.namespace, world.queue_config)
    if failure is None:
        stats = cluster_gpu_stats(world.nodes or (), o.gpu_vendor, settings.default_gpu_resource_key)
        failure = check_gpus(gpu_plan(o, world), stats)
    if not failure.status:
        return _Observation(ERROR, [_cond(SCHEDULABLE, False, failure.reason, failure.message)], tuple(removed))
    conds = [_cond(SCHEDULABLE, True, failure.reason, failure.message)]
    pconds, premoved = _priority(o, world)
    conds += pconds
    removed += premoved
    if children.unapplied_fields:
        conds.append(
            _cond(
                SPEC_CHANGE_NOT_APPLIED,
                True,
                "ImmutableFieldChanged",
                "These fields changed in the spec but cannot be changed on the existing object: "
                + ", ".join(children.unapplied_fields),
            )
        )
    else:
        removed.append(SPEC_CHANGE_NOT_APPLIED)

    # 2. Storage
    plan = StoragePlan.of(o, world)
    if plan.enabled:
        st, sconds = _storage(plan, children, prev_conditions)
        conds += sconds
        if st == FAILED:
            return _Observation(FAILED, conds, tuple(removed))
        if plan.downloads_configured and st != COMPLETE:
            return _Observation(DOWNLOADING, conds, tuple(removed))

    # 3. Workload
    obj_status = _main_status(o, children, prev_status)
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
    status = obj_status or STARTING

    # §12 duration checks (READY counts as up, like RUNNING: READY is new in this
    # implementation and a ready service must not escape its duration).
    start = parse_time(prev.get("startTime"))
    if o.spec.get("duration") and prev_status in UP and start is not None:
        limit = parse_duration(o.spec["duration"])
        remaining = limit - (now - start)
        if remaining > timedelta(0):
            conds.append(
                _cond(PREEMPTABLE, False, "DurationNotExceeded", "Workload is running and the duration has not been exceeded")
            )
        else:
            conds.append(_cond(PREEMPTABLE, True, "DurationExceeded", "Workload duration has exceeded"))
            if children.gpu_demand:
                conds.append(
                    _cond(
                        WORKLOAD_TERMINATED_EARLY,
                        False,
                        "DurationExceededWithActiveGpuDemand",
                        "Terminated since duration was exceeded and there is active GPU demand",
                    )
                )
                status = TERMINATING
    return _Observation(status, conds, tuple(removed))


def _terminate(prev_conditions: Sequence[dict]) -> _Observation:
    """§13 step 1."""
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
    kind: str,
    obj: Any,
    world: World,
    children: ObservedChildren,
    workload: Mapping | Sequence[Mapping] | None,
    now: datetime,
    typed: KaiwoObject | None = None,
) -> dict[str, Any]:
    """The complete desired ``status`` of a KaiwoJob/KaiwoService.

    ``workload`` is the Kueue Workload of the underlying object (a list for a
    Deployment: one Workload per pod), ``None`` when there is none yet.
    ``now`` must be timezone-aware. Raises
    :class:`~kaiwo_ctrl.workloads.childstatus.UnknownChildStatus` for a child
    status this operator does not understand (reconcile error, retry).
    """
    raw = as_dict(obj)
    if kind and not raw.get("kind"):
        raw = {**raw, "kind": kind}
    prev: dict[str, Any] = copy.deepcopy(raw.get("status") or {})
    prev_status = prev.get("status") or NEW
    generation = (raw.get("metadata") or {}).get("generation") or 0
    if prev_status in TERMINAL:
        return prev
    try:
        o = typed if typed is not None else KaiwoObject.of(raw)
    except ValidationError as exc:
        observation = _spec_invalid(spec_error_from_validation(exc))
    else:
        if prev_status == TERMINATING:
            observation = _terminate(prev.get("conditions") or [])
        else:
            observation = _observe_active(o, world, children, workload, now)

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
    "ObservedChildren",
    "download_succeeded",
    "has_gpu_demand",
    "observe",
    "requeue_after",
    "status_events",
    "sweep_expired",
]
