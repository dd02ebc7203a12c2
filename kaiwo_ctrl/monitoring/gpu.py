"""GPU resource monitoring as pure functions: samples of idle GPUs warn on,
and may terminate, the workload whose pods they belong to.

Nothing here talks to the network or the API server: the runnable in
:mod:`kaiwo_ctrl.monitoring.monitor` scrapes, looks objects up in the caches
and hands them to these functions, which decide what to emit and write.

The exposition text is parsed with ``prometheus_client``'s parser (the
well-kept reference implementation of the text format), not by hand.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from api.meta import parse_duration
from kaiwo_ctrl.runtime.observe.conditions import find_condition, set_condition

METRIC = "gpu_gfx_activity"
#: Labels a sample must carry (non-empty), else it is skipped.
REQUIRED_LABELS = ("namespace", "pod", "container", "gpu_id", "gpu_partition_id")
#: Dropped when ``targetNamespaces`` is empty (reference-docs decision).
SYSTEM_NAMESPACE = "kube-system"

LABEL_NAME = "kaiwo.silogen.ai/name"
LABEL_TYPE = "kaiwo.silogen.ai/type"
LABEL_RUN_ID = "kaiwo.silogen.ai/run-id"
KINDS = {"job": "KaiwoJob", "service": "KaiwoService"}

RESOURCE_UNDERUTILIZATION = "ResourceUnderutilization"
WORKLOAD_TERMINATED_EARLY = "WorkloadTerminatedEarly"
REASON_LOW = "GpuUtilizationLow"
REASON_NORMAL = "GpuUtilizationNormal"
MESSAGE_LOW = "One or more GPUs are underutilizing requested resources"
MESSAGE_NORMAL = "GPU utilization is normal"
MESSAGE_TERMINATING = "Terminating workload due to underutilized GPU resources"

TERMINATING = "TERMINATING"
#: Workloads in these states are left alone (finished or already terminating).
SKIPPED_STATES = frozenset({"TERMINATING", "TERMINATED", "FAILED", "COMPLETE"})
#: ``duration`` is recomputed on a status write while in one of these.
_DURATION_STATES = frozenset({"RUNNING", "COMPLETE", "FAILED", "TERMINATING"})

WARNING = "Warning"
NORMAL = "Normal"


@dataclass(frozen=True)
class GpuSample:
    namespace: str
    pod: str
    container: str
    gpu_id: str
    gpu_partition_id: str
    value: float


@dataclass(frozen=True)
class WorkloadRef:
    """The Kaiwo workload a pod belongs to, from its labels."""

    kind: str  # KaiwoJob | KaiwoService
    namespace: str
    name: str
    run_id: str


@dataclass(frozen=True)
class MonitoringSettings:
    """``KaiwoConfig.spec.resourceMonitoring`` as the decision needs it."""

    low_utilization_threshold: float = 1.0
    target_namespaces: tuple[str, ...] = ()
    terminate_underutilized: bool = False
    #: None when the configured duration cannot be parsed (never terminate)
    terminate_underutilized_after: timedelta | None = timedelta(hours=24)

    @classmethod
    def of(cls, rm: Any) -> "MonitoringSettings":
        """From the typed ``KaiwoResourceMonitoringConfig`` model."""
        try:
            after: timedelta | None = parse_duration(rm.terminate_underutilized_after)
        except (TypeError, ValueError):
            after = None
        return cls(
            low_utilization_threshold=float(rm.low_utilization_threshold),
            target_namespaces=tuple(rm.target_namespaces or ()),
            terminate_underutilized=bool(rm.terminate_underutilized),
            terminate_underutilized_after=after,
        )


@dataclass
class Decision:
    """What one tick does to one workload."""

    #: (type, reason, message) events on the workload
    events: list[tuple[str, str, str]] = field(default_factory=list)
    #: the new full status, or None when nothing changed (no write)
    status: dict | None = None
    #: the status is being set to TERMINATING by this decision
    terminating: bool = False


# --------------------------------------------------------------------------- parsing


def parse_samples(text: str) -> list[GpuSample]:
    """``gpu_gfx_activity`` samples with every required label.

    An absent family yields no samples. Malformed exposition text raises
    ``ValueError`` (the tick is skipped).
    """
    out: list[GpuSample] = []
    for family in text_string_to_metric_families(text):
        if family.name != METRIC:
            continue
        for s in family.samples:
            if s.name != METRIC:
                continue
            labels = s.labels
            if not all(labels.get(k) for k in REQUIRED_LABELS):
                continue
            out.append(
                GpuSample(
                    namespace=labels["namespace"],
                    pod=labels["pod"],
                    container=labels["container"],
                    gpu_id=labels["gpu_id"],
                    gpu_partition_id=labels["gpu_partition_id"],
                    value=float(s.value),
                )
            )
    return out


def filter_namespaces(samples: Iterable[GpuSample], target_namespaces: Sequence[str] | None) -> list[GpuSample]:
    """Only ``targetNamespaces`` when set; otherwise everything but kube-system."""
    if target_namespaces:
        wanted = set(target_namespaces)
        return [s for s in samples if s.namespace in wanted]
    return [s for s in samples if s.namespace != SYSTEM_NAMESPACE]


# --------------------------------------------------------------------------- grouping


def workload_of_pod(pod: Mapping[str, Any] | None) -> WorkloadRef | None:
    """The workload a pod's labels name; None for pods that are not a Kaiwo
    workload's (no run-id label, unknown type, no name)."""
    if pod is None:
        return None
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    if LABEL_RUN_ID not in labels:
        return None
    kind = KINDS.get(labels.get(LABEL_TYPE) or "")
    name = labels.get(LABEL_NAME)
    if kind is None or not name:
        return None
    return WorkloadRef(kind, meta.get("namespace") or "", name, labels.get(LABEL_RUN_ID) or "")


