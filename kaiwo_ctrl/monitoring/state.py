"""Series computed at scrape time from the informer caches (no API calls):
what the dashboards and alerts of config/monitoring show about objects.

* ``kaiwo_workloads{kind,status}`` -- KaiwoJobs and KaiwoServices by
  ``status.status`` (a value outside the known phases counts as ``OTHER``, an
  empty one as ``NEW``, so a hand-written status cannot add series);
* ``kaiwo_gpu_workload_pending_seconds{kind,namespace}`` -- age of the oldest
  PENDING workload that asks for GPUs, per namespace;
* ``kaiwo_model_replicas{model_namespace,model_name,state}`` -- a Model's
  desired (``spec.replicas``, what the autoscaler sets), all and ready replicas.

The caches fill on every replica; a replica whose caches have not synced yet
reports fewer objects, so dashboards take the ``max`` over replicas.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime
from typing import Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from api.kaiwo.v1alpha1 import Status
from kaiwo_ctrl.kinds import KAIWOJOBS, KAIWOSERVICES, MODELS
from kaiwo_ctrl.runtime.manager.manager import Manager

PHASES = frozenset(s.value for s in Status if s.value)


def phase(obj: Mapping[str, Any]) -> str:
    value = (obj.get("status") or {}).get("status") or ""
    if not isinstance(value, str) or not value:
        return "NEW"
    return value if value in PHASES else "OTHER"


def wants_gpus(obj: Mapping[str, Any]) -> bool:
    spec = obj.get("spec") or {}
    for key in ("gpus", "gpusPerReplica"):
        v = spec.get(key)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return True
    return False


def created_at(obj: Mapping[str, Any]) -> float | None:
    stamp = (obj.get("metadata") or {}).get("creationTimestamp")
    try:
        return datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def workload_families(objects: Mapping[str, Iterable[Mapping[str, Any]]], now: float) -> list[GaugeMetricFamily]:
    """``objects``: kind -> the cached objects of that kind."""
    counts = GaugeMetricFamily("kaiwo_workloads", "KaiwoJobs and KaiwoServices by status.status", labels=["kind", "status"])
    pending = GaugeMetricFamily(
        "kaiwo_gpu_workload_pending_seconds",
        "Age of the oldest PENDING workload that asks for GPUs, per namespace", labels=["kind", "namespace"],
    )
    oldest: dict[tuple[str, str], float] = {}
    for kind, items in objects.items():
        by_phase: Counter[str] = Counter({p: 0 for p in ("PENDING", "RUNNING", "READY", "COMPLETE", "FAILED", "ERROR")})
        for obj in items:
            p = phase(obj)
            by_phase[p] += 1
            born = created_at(obj)
            if p == "PENDING" and born is not None and wants_gpus(obj):
                key = (kind, (obj.get("metadata") or {}).get("namespace") or "")
                oldest[key] = max(oldest.get(key, 0.0), now - born)
        for p, n in sorted(by_phase.items()):
            counts.add_metric([kind, p], n)
    for (kind, ns), age in sorted(oldest.items()):
        pending.add_metric([kind, ns], max(age, 0.0))
    return [counts, pending]


def model_family(models: Iterable[Mapping[str, Any]]) -> GaugeMetricFamily:
    fam = GaugeMetricFamily(
        "kaiwo_model_replicas", "Replicas of a Model: desired (spec.replicas), all and ready (status.replicas)",
        labels=["model_namespace", "model_name", "state"],
    )
    for m in models:
        md = m.get("metadata") or {}
        ns, name = md.get("namespace") or "", md.get("name") or ""
        replicas = (m.get("status") or {}).get("replicas") or {}
        values = {"desired": (m.get("spec") or {}).get("replicas"), "all": replicas.get("all"), "ready": replicas.get("ready")}
        for state, v in values.items():
            fam.add_metric([ns, name, state], float(v) if isinstance(v, int) and not isinstance(v, bool) else 0.0)
    return fam


class StateCollector(Collector):
    def __init__(self, lists: Mapping[str, Callable[[], list[Any]]], models: Callable[[], list[Any]],
                 clock: Callable[[], float] = time.time) -> None:
        self.lists, self.models, self.clock = lists, models, clock

    def describe(self) -> list[GaugeMetricFamily]:
        return workload_families({}, 0.0) + [model_family([])]  # names only, without reading the caches

    def collect(self) -> Iterator[GaugeMetricFamily]:
        yield from workload_families({kind: fn() for kind, fn in self.lists.items()}, self.clock())
        yield model_family(self.models())


def setup(mgr: Manager) -> StateCollector:
    """Register the collector in the manager's registry over the shared informers."""
    jobs, services, models = (mgr.cache.informer(r) for r in (KAIWOJOBS, KAIWOSERVICES, MODELS))
    collector = StateCollector({"KaiwoJob": jobs.list, "KaiwoService": services.list}, models.list)
    mgr.metrics.registry.register(collector)
    return collector
