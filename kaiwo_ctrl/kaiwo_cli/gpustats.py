"""GPU use per pod, GPU capacity per node pool, quota and use per ClusterQueue (pure functions).

Utilisation comes from the GPU exporter's Prometheus text, the source the
operator's resource monitoring reads: AMD's ``gpu_gfx_activity`` and
NVIDIA DCGM's ``DCGM_FI_DEV_GPU_UTIL`` (both percent, labelled with the pod).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from kaiwo_ctrl.monitoring.gpu import METRIC as AMD_METRIC
from kaiwo_ctrl.runtime.objects.quantity import QuantityError, parse_quantity
from kaiwo_ctrl.queues.constants import AMD_GPU_RESOURCE, NVIDIA_GPU_RESOURCE
from kaiwo_ctrl.queues.nodepools import discover

NVIDIA_METRIC = "DCGM_FI_DEV_GPU_UTIL"
#: metric -> (vendor, label naming the GPU)
METRICS = {AMD_METRIC: ("amd", "gpu_id"), NVIDIA_METRIC: ("nvidia", "gpu")}
GPU_RESOURCES = (AMD_GPU_RESOURCE, NVIDIA_GPU_RESOURCE)
#: Pods in these phases hold no GPUs any more.
_DONE = ("Succeeded", "Failed")


@dataclass(frozen=True)
class Utilisation:
    namespace: str
    pod: str
    container: str
    gpu: str
    vendor: str
    percent: float


def parse_utilisation(text: str) -> list[Utilisation]:
    """Every pod-labelled GPU utilisation sample (AMD or NVIDIA) in exposition ``text``.

    Malformed text raises ``ValueError``; samples without namespace and pod are skipped.
    """
    out = []
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name not in METRICS:
                continue
            vendor, gpu_label = METRICS[s.name]
            labels = s.labels
            if not labels.get("namespace") or not labels.get("pod"):
                continue
            out.append(Utilisation(labels["namespace"], labels["pod"], labels.get("container", ""),
                                   labels.get(gpu_label, labels.get("UUID", "?")), vendor, float(s.value)))
    return sorted(out, key=lambda u: (u.namespace, u.pod, u.container, u.gpu))


def for_pods(samples: Iterable[Utilisation], namespace: str, pods: Iterable[str]) -> list[Utilisation]:
    names = set(pods)
    return [u for u in samples if u.namespace == namespace and u.pod in names]


def monitor_rows(samples: list[Utilisation]) -> list[list[Any]]:
    return [[u.pod, u.container or "-", f"{u.vendor}/{u.gpu}", f"{u.percent:.1f}%"] for u in samples]


def monitor_json(samples: list[Utilisation]) -> list[dict[str, Any]]:
    return [asdict(u) for u in samples]


# ------------------------------------------------------------------ node pools


def _count(resources: Mapping[str, Any] | None, name: str) -> int:
    try:
        return int(parse_quantity((resources or {}).get(name) or 0))
    except QuantityError:
        return 0


def pod_gpus(pod: Mapping[str, Any]) -> dict[str, int]:
    """GPUs a pod holds: the larger of its init containers' and the sum of its containers' requests."""
    spec = pod.get("spec") or {}
    out = {}
    for res in GPU_RESOURCES:
        def want(c: Mapping[str, Any], res: str = res) -> int:
            r = c.get("resources") or {}
            return _count(r.get("requests"), res) or _count(r.get("limits"), res)
        main = sum(want(c) for c in spec.get("containers") or [])
        init = max((want(c) for c in spec.get("initContainers") or []), default=0)
        if max(main, init):
            out[res] = max(main, init)
    return out


def pool_rows(nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per node pool (the operator's grouping): nodes, GPU capacity, allocated and free."""
    by_node: dict[str, dict[str, int]] = {}
    for p in pods:
        node = (p.get("spec") or {}).get("nodeName")
        if not node or (p.get("status") or {}).get("phase") in _DONE:
            continue
        for resource, n in pod_gpus(p).items():
            held = by_node.setdefault(node, {})
            held[resource] = held.get(resource, 0) + n
    capacity = {n["metadata"]["name"]: (n.get("status") or {}).get("allocatable") or (n.get("status") or {}).get("capacity")
                for n in nodes}
    rows = []
    for pool in discover(nodes):
        res = pool.gpu_resource
        if res is None:
            continue
        cap = sum(_count(capacity.get(n), res) for n in pool.nodes)
        used = sum(by_node.get(n, {}).get(res, 0) for n in pool.nodes)
        rows.append({"pool": pool.name, "vendor": pool.vendor, "model": pool.model, "nodes": len(pool.nodes),
                     "resource": res, "capacity": cap, "allocated": used, "free": max(cap - used, 0)})
    return rows


# ------------------------------------------------------------------ queues


def _quota_total(cq: Mapping[str, Any]) -> dict[str, int]:
    out: dict[str, int] = {}
    for group in (cq.get("spec") or {}).get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            for r in flavor.get("resources") or []:
                out[r["name"]] = out.get(r["name"], 0) + _count(r, "nominalQuota")
    return out


def _usage_total(cq: Mapping[str, Any]) -> dict[str, int]:
    out: dict[str, int] = {}
    st = cq.get("status") or {}
    for flavor in st.get("flavorsUsage") or st.get("flavorsReservation") or []:
        for r in flavor.get("resources") or []:
            out[r["name"]] = out.get(r["name"], 0) + _count(r, "total")
    return out


def queue_rows(cqs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per ClusterQueue: GPU (and CPU) quota and usage, pending and admitted workloads."""
    rows = []
    for cq in sorted(cqs, key=lambda c: c["metadata"]["name"]):
        quota, used, st = _quota_total(cq), _usage_total(cq), cq.get("status") or {}
        gpu = next((r for r in GPU_RESOURCES if r in quota), None)
        rows.append({
            "name": cq["metadata"]["name"],
            "gpuResource": gpu,
            "gpuQuota": quota.get(gpu, 0) if gpu else 0,
            "gpuUsed": used.get(gpu, 0) if gpu else 0,
            "quota": quota, "usage": used,
            "pending": int(st.get("pendingWorkloads") or 0),
            "admitted": int(st.get("admittedWorkloads") or 0),
        })
    return rows
