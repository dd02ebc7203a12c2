"""Wiring of the KaiwoJob and KaiwoService controllers: which events reach
which workload (predicates and map functions) and :func:`setup`.

One generic :class:`~.reconciler.WorkloadReconciler` per kind in
:data:`~.kinds.WORKLOAD_KINDS`, all reading the same
:class:`~.caches.SharedCaches`. Owned children are watched through their
controller owner reference as their :class:`~.kinds.ChildSpec` says.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kaiwo_ctrl.runtime.handler import Request
from kaiwo_ctrl.runtime.informer import Informer
from kaiwo_ctrl.runtime.manager import Manager
from kaiwo_ctrl.runtime.objpath import meta as _meta
from kaiwo_ctrl.runtime.predicate import FieldsChanged, Predicate, ResourceVersionChanged

from .caches import IDX_DURATION_RUNNING, IDX_ERROR, IMAGE_ENV, QueueConfigMissing, SharedCaches, trim_pod
from .kinds import GROUP, OWNS, WORKLOAD_KINDS
from .labels import LABEL_MANAGED, LABEL_NAME, LABEL_TYPE, TYPE_SERVICE
from .reconciler import LocalQueueError, WorkloadReconciler

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


class _NotOurStatusWrite(Predicate):
    """Drops the update event of the version our own status write produced:
    the pass that wrote it already acted on that status (children applied,
    requeue scheduled), so reconciling it again could only confirm it."""

    def __init__(self, shared: SharedCaches, kind: str) -> None:
        self.shared, self.kind = shared, kind

    def update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
        meta = _meta(new)
        key = (self.kind, meta.get("namespace") or "", meta.get("name") or "")
        return not self.shared.expectations.own_status_event(key, old, new)


class _ConditionsChanged(Predicate):
    def update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
        return (old.get("status") or {}).get("conditions") != (new.get("status") or {}).get("conditions")


def _map_to_running_with_duration(inf: Informer):
    def fn(_obj: Any) -> Iterable[Request]:
        return [Request.of(o) for o in inf.by_index(IDX_DURATION_RUNNING, "y")]

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


def _workload_owner(kind: str, shared: SharedCaches):
    """Kueue Workload -> the Kaiwo workload whose underlying object owns it."""
    # Kueue owns the Workload of a Job/RayJob/AppWrapper (a Deployment's pods have their own)
    main_kinds = {c.kind for c in WORKLOAD_KINDS[kind].children if c.main and c.kind != "Deployment"}

    def fn(obj: Mapping[str, Any]) -> Iterable[Request]:
        meta = _meta(obj)
        ns = meta.get("namespace") or ""
        out = []
        for ref in meta.get("ownerReferences") or ():
            rk = ref.get("kind")
            if rk in main_kinds:
                out.append(Request(ns, ref.get("name")))
            elif rk == "Pod" and kind == "KaiwoService":
                pod = shared.pods.get(ref.get("name"), ns)
                labels = _meta(pod).get("labels") or {}
                if pod is not None and labels.get(LABEL_TYPE) == TYPE_SERVICE and labels.get(LABEL_NAME):
                    out.append(Request(ns, labels[LABEL_NAME]))
        return out

    return fn


def _adopted_job_owner(obj: Mapping[str, Any]) -> Iterable[Request]:
    """A Kaiwo-managed Job no KaiwoJob controls (adopted through the webhook,
    §16) -> the KaiwoJob of the same name, which follows its status."""
    meta = _meta(obj)
    labels = meta.get("labels") or {}
    if labels.get(LABEL_MANAGED) != "true" and not labels.get(LABEL_NAME):
        return []
    if any(ref.get("controller") and ref.get("kind") == "KaiwoJob" for ref in meta.get("ownerReferences") or ()):
        return []  # owned: EnqueueOwner handles it
    return [Request(meta.get("namespace") or "", meta.get("name") or "")]


def _pod_owner(obj: Mapping[str, Any]) -> Iterable[Request]:
    labels = _meta(obj).get("labels") or {}
    if labels.get(LABEL_TYPE) == TYPE_SERVICE and labels.get(LABEL_NAME):
        return [Request(_meta(obj).get("namespace") or "", labels[LABEL_NAME])]
    return []


def _ray_service_owner(obj: Mapping[str, Any]) -> Iterable[Request]:
    meta = _meta(obj)
    for ref in meta.get("ownerReferences") or ():
        if ref.get("kind") == "AppWrapper":
            return [Request(meta.get("namespace") or "", ref.get("name"))]
    return []


def setup(
    mgr: Manager,
    *,
    workers: int = 16,
    tracer: Any = None,
    downloader_image: str | None = None,
    rate_limiter: Callable[[], Any] | None = None,
) -> dict[str, WorkloadReconciler]:
    """Register the KaiwoJob and KaiwoService controllers on ``mgr``.
    ``rate_limiter`` makes each controller's retry rate limiter (tests use
    short delays); the runtime default otherwise."""
    shared = SharedCaches(mgr, downloader_image)
    out: dict[str, WorkloadReconciler] = {}
    status_changed = [_ChildStatusChanged()]
    for kind, spec in WORKLOAD_KINDS.items():
        rec = WorkloadReconciler(mgr, kind, shared)
        ctl = mgr.new_controller(
            spec.controller_name, rec, workers=workers, tracer=tracer, rate_limiter=rate_limiter() if rate_limiter else None
        )
        ctl.for_(shared.own[kind], predicates=[ResourceVersionChanged(), _NotOurStatusWrite(shared, kind)])
        for child_kind in dict.fromkeys(c.kind for c in spec.children if c.watch == OWNS):
            ctl.owns(shared.children[child_kind], GROUP, kind, predicates=status_changed)
        if kind == "KaiwoJob":
            ctl.watches(shared.children["Job"], _adopted_job_owner, predicates=status_changed)
        else:
            ctl.watches(shared.children["RayService"], _ray_service_owner, predicates=[ResourceVersionChanged()])
            ctl.watches(shared.pods, _pod_owner, predicates=[_NoUpdates()])
        ctl.watches(shared.workloads, _workload_owner(kind, shared), predicates=[_ConditionsChanged()])
        for other in WORKLOAD_KINDS:
            if other != kind:  # a workload's change may free or claim GPUs: duration candidates look again
                ctl.watches(
                    shared.own[other], _map_to_running_with_duration(shared.own[kind]), predicates=[ResourceVersionChanged()]
                )
        # ERROR is re-evaluated when what it depends on changes: the queue
        # config, KaiwoConfig, node GPU capacity
        in_error = _map_to_in_error(shared.own[kind])
        ctl.watches(shared.queue_configs, in_error, predicates=[ResourceVersionChanged()])
        ctl.watches(shared.settings.informer, in_error, predicates=[ResourceVersionChanged()])
        ctl.watches(shared.nodes, in_error, predicates=[FieldsChanged(_node_capacity)])
        out[kind] = rec
    return out


class _NoUpdates(Predicate):
    def update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
        return _meta(old).get("deletionTimestamp") != _meta(new).get("deletionTimestamp")