def group_by_workload(
    samples: Iterable[GpuSample], pod_lookup: Callable[[str, str], Mapping[str, Any] | None]
) -> dict[WorkloadRef, list[GpuSample]]:
    """Samples grouped by the workload (run-id label) of their pod; pods without one are skipped.

    ``pod_lookup(namespace, name)`` returns the pod or None (skipped). Every
    sample of every pod of a workload is kept, in exposition order.
    """
    groups: dict[WorkloadRef, list[GpuSample]] = {}
    for s in samples:
        ref = workload_of_pod(pod_lookup(s.namespace, s.pod))
        if ref is None:
            continue
        groups.setdefault(ref, []).append(s)
    return groups


def matches(ref: WorkloadRef, workload: Mapping[str, Any] | None) -> bool:
    """The cached workload is the one the pods were made for: a pod whose
    run-id is another UID belongs to an earlier workload of the same name."""
    if workload is None:
        return False
    uid = (workload.get("metadata") or {}).get("uid") or ""
    return not ref.run_id or ref.run_id == uid


# --------------------------------------------------------------------------- decision


def is_low(sample: GpuSample, threshold: float) -> bool:
    return not math.isnan(sample.value) and sample.value < threshold


def low_event(sample: GpuSample) -> tuple[str, str, str]:
    return (WARNING, REASON_LOW, f"Pod '{sample.pod}' is underutilizing GPU {sample.gpu_id}/{sample.gpu_partition_id}")


def _parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def decide(workload: Mapping[str, Any], samples: Sequence[GpuSample], settings: MonitoringSettings, now: datetime) -> Decision:
    """One workload and its samples: a Warning per low sample, the
    ResourceUnderutilization condition, and TERMINATING once it has been low
    for longer than ``terminateUnderutilizedAfter`` (when enabled).

    ``now`` must be timezone-aware. The returned status is the stored one with
    the ``ResourceUnderutilization`` condition set (and, when termination is
    due, status ``TERMINATING`` with ``WorkloadTerminatedEarly=False``); it is
    None when that equals the stored status, so an unchanged world writes
    nothing.
    """
    stored = workload.get("status") or {}
    if (stored.get("status") or "") in SKIPPED_STATES:
        return Decision()
    generation = (workload.get("metadata") or {}).get("generation") or 0
    low = [s for s in samples if is_low(s, settings.low_utilization_threshold)]
    decision = Decision(events=[low_event(s) for s in low])

    new = copy.deepcopy(stored)
    conditions = new.setdefault("conditions", [])
    if low:
        set_condition(conditions, RESOURCE_UNDERUTILIZATION, "True", REASON_LOW, MESSAGE_LOW, generation, now)
    else:
        set_condition(conditions, RESOURCE_UNDERUTILIZATION, "False", REASON_NORMAL, MESSAGE_NORMAL, generation, now)

    if low and settings.terminate_underutilized and settings.terminate_underutilized_after is not None:
        since = _parse_time(find_condition(conditions, RESOURCE_UNDERUTILIZATION).get("lastTransitionTime"))  # type: ignore[union-attr]
        if since is not None and now - since > settings.terminate_underutilized_after:
            set_condition(conditions, WORKLOAD_TERMINATED_EARLY, "False", REASON_LOW, MESSAGE_TERMINATING, generation, now)
            new["status"] = TERMINATING
            start = _parse_time(new.get("startTime"))
            if start is not None:
                new["duration"] = max(0, int((now - start).total_seconds()))
            decision.terminating = True
            decision.events.append((NORMAL, "WorkloadTermination", "Workload has been flagged for termination"))

    if new != stored:
        decision.status = new
    return decision


__all__ = [
    "Decision",
    "GpuSample",
    "MonitoringSettings",
    "WorkloadRef",
    "decide",
    "filter_namespaces",
    "group_by_workload",
    "matches",
    "parse_samples",
    "workload_of_pod",
]
