"""Idle-GPU reclaim as pure functions: GPU activity samples (AMD and NVIDIA), a
GpuWorkload's observed phase and status, and the global choice of what to reclaim.

The runnable in :mod:`.reclaimer` scrapes, reads the caches and applies what these
functions return; nothing here does I/O. Rules that differ from upstream Kaiwo say so.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from kaiwo_ctrl.runtime.observe.conditions import find_condition

from .reclaimsettings import Settings

#: GPU activity in percent: AMD's device-metrics exporter, NVIDIA's DCGM exporter.
METRICS = ("gpu_gfx_activity", "DCGM_FI_DEV_GPU_UTIL")
NAMESPACE_LABELS = ("namespace", "exported_namespace", "pod_namespace", "k8s_namespace_name")
POD_LABELS = ("pod", "exported_pod", "pod_name", "k8s_pod_name")
GPU_LABELS = ("gpu_id", "gpu", "GPU_I_ID", "UUID")
#: GPUs reclaimed for a waiting workload count as on their way to it this long after the reclaim
#: (the scheduler or Kueue needs the time to place it). Upstream counts them only while the
#: deletion is in flight, so a workload still pending at the next pass costs another victim.
SETTLE = timedelta(minutes=5)
#: at most this many samples are read from one scrape (a cluster's GPUs are far fewer)
MAX_SAMPLES = 100_000

PENDING_GPU, PENDING_OTHER, ACTIVE, IDLE = "PendingGpu", "PendingOther", "Active", "Idle"
PREEMPTING, PREEMPTED, DELETED = "Preempting", "Preempted", "Deleted"


def _first(labels: Mapping[str, str], keys: Sequence[str]) -> str:
    return next((labels[k] for k in keys if labels.get(k)), "")


def parse_activity(text: str) -> dict[tuple[str, str], dict[str, float]]:
    """(namespace, pod) -> GPU id -> activity percent, from both vendors' metrics.

    Samples without a namespace and pod label (GPUs no Pod holds), or with a value that is not
    a number in [0, 100] after clamping NaN away, are skipped. Malformed text raises ValueError.
    """
    out: dict[tuple[str, str], dict[str, float]] = {}
    count = 0
    for family in text_string_to_metric_families(text):
        if family.name not in METRICS:
            continue
        for s in family.samples:
            count += 1
            if count > MAX_SAMPLES:
                return out
            ns, pod = _first(s.labels, NAMESPACE_LABELS), _first(s.labels, POD_LABELS)
            if not ns or not pod or math.isnan(s.value) or math.isinf(s.value):
                continue
            gpu = _first(s.labels, GPU_LABELS) or str(len(out.get((ns, pod), {})))
            out.setdefault((ns, pod), {})[gpu] = min(100.0, max(0.0, float(s.value)))
    return out


def aggregate(per_pod: Mapping[str, Mapping[str, float]], policy: str) -> float | None:
    """Each Pod's mean over its GPUs, combined across Pods by Min, Max or Avg (rounded to 0.01);
    None without samples."""
    means = [sum(g.values()) / len(g) for g in per_pod.values() if g]
    if not means:
        return None
    value = min(means) if policy == "Min" else max(means) if policy == "Max" else sum(means) / len(means)
    return round(value, 2)


def scheduler_gpu_pending(pod: Mapping[str, Any], resources: Iterable[str]) -> bool:
    """The scheduler found no node with enough of one of ``resources`` for this Pod."""
    cond = find_condition((pod.get("status") or {}).get("conditions"), "PodScheduled")
    if not cond or cond.get("status") != "False" or cond.get("reason") != "Unschedulable":
        return False
    msg = str(cond.get("message") or "").lower()
    return any(f"insufficient {r.lower()}" in msg for r in resources)


def kueue_gpu_pending(workload: Mapping[str, Any] | None, resources: Iterable[str]) -> bool:
    """Kueue has not reserved quota and says a GPU resource is what is missing."""
    if workload is None:
        return False
    cond = find_condition((workload.get("status") or {}).get("conditions"), "QuotaReserved")
    if not cond or cond.get("status") != "False":
        return False
    msg = str(cond.get("message") or "").lower()
    return any(r.lower() in msg for r in resources)


@dataclass
class Observation:
    """What the runnable saw of one record's workload in this pass."""

    pods: list[Mapping[str, Any]] = field(default_factory=list)  # the workload's live Pods
    gpus: dict[str, int] = field(default_factory=dict)  # their GPUs (or the template's when none)
    kueue_pending: bool = False
    owner_gone: bool = False
    scrape_ok: bool = False
    samples: dict[str, dict[str, float]] = field(default_factory=dict)  # pod name -> gpu -> percent


def _running(pods: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]


