"""Wiring of the KaiwoJob and KaiwoService controllers: which events reach
which workload (predicates and map functions) and :func:`setup`.

One generic :class:`~.reconciler.WorkloadReconciler` per kind in
:data:`~kaiwo_ctrl.workloads.kinds.WORKLOAD_KINDS`, all reading the same
:class:`~.caches.SharedCaches`. Owned children are watched through their
controller owner reference as their :class:`~kaiwo_ctrl.workloads.kinds.ChildSpec` says.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kaiwo_ctrl.runtime.cache.informer import Informer
from kaiwo_ctrl.runtime.control.handler import Request
from kaiwo_ctrl.runtime.control.predicate import AnnotationsChanged, FieldsChanged, GenerationChanged, Predicate, ResourceVersionChanged
from kaiwo_ctrl.runtime.manager.manager import Manager
from kaiwo_ctrl.runtime.objects.objpath import meta as _meta
from kaiwo_ctrl.settings.environment import IMAGE_ENV

from ..base.labels import LABEL_NAME, LABEL_TYPE, TYPE_SERVICE
from ..kinds import GROUP, OWNS, OWNS_ANY, WORKLOAD_KINDS, WorkloadKind
from ..kinds.mapping import service_pod_owner
from ..observe.undecodable import reporter as skipped_reporter
from .caches import IDX_DURATION_RUNNING, IDX_ERROR, QueueConfigMissing, SharedCaches, trim_pod
from .reconciler import LocalQueueError, WorkloadReconciler
from .sweep import RUNNABLE as SWEEP_RUNNABLE
from .sweep import Sweeper

__all__ = [
    "IMAGE_ENV",
    "LocalQueueError",
    "QueueConfigMissing",
    "SharedCaches",
    "WorkloadReconciler",
    "setup",
    "trim_pod",
]


class _ChildStatusChanged(Predicate):
    """Owned children: creates are ignored (we made them), updates pass when
    the status or the generation moved, deletes pass."""

    def create(self, obj: Mapping[str, Any]) -> bool:
        return False

    def update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
        return (
            old.get("status") != new.get("status")
            or _meta(old).get("generation") != _meta(new).get("generation")
            or _meta(old).get("deletionTimestamp") != _meta(new).get("deletionTimestamp")
        )


class _ConditionsChanged(Predicate):
    def update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
        return (old.get("status") or {}).get("conditions") != (new.get("status") or {}).get("conditions")


def _map_to_running_with_duration(inf: Informer):
    def fn(_obj: Any) -> Iterable[Request]:
        return [Request.of(o) for o in inf.by_index(IDX_DURATION_RUNNING, "y")]

    return fn


def _namespace_members(inf: Informer):
    def fn(obj: Any) -> Iterable[Request]:
        return [Request.of(o) for o in inf.list(_meta(obj).get("namespace") or "")]

    return fn


def _namespace_named(inf: Informer):
    def fn(obj: Any) -> Iterable[Request]:
        return [Request.of(o) for o in inf.list(_meta(obj).get("name") or "")]

    return fn


def _map_to_in_error(inf: Informer):
    def fn(_obj: Any) -> Iterable[Request]:
        return [Request.of(o) for o in inf.by_index(IDX_ERROR, "y")]

    return fn


def _node_capacity(node: Mapping[str, Any]) -> Any:
    """What of a Node the GPU statistics read (heartbeats change none of it)."""
    return (
        _meta(node).get("labels"),
        (node.get("spec") or {}).get("unschedulable"),
        (node.get("status") or {}).get("allocatable"),
    )


def _workload_owner(spec: WorkloadKind, shared: SharedCaches):
    """Kueue Workload -> the Kaiwo workload whose underlying object owns it
    (Kueue owns the Workload of a Job/RayJob/AppWrapper; for a kind whose
    Deployment pods have their own, the pod's workload)."""
    main_kinds = {c.kind for c in spec.children if c.main and c.kind != "Deployment"}

    def fn(obj: Mapping[str, Any]) -> Iterable[Request]:
        meta = _meta(obj)
        ns = meta.get("namespace") or ""
        out = []
        for ref in meta.get("ownerReferences") or ():
            rk = ref.get("kind")
            if rk in main_kinds:
                out.append(Request(ns, ref.get("name")))
            elif rk == "Pod" and spec.pod_workloads:
                pod = shared.pods.get(ref.get("name"), ns)
                labels = _meta(pod).get("labels") or {}
                if pod is not None and labels.get(LABEL_TYPE) == TYPE_SERVICE and labels.get(LABEL_NAME):
                    out.append(Request(ns, labels[LABEL_NAME]))
        return out

    return fn


def _watch_children(ctl: Any, spec: WorkloadKind, shared: SharedCaches) -> None:
    """Each child as its ``ChildSpec.watch`` says (one watch per child kind)."""
    status_changed = [_ChildStatusChanged()]
    seen: set[tuple[str, object]] = set()
    for c in spec.children:
        inf = shared.children[c.kind]
        if c.adopted is not None:
            ctl.watches(inf, c.adopted, predicates=status_changed)
        key = (c.kind, c.watch or "")
        if key in seen:
            continue
        seen.add(key)
        if c.watch == OWNS:
            ctl.owns(inf, GROUP, spec.kind, predicates=status_changed)
        elif c.watch == OWNS_ANY:
            ctl.owns(inf, GROUP, spec.kind, predicates=[ResourceVersionChanged()])
        elif callable(c.watch):
            ctl.watches(inf, c.watch, predicates=[ResourceVersionChanged()])
    if spec.pod_workloads:
        ctl.watches(shared.pods, service_pod_owner(shared.own[spec.kind]), predicates=[_NoUpdates()])


def setup(
    mgr: Manager,
    *,
    workers: int = 16,
    tracer: Any = None,
    downloader_image: str | None = None,
    download_deadline_seconds: int | None = None,
    rate_limiter: Callable[[], Any] | None = None,
    kinds: Iterable[WorkloadKind] | None = None,
) -> dict[str, WorkloadReconciler]:
    """Register one controller per workload kind (default: KaiwoJob and
    KaiwoService) on ``mgr``, plus the duration sweep. ``rate_limiter`` makes
    each controller's retry rate limiter (tests use short delays); the
    runtime default otherwise. ``downloader_image`` and
    ``download_deadline_seconds`` default to the operator's environment
    (:mod:`kaiwo_ctrl.settings.environment`)."""
    specs = tuple(WORKLOAD_KINDS.values() if kinds is None else kinds)
    shared = SharedCaches(mgr, downloader_image, specs, download_deadline_seconds=download_deadline_seconds)
    sweeper = Sweeper(mgr, shared, {k.kind: k.controller_name for k in specs})
    mgr.add_runnable(SWEEP_RUNNABLE, sweeper.run, leader=True)
    out: dict[str, WorkloadReconciler] = {}
    for spec in specs:
        kind = spec.kind
        rec = WorkloadReconciler(mgr, spec, shared, sweeper)
        ctl = mgr.new_controller(
            spec.controller_name, rec, workers=workers, tracer=tracer, rate_limiter=rate_limiter() if rate_limiter else None
        )
        ctl.for_(shared.own[kind], predicates=[ResourceVersionChanged(), shared.expectations.echo_filter(kind)])
        shared.own[kind].add_handler(skipped_reporter(mgr, kind))  # too deep to cache: ERROR naming the field
        _watch_children(ctl, spec, shared)
        ctl.watches(shared.workloads, _workload_owner(spec, shared), predicates=[_ConditionsChanged()])
        for other in specs:
            if other.kind != kind:  # a workload's change may free or claim GPUs: duration candidates look again
                ctl.watches(
                    shared.own[other.kind], _map_to_running_with_duration(shared.own[kind]), predicates=[ResourceVersionChanged()]
                )
        # ERROR is re-evaluated when what it depends on changes: the queue
        # config, KaiwoConfig, node GPU capacity
        in_error = _map_to_in_error(shared.own[kind])
        ctl.watches(shared.queue_configs, in_error, predicates=[ResourceVersionChanged()])
        ctl.watches(shared.settings.informer, in_error, predicates=[ResourceVersionChanged()])
        ctl.watches(shared.nodes, in_error, predicates=[FieldsChanged(_node_capacity)])
        # credentials and pull secrets of the namespace's AIMNamespaceConfig reach its workloads live
        ctl.watches(shared.aim_configs, _namespace_members(shared.own[kind]), predicates=[GenerationChanged()])
        # the namespace's priority-class allow-list (an admin's annotation)
        ctl.watches(shared.priority.namespaces, _namespace_named(shared.own[kind]), predicates=[AnnotationsChanged()])
        out[kind] = rec
    return out


class _NoUpdates(Predicate):
    def update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
        return _meta(old).get("deletionTimestamp") != _meta(new).get("deletionTimestamp")
