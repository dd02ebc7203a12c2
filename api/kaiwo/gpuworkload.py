"""kaiwo.silogen.ai/v1alpha1 GpuWorkload: one record per opted-in GPU workload (its root owner),
kept by the idle-GPU reclaim controller (:mod:`kaiwo_ctrl.monitoring.reclaim`).

The field names, phases and enumerations are upstream Kaiwo's (April 2026), so its manifests and
tooling read ours unchanged.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from api.base import ApiModel
from api.fields import field
from api.meta import DURATION_PATTERN, Condition, KubeObject

GROUP = "kaiwo.silogen.ai"
VERSION = "v1alpha1"

PreemptionPolicy = Literal["OnPressure", "Always"]
AggregationPolicy = Literal["Min", "Max", "Avg"]
#: "" is a phase too: a record created but not yet observed.
GpuWorkloadPhase = Literal["PendingGpu", "PendingOther", "Active", "Idle", "Preempting", "Preempted", "Deleted", ""]
PHASES: tuple[str, ...] = ("PendingGpu", "PendingOther", "Active", "Idle", "Preempting", "Preempted", "Deleted")
TERMINAL_PHASES = frozenset({"Preempted", "Deleted"})


class WorkloadReference(ApiModel):
    """The root owner a GpuWorkload tracks."""

    api_version: str = field(description="apiVersion of the root owner.", min_length=1)
    kind: str = field(description="Kind of the root owner.", min_length=1)
    name: str = field(description="Name of the root owner (in the GpuWorkload's namespace).", min_length=1)
    uid: str = field(description="UID of the root owner; a new object of the same name is another workload.")


class GpuMetric(ApiModel):
    """One GPU's utilisation sample."""

    gpu_id: str | None = field(None, description="GPU index or id as the exporter labels it.")
    utilization: float = field(description="Utilisation in percent.", minimum=0, maximum=100)
    last_update: str = field(description="When the sample was taken (RFC 3339).", fmt="date-time")


class TrackedPod(ApiModel):
    """A Pod of the workload and its GPUs' latest samples."""

    pod_name: str = field(description="Name of the Pod.")
    gpu_metrics: list[GpuMetric] | None = field(None, description="Latest sample per GPU of the Pod.")


class GpuWorkloadSpec(ApiModel):
    """What is tracked, and the settings resolved from annotations when the record was made."""

    workload_ref: WorkloadReference = field(description="The root owner being tracked.")
    gpu_resources: dict[str, int] = field(
        description="GPU resource name -> total count requested across the workload's Pods (e.g. amd.com/gpu: 4)."
    )
    utilization_threshold: float | None = field(
        None, description="Aggregated utilisation (percent) below which the workload is idle.", minimum=0, maximum=100
    )
    grace_period: str | None = field(
        None, description="How long the workload must stay idle before it may be reclaimed (e.g. 10m).", pattern=DURATION_PATTERN
    )
    preemption_policy: PreemptionPolicy | None = field(
        None, description="OnPressure: reclaim only for a workload waiting for GPUs; Always: once idle past the grace period."
    )
    aggregation_policy: AggregationPolicy | None = field(
        None, description="How the Pods' utilisation is combined: Min, Max or Avg of the per-Pod means."
    )
    ttl_after_finished: str | None = field(
        None,
        description="How long this record is kept after Preempted or Deleted; 0 keeps it forever.",
        pattern=DURATION_PATTERN,
    )


class GpuWorkloadStatus(ApiModel):
    """Observed state of the tracked workload."""

    phase: GpuWorkloadPhase | None = field(None, description="Lifecycle phase.")
    tracked_pods: list[TrackedPod] | None = field(None, description="The workload's Pods and their GPU samples.")
    aggregated_utilization: float | None = field(None, description="Utilisation combined by the aggregation policy.")
    last_metrics_update: str | None = field(None, description="When samples were last written.", fmt="date-time")
    idle_since: str | None = field(None, description="When the workload last became Idle.", fmt="date-time")
    finished_at: str | None = field(None, description="When Preempted or Deleted was entered (the TTL counts from here).", fmt="date-time")
    owner_chain: str | None = field(None, description="Owner path from a Pod to the root, e.g. Pod/a -> ReplicaSet/b -> Deployment/c.")
    preempted_at: str | None = field(None, description="When reclaim started.", fmt="date-time")
    preempted_for: str | None = field(None, description="The pending GpuWorkload this one was reclaimed for.")
    preemption_reason: str | None = field(None, description="Why the workload was reclaimed.")
    conditions: list[Condition] | None = field(None, description="Standard conditions.")


class GpuWorkload(KubeObject):
    """Tracks one GPU workload's utilisation and reclaim; kept after the workload ends, for audit."""

    GROUP: ClassVar[str] = GROUP
    VERSION: ClassVar[str] = VERSION
    KIND: ClassVar[str] = "GpuWorkload"
    PLURAL: ClassVar[str] = "gpuworkloads"
    NAMESPACED: ClassVar[bool] = True

    spec: GpuWorkloadSpec | None = field(None, description="The tracked workload and its settings.")
    status: GpuWorkloadStatus | None = field(None, description="Observed state.")


__all__ = [
    "PHASES",
    "TERMINAL_PHASES",
    "AggregationPolicy",
    "GpuMetric",
    "GpuWorkload",
    "GpuWorkloadSpec",
    "GpuWorkloadStatus",
    "PreemptionPolicy",
    "TrackedPod",
    "WorkloadReference",
]
