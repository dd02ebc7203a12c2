"""GPU maths: cluster statistics from nodes, replica/GPU derivation, the
Schedulable check and the choice of GPU resource name (the names themselves
live in ``queues/constants.py``, their one home)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from kaiwo_ctrl.runtime.objects.quantity import QuantityError, to_int
from kaiwo_ctrl.runtime.observe.conditions import bound_message

from kaiwo_ctrl.queues.constants import AMD_GPU_RESOURCE as AMD_GPU
from kaiwo_ctrl.queues.constants import NVIDIA_GPU_RESOURCE as NVIDIA_GPU

from .labels import NODE_LABEL_NODEPOOL

KNOWN_VENDORS = ("amd", "nvidia")
#: Resource names that are treated as GPUs wherever GPU keys are dropped or detected.
GPU_RESOURCE_KEYS = frozenset({AMD_GPU, NVIDIA_GPU})


def gpu_resource_key(vendor: str | None, default_key: str) -> str:
    """``amd``/``AMD`` -> ``amd.com/gpu``, ``nvidia`` -> ``nvidia.com/gpu``,
    anything else -> the KaiwoConfig default GPU resource key."""
    upper = (vendor or "").upper()
    if upper == "NVIDIA":
        return NVIDIA_GPU
    if upper == "AMD":
        return AMD_GPU
    return default_key


@dataclass(frozen=True)
class ClusterGpuStats:
    """GPU capacity for one vendor. ``min_*`` is ``None`` when no node matched."""

    vendor: str
    total_gpus: int = 0
    min_gpus_per_node: int | None = None
    max_gpus_per_node: int = 0
    total_allocatable_gpus: int = 0
    min_allocatable_gpus_per_node: int | None = None


def _pool_gpus(pool: str, vendor: str) -> int | None:
    parts = pool.split("-")
    if len(parts) < 3 or parts[0].lower() != vendor.lower():
        return None
    count = parts[2]
    if count.endswith("gpu"):
        count = count[: -len("gpu")]
    try:
        return int(count)
    except ValueError:
        return None


def cluster_gpu_stats(nodes: Iterable[Mapping], vendor: str, default_gpu_key: str = AMD_GPU) -> ClusterGpuStats:
    """GPU totals and per-node minimum of one vendor, with three deliberate
    differences from the reference implementation:

    * cordoned nodes (``spec.unschedulable``) are skipped: they keep their
      ``kaiwo/nodepool`` label but can take no new pods, so counting them
      overstated capacity; node-pool discovery skips them too;
    * pools advertising 0 GPUs are skipped (they would make the per-node minimum
      0 and the derivation divide by zero);
    * allocatable is read under the same resource name the pods request
      (``gpu_resource_key``), not ``<vendor>.com/gpu``, so an unknown vendor
      mapped to the default key is measured against what it will ask for.
    """
    key = gpu_resource_key(vendor, default_gpu_key)
    per_node: list[int] = []
    allocatable: list[int] = []
    for node in nodes:
        if (node.get("spec") or {}).get("unschedulable"):
            continue
        labels = (node.get("metadata") or {}).get("labels") or {}
        pool = labels.get(NODE_LABEL_NODEPOOL)
        if not pool:
            continue
        gpus = _pool_gpus(pool, vendor)
        if not gpus or gpus <= 0:
            continue
        per_node.append(gpus)
        raw = ((node.get("status") or {}).get("allocatable") or {}).get(key)
        try:
            alloc = to_int(raw) if raw is not None else 0
        except QuantityError:
            alloc = 0
        if alloc > 0:
            allocatable.append(alloc)
    return ClusterGpuStats(
        vendor=vendor,
        total_gpus=sum(per_node),
        min_gpus_per_node=min(per_node) if per_node else None,
        max_gpus_per_node=max(per_node) if per_node else 0,
        total_allocatable_gpus=sum(allocatable),
        min_allocatable_gpus_per_node=min(allocatable) if allocatable else None,
    )


class GpuCapacity:
    """The cluster GPU statistics of every node pool vendor, computed once from
    one set of nodes (a :class:`~.world.World`): one :class:`ClusterGpuStats`
    per pool prefix, so a lookup costs nothing and nothing grows with the
    vendor names workloads ask for."""

    __slots__ = ("by_vendor",)

    def __init__(self, nodes: Iterable[Mapping], default_gpu_key: str = AMD_GPU) -> None:
        nodes = list(nodes)
        vendors = {
            pool.split("-")[0].lower()
            for n in nodes
            if (pool := ((n.get("metadata") or {}).get("labels") or {}).get(NODE_LABEL_NODEPOOL))
        }
        #: lower-cased pool prefix -> its statistics (pools and resource key match case-insensitively)
        self.by_vendor = {v: cluster_gpu_stats(nodes, v, default_gpu_key) for v in vendors}

    def stats(self, vendor: str) -> ClusterGpuStats:
        """What :func:`cluster_gpu_stats` reports for ``vendor`` (named as given)."""
        found = self.by_vendor.get(vendor.lower())
        if found is None:
            return ClusterGpuStats(vendor)
        return found if found.vendor == vendor else replace(found, vendor=vendor)


@dataclass(frozen=True)
class GpuPlan:
    """The GPU/replica derivation: exported as NUM_GPUS / NUM_REPLICAS / NUM_GPUS_PER_REPLICA."""

    total_gpus: int
    replicas: int
    gpus_per_replica: int
    #: True when replicas and gpusPerReplica came straight from the spec.
    explicit: bool = False

    def env(self) -> list[dict[str, str]]:
        return [
            {"name": "NUM_GPUS", "value": str(self.total_gpus)},
            {"name": "NUM_REPLICAS", "value": str(self.replicas)},
            {"name": "NUM_GPUS_PER_REPLICA", "value": str(self.gpus_per_replica)},
        ]


def derive_gpu_plan(
    gpus: int, replicas: int | None, gpus_per_replica: int, stats: ClusterGpuStats | None
) -> GpuPlan:
    """Derive replicas and GPUs per replica. ``stats`` ``None`` means the
    cluster is unknown (no capacity data).

    Difference from the reference: when both ``replicas`` and ``gpusPerReplica``
    are given, the total is ``replicas × gpusPerReplica`` (the API reference:
    "gpus is recalculated based on those values"); the reference implementation
    took ``max(that, gpus)`` and then exported a NUM_GPUS that no pod received.
    """
    # the replica count when both it and gpusPerReplica are given (else None)
    explicit_replicas = replicas if replicas is not None and replicas > 0 and gpus_per_replica > 0 else None
    requested = explicit_replicas * gpus_per_replica if explicit_replicas is not None else 0
    total = requested if explicit_replicas is not None else max(requested, gpus)
    if total <= 0:
        return GpuPlan(0, replicas or 1, 0)
    cluster_total = stats.total_gpus if stats is not None else None
    if explicit_replicas is not None and (cluster_total is None or total <= cluster_total):
        return GpuPlan(total, explicit_replicas, gpus_per_replica, explicit=True)
    per_node = stats.min_gpus_per_node if stats is not None else None
    if stats is not None and stats.total_allocatable_gpus >= total and stats.min_allocatable_gpus_per_node:
        per_node = stats.min_allocatable_gpus_per_node
    if not per_node:
        # No node of this vendor (or unknown cluster): one replica holding everything;
        # the Schedulable check reports NoGPUs when the cluster is known.
        return GpuPlan(total, 1, total)
    n = math.ceil(total / per_node)
    return GpuPlan(total, n, total // n)


@dataclass(frozen=True)
class SchedulableResult:
    status: bool
    reason: str
    message: str
    #: The spec field the problem is best attributed to (for SpecError).
    field: str = ""


def check_queue(queue: str, namespace: str, queue_config: Mapping | None) -> SchedulableResult | None:
    """The workload's queue must be listed in the queue config, and in its
    namespaces when it lists any. Returns a failure or ``None``."""
    entries = (queue_config or {}).get("clusterQueues") or []
    entry = next((e for e in entries if e.get("name") == queue), None)
    if entry is None:
        return SchedulableResult(
            False,
            "ClusterQueueNotFound",
            f"Cluster queue '{_user(queue)}' is not defined in KaiwoQueueConfig 'kaiwo'",
            "spec.clusterQueue",
        )
    namespaces = entry.get("namespaces") or []
    if namespaces and namespace not in namespaces:
        return SchedulableResult(
            False,
            "WrongQueueNamespace",
            f"Cluster queue '{_user(queue)}' defines one or more namespaces, but workload namespace "
            f"'{_user(namespace)}' is not one of them",
            "spec.clusterQueue",
        )
    return None


def check_gpus(plan: GpuPlan, stats: ClusterGpuStats) -> SchedulableResult:
    """Enough GPUs in the cluster for the plan, plus one check the reference
    lacked: explicitly requested ``gpusPerReplica`` larger than the biggest
    node of that vendor can never be placed (each replica is one pod), although
    the cluster total may suffice."""
    vendor = stats.vendor
    if plan.total_gpus > 0 and stats.total_gpus == 0:
        return SchedulableResult(False, "NoGPUs", f"Cluster has 0 GPUs (vendor: {_user(vendor)})", "spec.gpus")
    if plan.total_gpus > stats.total_gpus:
        return SchedulableResult(
            False,
            "InsufficientGPUs",
            f"Cluster has {stats.total_gpus} GPUs, but requested for {plan.total_gpus} GPUs (vendor: {_user(vendor)})",
            "spec.gpus",
        )
    if plan.gpus_per_replica > stats.max_gpus_per_node > 0:
        return SchedulableResult(
            False,
            "InsufficientGPUsPerNode",
            f"The largest node has {stats.max_gpus_per_node} GPUs, but each replica requests "
            f"{plan.gpus_per_replica} GPUs (vendor: {_user(vendor)})",
            "spec.gpusPerReplica",
        )
    if plan.total_gpus > 0:
        return SchedulableResult(True, "Schedulable", "Cluster has sufficient GPU resources")
    return SchedulableResult(True, "Schedulable", "Workload does not require GPU resources")


def _user(value: object) -> str:
    """A user-supplied string quoted in a message, bounded."""
    return bound_message(str(value), 100)