def phase_of(previous: str, obs: Observation, settings: Settings, resources: Iterable[str]) -> tuple[str, float | None, bool]:
    """(phase, aggregated utilisation, evidence): evidence is True when every running Pod of the
    workload has a sample in this pass's scrape.

    Differs from upstream on purpose: upstream counts a running workload without samples as 0%
    (Idle), so an exporter outage makes every tracked workload reclaimable. Here Idle needs fresh
    samples; without them an Idle workload stays Idle (its clock is kept) but is not reclaimed in
    this pass, and any other workload is Active.
    """
    if obs.owner_gone:
        return DELETED, None, False
    pending = [p for p in obs.pods if (p.get("status") or {}).get("phase") == "Pending"]
    if obs.kueue_pending or any(scheduler_gpu_pending(p, resources) for p in pending):
        return PENDING_GPU, None, False
    running = _running(obs.pods)
    if not running:
        return PENDING_OTHER, None, False  # image pulls, volumes, init containers, or no Pods (yet)
    names = [(p.get("metadata") or {}).get("name") or "" for p in running]
    evidence = obs.scrape_ok and all(obs.samples.get(n) for n in names)
    value = aggregate({n: obs.samples.get(n) or {} for n in names}, settings.aggregation)
    if not evidence:
        return (IDLE if previous == IDLE else ACTIVE), value, False
    assert value is not None
    return (IDLE if value < settings.threshold else ACTIVE), value, True


@dataclass(frozen=True)
class Candidate:
    """A record as the global decision sees it after this pass's observation."""

    name: str  # namespace/name
    phase: str
    gpus: Mapping[str, int]
    settings: Settings
    created: str = ""
    idle_since: datetime | None = None
    evidence: bool = False
    preempted_for: str = ""
    preempted_at: datetime | None = None


@dataclass(frozen=True)
class Victim:
    name: str
    reason: str
    preempted_for: str = ""


def _reclaimable(c: Candidate, now: datetime) -> bool:
    return c.phase == IDLE and c.evidence and c.idle_since is not None and now - c.idle_since >= c.settings.grace_period


def _freeing_for(c: Candidate, pending: str, now: datetime) -> bool:
    if c.preempted_for != pending:
        return False
    return c.phase == PREEMPTING or (c.phase == PREEMPTED and c.preempted_at is not None and now - c.preempted_at < SETTLE)


def choose(candidates: Sequence[Candidate], now: datetime) -> list[Victim]:
    """What to reclaim now.

    * ``Always``: every workload idle past its grace period (with fresh samples).
    * ``OnPressure``: for each GPU resource name, pending workloads oldest first; each one's
      demand, less what is being or was just freed for it (Preempting, or Preempted within
      ``SETTLE``, with preemptedFor naming it) and what
      the Always victims and unassigned Preempting workloads free, is covered by idle workloads
      oldest-idle first, only as many as needed, and only when they cover all of it.
    """
    victims = [
        Victim(c.name, f"Policy is Always and the workload has been idle for more than {c.settings.grace_period}")
        for c in candidates if c.settings.policy == "Always" and _reclaimable(c, now)
    ]
    claimed = {v.name for v in victims}
    resources = sorted({r for c in candidates if c.phase == PENDING_GPU for r in c.gpus})
    for res in resources:
        freed = sum(c.gpus.get(res, 0) for c in candidates if c.name in claimed or (c.phase == PREEMPTING and not c.preempted_for))
        pending = sorted((c for c in candidates if c.phase == PENDING_GPU and c.gpus.get(res, 0) > 0), key=lambda c: (c.created, c.name))
        pool = sorted(
            (c for c in candidates if c.settings.policy == "OnPressure" and c.gpus.get(res, 0) > 0 and _reclaimable(c, now)),
            key=lambda c: (c.idle_since, c.name),
        )
        for p in pending:
            demand = p.gpus[res] - sum(c.gpus.get(res, 0) for c in candidates if _freeing_for(c, p.name, now))
            used = min(freed, max(demand, 0))
            freed, demand = freed - used, demand - used
            if demand <= 0:
                continue
            chosen, total = [], 0
            for c in pool:
                if c.name in claimed:
                    continue
                chosen.append(c)
                total += c.gpus[res]
                if total >= demand:
                    break
            if total < demand:
                continue  # all or nothing: a partial reclaim frees GPUs nobody can use
            freed += total - demand
            for c in chosen:
                claimed.add(c.name)
                victims.append(Victim(c.name, f"GPU pressure: pending workload {p.name} needs {demand} {res}", p.name))
    return victims


__all__ = [
    "METRICS",
    "Candidate",
    "Observation",
    "Victim",
    "aggregate",
    "choose",
    "kueue_gpu_pending",
    "parse_activity",
    "phase_of",
    "scheduler_gpu_pending",
]
