"""The KaiwoJob and KaiwoService reconcilers on the runtime (§5, §11, §12, §13, §17).

One :class:`WorkloadReconciler` per Kaiwo kind; both share the caches they read
(:class:`SharedCaches`). A reconcile reads only the caches, builds the
:class:`~kaiwo_ctrl.workloads.world.World`, computes the desired children and
the observed status with the pure functions of this package, and writes only
what differs:

* the status, via a merge patch of the status subresource guarded by the
  object's resourceVersion, when :func:`observe` returns something new;
* each child while the status is active (§5.7): created when absent, else
  updated (PUT of the cached object with our fields merged in, resourceVersion
  guarded) when it does not already contain what we want. Paths the API server
  or the owning controller will not change (``IMMUTABLE_PATHS``) and fields
  other controllers own (``OWNED_BY_OTHERS``: ``spec.suspend`` under Kueue) are
  never sent; immutable drift becomes condition ``SpecChangeNotApplied``.

The status write and the children apply happen in the same pass, sent
together (the reference created children only on the pass after a status
write; the outcome is the same, with half the reconciles). The watch event of
our own status write is not reconciled again (:class:`_NotOurStatusWrite`);
when the written status itself leads further (RUNNING -> ``Preemptable``
from ``startTime``) the pass requeues at once instead.

Problems are reported on the workload, never by crashing: spec errors and an
unschedulable request are ERROR conditions from :func:`observe`; a child the
API server refuses to create puts the workload in ERROR with
``SpecValid=False/ChildRejected`` (the server's message names the field); a
change it refuses on an existing child joins ``SpecChangeNotApplied``. Each
comes with a Warning event. ERROR workloads are re-evaluated when the queue
config, KaiwoConfig or node GPU capacity change.

Caches lag behind our own writes by one watch event. To keep a reconcile that
runs before the event arrives from writing the same thing again, the objects
the API server returned for our writes are kept (:class:`RecentWrites`) and
used instead of the cached copy until the cache moves past the version we
wrote over.

Note: ConfigMaps are watched cluster-wide with a transform that keeps only the
metadata of ConfigMaps no Kaiwo workload owns (memory); Pods are watched only
with the ``kaiwo.silogen.ai/run-id`` label and trimmed, Kueue Workloads trimmed
to owner, job-uid label and conditions.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timezone
from typing import Any

from pydantic import ValidationError

from kaiwo_ctrl.kinds import (
    APPWRAPPERS,
    CLUSTERQUEUES,
    KAIWOJOBS,
    KAIWOQUEUECONFIGS,
    KAIWOSERVICES,
    LOCALQUEUES,
    RAYJOBS,
    RAYSERVICES,
    WORKLOADPRIORITYCLASSES,
    WORKLOADS,
)
from kaiwo_ctrl.nodes import node_informer
from kaiwo_ctrl.quantity import QuantityError, parse_quantity
from kaiwo_ctrl.queues.constants import QUEUE_CONFIG_NAME
from kaiwo_ctrl.queues.localqueue import create_local_queue, resolve_local_queue
from kaiwo_ctrl.runtime.apply import contains, differing_paths
from kaiwo_ctrl.runtime.client import ApiError, Resource
from kaiwo_ctrl.runtime.conditions import find_condition, set_condition
from kaiwo_ctrl.runtime.controller import Result
from kaiwo_ctrl.runtime.handler import Request
from kaiwo_ctrl.runtime.informer import Informer, strip_managed_fields
from kaiwo_ctrl.runtime.manager import Manager
from kaiwo_ctrl.runtime.predicate import FieldsChanged, Predicate, ResourceVersionChanged
from kaiwo_ctrl.runtime.resources import CONFIGMAPS, DEPLOYMENTS, JOBS, PODS, PRIORITYCLASSES, PVCS
from kaiwo_ctrl.runtime.store import OWNER_UID_INDEX, index_by_label
from kaiwo_ctrl.settings import ConfigMissing, settings_for

from .childstatus import ACTIVE, ERROR, PENDING, TERMINAL, TERMINATED, TERMINATING, UP
from .desired import MAIN_KINDS, desired_children
from .drift import IMMUTABLE_PATHS, OWNED_BY_OTHERS, immutable_drift, is_controlled_by
from .kaiwoobject import KaiwoObject
from .labels import LABEL_KUEUE_JOB_UID, LABEL_MANAGED, LABEL_NAME, LABEL_RUN_ID, LABEL_TYPE, TYPE_SERVICE
from .naming import name_with_suffix
from .status import (
    PREEMPTABLE,
    SCHEDULABLE,
    SPEC_CHANGE_NOT_APPLIED,
    SPEC_VALID,
    ObservedChildren,
    download_succeeded,
    has_gpu_demand,
    observe,
    requeue_after,
    status_events,
    sweep_expired,
)
from .validation import SpecError
from .world import DEFAULT_DOWNLOADER_IMAGE, World

log = logging.getLogger("kaiwo_ctrl.workloads.controller")

IMAGE_ENV = "KAIWO_CTRL_IMAGE"
GROUP = "kaiwo.silogen.ai"

#: Resource of every child kind the reconcilers create or read.
CHILD_RESOURCES: dict[str, Resource] = {
    "PersistentVolumeClaim": PVCS,
    "ConfigMap": CONFIGMAPS,
    "Job": JOBS,
    "RayJob": RAYJOBS,
    "Deployment": DEPLOYMENTS,
    "AppWrapper": APPWRAPPERS,
    "RayService": RAYSERVICES,
    "LocalQueue": LOCALQUEUES,
}
OWN_RESOURCES = {"KaiwoJob": KAIWOJOBS, "KaiwoService": KAIWOSERVICES}
COMPONENTS = {"KaiwoJob": "kaiwojob-controller", "KaiwoService": "kaiwoservice-controller"}
#: Kinds §13 deletes on termination (controller-owned by the workload).
TERMINATION_KINDS = ("Deployment", "RayService", "AppWrapper", "Job", "RayJob", "PersistentVolumeClaim")

# Indexes on the KaiwoJob / KaiwoService informers (cheap dict checks, so
# the cluster-wide scans of §5.1, §12.2 and §12.3 never parse every object).
IDX_DURATION_RUNNING = "kaiwo-duration-running"
IDX_PENDING_GPU = "kaiwo-pending-gpu"
IDX_UP_PREEMPTABLE = "kaiwo-up-preemptable"
IDX_ERROR = "kaiwo-error"
IDX_RUN_ID = "kaiwo-run-id"
IDX_JOB_UID = "kueue-job-uid"


class QueueConfigMissing(RuntimeError):
    """KaiwoQueueConfig ``kaiwo`` is not in the cache (retried with backoff)."""


class _Gone(Exception):
    """The workload disappeared under a write (stop quietly)."""


class LocalQueueError(RuntimeError):
    """§5.8: the LocalQueue the workload needs cannot be ensured (reconcile fails)."""


# --------------------------------------------------------------------------- small helpers


def _meta(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return (obj or {}).get("metadata") or {}


def _rv(obj: Mapping[str, Any] | None) -> str | None:
    return _meta(obj).get("resourceVersion") if obj is not None else None


def _status_of(obj: Mapping[str, Any]) -> str:
    return ((obj.get("status") or {}).get("status")) or ""


def _idx_duration_running(obj: Mapping[str, Any]) -> list[str]:
    return ["y"] if (obj.get("spec") or {}).get("duration") and _status_of(obj) == "RUNNING" else []


def _idx_pending_gpu(obj: Mapping[str, Any]) -> list[str]:
    spec = obj.get("spec") or {}
    try:
        gpus = int(spec.get("gpus") or 0)
    except (TypeError, ValueError):
        gpus = 0
    return ["y"] if _status_of(obj) == PENDING and gpus > 0 else []


def _terminated_early(obj: Mapping[str, Any]) -> bool:
    """TERMINATED through §13 (not a stopped RayJob, whose children stay)."""
    cond = find_condition((obj.get("status") or {}).get("conditions"), "WorkloadTerminatedEarly")
    return bool(cond and cond.get("status") == "True")


def _idx_error(obj: Mapping[str, Any]) -> list[str]:
    return ["y"] if _status_of(obj) == ERROR else []


def _idx_up_preemptable(obj: Mapping[str, Any]) -> list[str]:
    if _status_of(obj) not in UP:
        return []
    cond = find_condition((obj.get("status") or {}).get("conditions"), PREEMPTABLE)
    return ["y"] if cond and cond.get("status") == "True" else []


def trim_pod(obj: dict) -> dict:
    """Pods: only what maps a pod to its workload and its Kueue Workload."""
    meta = obj.get("metadata") or {}
    keep = {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion", "labels", "ownerReferences", "deletionTimestamp") if k in meta}
    return {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"), "metadata": keep}


def trim_workload(obj: dict) -> dict:
    """Kueue Workloads: owner, job-uid label and the conditions (admission)."""
    meta = obj.get("metadata") or {}
    keep = {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion", "ownerReferences") if k in meta}
    labels = meta.get("labels") or {}
    if LABEL_KUEUE_JOB_UID in labels:
        keep["labels"] = {LABEL_KUEUE_JOB_UID: labels[LABEL_KUEUE_JOB_UID]}
    out = {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"), "metadata": keep}
    conditions = (obj.get("status") or {}).get("conditions")
    if conditions:
        out["status"] = {"conditions": conditions}
    return out


def _owned_by_kaiwo(obj: Mapping[str, Any]) -> bool:
    for ref in _meta(obj).get("ownerReferences") or ():
        if ref.get("kind") in OWN_RESOURCES and str(ref.get("apiVersion", "")).startswith(GROUP + "/"):
            return True
    return False


def trim_configmap(obj: dict) -> dict:
    """ConfigMaps are watched cluster-wide for the download ConfigMap: keep
    only the metadata of those no Kaiwo workload owns."""
    strip_managed_fields(obj)
    if _owned_by_kaiwo(obj):
        return obj
    meta = obj.get("metadata") or {}
    keep = {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion", "ownerReferences") if k in meta}
    return {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"), "metadata": keep}


def _informer(mgr: Manager, res: Resource, *, transform=None, label_selector: str | None = None, indexers=None) -> Informer:
    """Ask the shared cache; fall back to the default transform when another
    controller already registered its own for this kind."""
    try:
        return mgr.cache.informer(res, transform=transform, label_selector=label_selector, indexers=indexers)
    except ValueError:
        return mgr.cache.informer(res, label_selector=label_selector, indexers=indexers)


class _Bump:
    """Informer handler that counts changes (invalidates the cached World)."""

    def __init__(self, owner: "SharedCaches") -> None:
        self.owner = owner

    def on_add(self, obj: Any, initial: bool) -> None:
        self.owner.world_version += 1

    def on_update(self, old: Any, new: Any) -> None:
        if _rv(old) != _rv(new):
            self.owner.world_version += 1

    def on_delete(self, obj: Any, tombstone: bool) -> None:
        self.owner.world_version += 1


class RecentWrites:
    """Read-your-writes over a lagging cache.

    ``put(key, base_rv, obj)`` records the object the API server returned for
    a write made over the version ``base_rv`` (``None`` for a create).
    ``view(key, cached)`` answers ``obj`` while the cache still holds
    ``base_rv``; once the cache shows anything else the entry is dropped.
    Entries expire after ``ttl`` seconds in case the cache never catches up
    (the object was deleted again before we saw it).
    """

    def __init__(self, ttl: float = 30.0) -> None:
        self.ttl = ttl
        self._m: dict[tuple[str, str, str], tuple[str | None, dict, float]] = {}

    def put(self, key: tuple[str, str, str], base_rv: str | None, obj: dict) -> None:
        self._m[key] = (base_rv, strip_managed_fields(obj), time.monotonic())
        if len(self._m) > 20000:
            self._expire()

    def view(self, key: tuple[str, str, str], cached: dict | None) -> dict | None:
        entry = self._m.get(key)
        if entry is None:
            return cached
        base_rv, obj, at = entry
        if _rv(cached) == base_rv and time.monotonic() - at < self.ttl:
            return obj
        del self._m[key]
        return cached

    def _expire(self) -> None:
        now = time.monotonic()
        for k in [k for k, (_, _, at) in self._m.items() if now - at >= self.ttl]:
            del self._m[k]

    def __len__(self) -> int:
        return len(self._m)


# --------------------------------------------------------------------------- shared caches


class SharedCaches:
    """Every informer both workload reconcilers read, and the World built from them."""

    def __init__(self, mgr: Manager, downloader_image: str | None = None) -> None:
        self.mgr = mgr
        self.downloader_image = downloader_image or os.environ.get(IMAGE_ENV) or DEFAULT_DOWNLOADER_IMAGE
        self.settings = settings_for(mgr)
        own_indexers = {
            IDX_DURATION_RUNNING: _idx_duration_running,
            IDX_PENDING_GPU: _idx_pending_gpu,
            IDX_UP_PREEMPTABLE: _idx_up_preemptable,
            IDX_ERROR: _idx_error,
        }
        self.own: dict[str, Informer] = {
            kind: mgr.cache.informer(res, indexers=own_indexers) for kind, res in OWN_RESOURCES.items()
        }
        self.queue_configs = mgr.cache.informer(KAIWOQUEUECONFIGS)
        self.nodes = node_informer(mgr)  # the shared, trimmed Node cache
        self.wpcs = mgr.cache.informer(WORKLOADPRIORITYCLASSES)
        self.pcs = mgr.cache.informer(PRIORITYCLASSES)
        self.cluster_queues = mgr.cache.informer(CLUSTERQUEUES)
        self.children: dict[str, Informer] = {
            "PersistentVolumeClaim": mgr.cache.informer(PVCS),
            "ConfigMap": _informer(mgr, CONFIGMAPS, transform=trim_configmap),
            "Job": mgr.cache.informer(JOBS),
            "RayJob": mgr.cache.informer(RAYJOBS),
            "Deployment": mgr.cache.informer(DEPLOYMENTS),
            "AppWrapper": mgr.cache.informer(APPWRAPPERS),
            "RayService": mgr.cache.informer(RAYSERVICES),
            "LocalQueue": mgr.cache.informer(LOCALQUEUES),
        }
        self.pods = _informer(
            mgr, PODS, transform=trim_pod, label_selector=LABEL_RUN_ID, indexers={IDX_RUN_ID: index_by_label(LABEL_RUN_ID)}
        )
        self.workloads = _informer(
            mgr, WORKLOADS, transform=trim_workload, indexers={IDX_JOB_UID: index_by_label(LABEL_KUEUE_JOB_UID)}
        )
        self.world_version = 0
        self._world: World | None = None
        self._world_key: tuple | None = None
        bump = _Bump(self)
        for inf in (self.settings.informer, self.queue_configs, self.nodes, self.wpcs, self.pcs):
            inf.add_handler(bump)
        self.recent = RecentWrites()
        #: (kind, namespace, name) -> (resourceVersion written over, status written)
        self.own_writes: dict[tuple[str, str, str], tuple[str, dict]] = {}

    def world(self) -> World:
        """The World for the current caches (rebuilt only after a change)."""
        config = self.settings.raw()
        if config is None:
            raise ConfigMissing("KaiwoConfig 'kaiwo' not found")
        qc = self.queue_configs.get(QUEUE_CONFIG_NAME)
        if qc is None:
            raise QueueConfigMissing(f"KaiwoQueueConfig {QUEUE_CONFIG_NAME!r} not found")
        key = (self.world_version, _rv(config), _rv(qc))
        if self._world is None or self._world_key != key:
            self._world = World.from_dicts(
                config=config,
                nodes=self.nodes.list(),
                queue_config=qc,
                workload_priority_classes=[_meta(o).get("name") for o in self.wpcs.list()],
                priority_classes=[_meta(o).get("name") for o in self.pcs.list()],
                downloader_image=self.downloader_image,
            )
            self._world_key = key
        return self._world

    def get(self, kind: str, namespace: str, name: str) -> dict | None:
        """A child from the cache, or what we last wrote if the cache lags."""
        cached = self.children[kind].get(name, namespace)
        return self.recent.view((kind, namespace, name), cached)

    def get_own(self, kind: str, namespace: str, name: str) -> dict | None:
        cached = self.own[kind].get(name, namespace)
        return self.recent.view((kind, namespace, name), cached)


# --------------------------------------------------------------------------- apply helpers


def _pop_path(doc: dict, path: str) -> None:
    parts = path.split(".")
    cur: Any = doc
    for p in parts[:-1]:
        if not isinstance(cur, dict):
            return
        cur = cur.get(p)
    if isinstance(cur, dict):
        cur.pop(parts[-1], None)


def _get_path(doc: Mapping[str, Any] | None, path: str) -> Any:
    cur: Any = doc
    for p in path.split("."):
        if not isinstance(cur, Mapping):
            return None
        cur = cur.get(p)
    return cur


def writable_part(kind: str, desired: Mapping[str, Any], existing: Mapping[str, Any]) -> dict:
    """``desired`` without what must not be sent to the existing child: its
    immutable paths (a larger PVC request stays: volume expansion), fields
    other controllers own, and the owner references (already verified)."""
    body = copy.deepcopy(dict(desired))
    for path in IMMUTABLE_PATHS.get(kind, ()):
        if kind == "PersistentVolumeClaim" and path.endswith("requests.storage"):
            want, have = _get_path(desired, path), _get_path(existing, path)
            try:
                if want is not None and have is not None and parse_quantity(want) >= parse_quantity(have):
                    continue
            except QuantityError:
                pass
        _pop_path(body, path)
    for path in OWNED_BY_OTHERS.get(kind, ()):
        _pop_path(body, path)
    meta = body.get("metadata") or {}
    meta.pop("ownerReferences", None)
    return body


def merge_into(existing: Mapping[str, Any], desired: Mapping[str, Any]) -> dict:
    """The existing object with ``desired`` laid over it: mappings merge key
    by key (others' keys stay), lists and scalars are replaced (so an env
    variable removed from the spec goes away)."""
    out = copy.deepcopy(dict(existing))

    def merge(dst: dict, src: Mapping[str, Any]) -> None:
        for k, v in src.items():
            if isinstance(v, Mapping) and isinstance(dst.get(k), dict):
                merge(dst[k], v)
            else:
                dst[k] = copy.deepcopy(v)

    merge(out, desired)
    return out


def _created_message(res: Resource, name: str) -> str:
    return f"Created {res.group}/{res.version}, Kind={res.kind}: {name}"


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

    def __init__(self, shared: "SharedCaches", kind: str) -> None:
        self.shared, self.kind = shared, kind

    def update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
        meta = _meta(new)
        key = (self.kind, meta.get("namespace") or "", meta.get("name") or "")
        written = self.shared.own_writes.pop(key, None)
        if written is None:
            return True
        base_rv, status = written
        ours = (
            _rv(old) == base_rv
            and new.get("status") == status
            and _meta(old).get("generation") == meta.get("generation")
            and _meta(old).get("labels") == meta.get("labels")
            and _meta(old).get("annotations") == meta.get("annotations")
            and not meta.get("deletionTimestamp")
        )
        return not ours


class _ConditionsChanged(Predicate):
    def update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
        return (old.get("status") or {}).get("conditions") != (new.get("status") or {}).get("conditions")


# --------------------------------------------------------------------------- reconciler


class WorkloadReconciler:
    """Reconciles one Kaiwo kind (``KaiwoJob`` or ``KaiwoService``)."""

    def __init__(self, mgr: Manager, kind: str, shared: SharedCaches) -> None:
        self.mgr = mgr
        self.kind = kind
        self.res = OWN_RESOURCES[kind]
        self.shared = shared
        self.client = mgr.client
        self.informer = shared.own[kind]
        self.recorder = mgr.recorder.for_component(COMPONENTS[kind])
        #: (uid, generation) -> paths the API server refused (422) on update
        #: (only the latest generation of each workload is kept)
        self.rejected: dict[tuple[str, int], dict[str, list[str]]] = {}
        #: (uid, generation) -> why the API server refused to create a child
        self.refused: dict[tuple[str, int], str] = {}

    # ------------------------------------------------------------------ entry
    async def __call__(self, req: Request) -> Result | None:
        raw = self.shared.get_own(self.kind, req.namespace, req.name)
        if raw is None:
            return None
        meta = raw["metadata"]
        if meta.get("deletionTimestamp"):
            return None  # garbage collection removes the children (§17)
        state = _status_of(raw)
        if state in TERMINAL:
            if state == TERMINATED and _terminated_early(raw):
                # §13 wrote TERMINATED first; finish deletions a failure cut short
                await self._delete_children(raw, quiet=True)
            return None
        world = self.shared.world()
        now = datetime.now(timezone.utc)
        try:
            if state == TERMINATING:
                return await self._terminate(raw, world, now)
            return await self._reconcile_active(raw, world, now)
        except _Gone:
            return None  # deleted while we were looking at it

    # ------------------------------------------------------------ active path
    async def _reconcile_active(self, raw: dict, world: World, now: datetime) -> Result | None:
        meta = raw["metadata"]
        ns, name, uid = meta.get("namespace") or "", meta["name"], meta.get("uid") or ""
        generation = meta.get("generation") or 0
        stored = raw.get("status") or {}
        try:
            ko: KaiwoObject | None = KaiwoObject.of(raw)
        except (ValidationError, ValueError):
            ko = None

        desired: list[dict] | SpecError | None = None
        children = ObservedChildren()
        workloads: list[dict] | None = None
        if ko is not None:
            desired = desired_children(ko, world, download_succeeded=download_succeeded(stored))
            objs = self._child_objects(ns, name)
            unapplied: list[str] = []
            if not isinstance(desired, SpecError):
                for d in desired:
                    ex = self.shared.get(d["kind"], ns, d["metadata"]["name"])
                    if ex is not None and is_controlled_by(ex, uid):
                        unapplied += immutable_drift(d["kind"], ex, d)
            for paths in self.rejected.get((uid, generation), {}).values():
                unapplied += paths
            gpu_demand = False
            if ko.spec.get("duration") and _status_of(raw) in UP:
                gpu_demand = has_gpu_demand(ko, self._pending_gpu_candidates(), world, now)
            children = ObservedChildren.from_objects(
                ko, objs, unapplied_fields=tuple(dict.fromkeys(unapplied)), gpu_demand=gpu_demand
            )
            workloads = self._kueue_workloads(children.main, uid)

        new = observe(self.kind, raw, world, children, workloads, now)
        refused = self.refused.get((uid, generation))
        if refused is not None and (new.get("status") or "") in ACTIVE:
            new = _refused_status(stored, new, refused, generation, now)
        status = new.get("status") or ""
        to_apply: list[dict] | None = None
        if status in ACTIVE and ko is not None:
            if download_succeeded(new) != download_succeeded(stored):
                desired = desired_children(ko, world, download_succeeded=download_succeeded(new))
            if isinstance(desired, SpecError):
                # observe reports spec problems itself; this only guards the apply
                self.recorder.warning(raw, "InvalidSpec", str(desired))
            else:
                to_apply = desired or []

        # The status write and the children apply are independent requests:
        # send them together (half the latency per workload).
        steps = []
        if new != stored:
            steps.append(self._write_status(raw, new))
        if to_apply:
            steps.append(self._apply_children(raw, ko, world, to_apply))
        results = await asyncio.gather(*steps, return_exceptions=True) if steps else []
        failures = [r for r in results if isinstance(r, BaseException)]
        if failures:
            raise next((f for f in failures if isinstance(f, _Gone)), failures[0])
        again = False
        if new != stored:
            raw = results[0]
            # The event of our own write is not reconciled (_NotOurStatusWrite),
            # so look now whether the written status leads further (e.g. RUNNING
            # -> Preemptable computed from startTime) and come back if it does.
            if refused is None:
                again = observe(self.kind, raw, world, children, workloads, now) != (raw.get("status") or {})

        if status == PENDING:
            await self._sweep(now)
        wait = None
        if status in UP and ko is not None and ko.spec.get("duration"):
            wait = requeue_after({**raw, "status": new}, now)
        if again:
            return Result(requeue_after=0.01)
        if wait is not None:
            return Result(requeue_after=max(wait.total_seconds(), 0.05))
        return None

    def _child_objects(self, ns: str, name: str) -> list[dict]:
        names = [
            ("PersistentVolumeClaim", name_with_suffix(name, "data")),
            ("PersistentVolumeClaim", name_with_suffix(name, "hf")),
            ("ConfigMap", name_with_suffix(name, "download")),
            ("Job", name_with_suffix(name, "download")),
        ]
        if self.kind == "KaiwoJob":
            names += [("Job", name), ("RayJob", name)]
        else:
            names += [("Deployment", name), ("AppWrapper", name), ("RayService", name)]
        out = []
        for kind, n in names:
            obj = self.shared.get(kind, ns, n)
            if obj is not None:
                out.append(obj)
        return out

    def _kueue_workloads(self, main: dict | None, uid: str) -> list[dict] | None:
        """The Kueue Workload(s) of the underlying object: by its UID, or for
        a Deployment by the UID of each of its pods."""
        if main is None:
            return None
        wl = self.shared.workloads
        if main.get("kind") == "Deployment":
            out: list[dict] = []
            for pod in self.shared.pods.by_index(IDX_RUN_ID, uid):
                if _meta(pod).get("deletionTimestamp"):
                    continue
                out += wl.by_index(IDX_JOB_UID, _meta(pod).get("uid") or "")
            return out
        found = wl.by_index(IDX_JOB_UID, _meta(main).get("uid") or "")
        return found or None

    def _pending_gpu_candidates(self) -> list[dict]:
        out: list[dict] = []
        for inf in self.shared.own.values():
            out += inf.by_index(IDX_PENDING_GPU, "y")
        return out

    # ---------------------------------------------------------------- status
    async def _write_status(self, raw: dict, new: dict, *, events: bool = True) -> dict:
        meta = raw["metadata"]
        old = raw.get("status") or {}
        patch = {"metadata": {"resourceVersion": meta["resourceVersion"]}, "status": new}
        key = (self.kind, meta.get("namespace") or "", meta["name"])
        # registered before the request: the watch event may arrive before the response
        self.shared.own_writes[key] = (meta["resourceVersion"], new)
        try:
            result = await self.client.patch_status(self.res, meta["name"], patch, meta.get("namespace"))
        except ApiError as e:
            self.shared.own_writes.pop(key, None)
            if e.not_found:
                raise _Gone() from e
            raise
        except BaseException:
            self.shared.own_writes.pop(key, None)
            raise
        self.shared.recent.put(key, meta.get("resourceVersion"), result)
        if events:
            for type_, reason, message in status_events(old, new):
                self.recorder.event(result, type_, reason, message)
            for type_ in (SPEC_VALID, SCHEDULABLE, SPEC_CHANGE_NOT_APPLIED):
                self._problem_event(result, old, new, type_)
        return result

    def _problem_event(self, obj: dict, old: Mapping, new: Mapping, type_: str) -> None:
        """A Warning event when a problem condition appears or changes its message."""
        now_c = find_condition(new.get("conditions"), type_)
        if now_c is None:
            return
        bad = now_c.get("status") == ("True" if type_ == SPEC_CHANGE_NOT_APPLIED else "False")
        if not bad:
            return
        was = find_condition(old.get("conditions"), type_)
        if was is not None and (was.get("status"), was.get("reason"), was.get("message")) == (
            now_c.get("status"),
            now_c.get("reason"),
            now_c.get("message"),
        ):
            return
        self.recorder.warning(obj, now_c.get("reason") or type_, now_c.get("message") or "")

    # ---------------------------------------------------------------- children
    async def _apply_children(self, raw: dict, ko: KaiwoObject, world: World, desired: list[dict]) -> None:
        main_kinds = {k for (kind, _), (_, k) in MAIN_KINDS.items() if kind == self.kind}
        for child in desired:
            if child["kind"] in main_kinds and child["metadata"]["name"] == ko.name:
                await self._ensure_local_queue(raw, ko, world)
            await self._ensure(raw, child)

    async def _ensure_local_queue(self, raw: dict, ko: KaiwoObject, world: World) -> None:
        ns = ko.namespace
        q = ko.queue_name(world.settings)
        exists = self.shared.get("LocalQueue", ns, q) is not None
        if exists:
            return
        decision = resolve_local_queue(
            ns,
            q,
            world.queue_config,
            local_queue_exists=False,
            cluster_queue=self.shared.cluster_queues.get(q),
        )
        if decision.action == "error":
            self.recorder.warning(raw, "LocalQueueError", decision.message)
            raise LocalQueueError(decision.message)
        if decision.action == "create" and decision.local_queue is not None:
            created = await create_local_queue(self.client, decision.local_queue)  # one POST per queue
            if created is None:
                return
            self.shared.recent.put(("LocalQueue", ns, q), None, created)
            self.recorder.normal(raw, "ResourceCreated", _created_message(LOCALQUEUES, q))

    async def _ensure(self, owner: dict, desired: dict) -> None:
        kind = desired["kind"]
        res = CHILD_RESOURCES[kind]
        meta = desired["metadata"]
        ns, name = meta.get("namespace") or "", meta["name"]
        uid = owner["metadata"].get("uid") or ""
        existing = self.shared.get(kind, ns, name)
        if existing is None:
            try:
                created = await self.client.create(res, desired)
            except ApiError as e:
                if e.already_exists:
                    return  # our cache has not seen it yet
                if e.invalid:
                    self._refuse(owner, f"{kind} {name}: {e.message}")
                    return
                raise
            self.refused.pop((uid, owner["metadata"].get("generation") or 0), None)
            self.shared.recent.put((kind, ns, name), None, created)
            self.recorder.normal(owner, "ResourceCreated", _created_message(res, name))
            return
        if not is_controlled_by(existing, uid) or _meta(existing).get("deletionTimestamp"):
            return  # adopted (§16) or someone else's: read, never write
        body = writable_part(kind, desired, existing)
        if contains(existing, body):
            return
        child = f"{kind}/{name}"
        generation = owner["metadata"].get("generation") or 0
        if child in self.rejected.get((uid, generation), {}):
            return  # refused for this generation already: reported, not retried
        update = merge_into(existing, body)
        try:
            result = await self.client.replace(res, update)
        except ApiError as e:
            if e.invalid or e.forbidden:  # validation or admission (e.g. PVC resize) said no
                self._reject(owner, child, [f"{child}:{p}" for p in differing_paths(existing, body)], e)
                return
            raise
        self.shared.recent.put((kind, ns, name), _rv(existing), result)
        log.info("updated child", extra={"child_kind": kind, "child": name, "paths": differing_paths(existing, body)[:10]})

    def _refuse(self, owner: dict, message: str) -> None:
        """The API server refused to create a child built from this spec: the
        workload goes to ERROR with condition SpecValid=False/ChildRejected
        (next pass) until the spec changes."""
        meta = owner["metadata"]
        key = (meta.get("uid") or "", meta.get("generation") or 0)
        self.refused = {k: v for k, v in self.refused.items() if k[0] != key[0]}
        self.refused[key] = message[:2000]
        self._requeue(owner)

    def _requeue(self, owner: dict) -> None:
        meta = owner["metadata"]
        for c in self.mgr.controllers:
            if c.name == _controller_name(self.kind):
                c.queue.add_after(Request(meta.get("namespace") or "", meta["name"]), 0.05)

    def _reject(self, owner: dict, child: str, paths: list[str], error: ApiError) -> None:
        """The API server refused a change: remember it for the
        SpecChangeNotApplied condition of the next pass and tell the user.
        The change is not tried again until the spec changes."""
        meta = owner["metadata"]
        key = (meta.get("uid") or "", meta.get("generation") or 0)
        for k in [k for k in self.rejected if k[0] == key[0] and k != key]:
            del self.rejected[k]
        self.rejected.setdefault(key, {})[child] = paths
        self.recorder.warning(owner, "SpecChangeRejected", f"{', '.join(paths)}: {error.message}"[:1000])
        self._requeue(owner)

    # ------------------------------------------------------------- termination
    async def _terminate(self, raw: dict, world: World, now: datetime) -> Result | None:
        """§13: write TERMINATED first, then delete the controlled children."""
        new = observe(self.kind, raw, world, ObservedChildren(), None, now)
        if new != (raw.get("status") or {}):
            raw = await self._write_status(raw, new)
        deleted = await self._delete_children(raw)
        if not deleted:
            log.warning("terminated workload had no children to delete", extra={"object": raw["metadata"]["name"]})
        return None

    async def _delete_children(self, raw: dict, quiet: bool = False) -> int:
        uid = raw["metadata"].get("uid") or ""
        n = 0
        for kind in TERMINATION_KINDS:
            for obj in self.shared.children[kind].by_index(OWNER_UID_INDEX, uid):
                m = _meta(obj)
                if not is_controlled_by(obj, uid) or m.get("deletionTimestamp"):
                    continue
                await self.client.delete(
                    CHILD_RESOURCES[kind], m["name"], m.get("namespace"), propagation="Foreground", uid=m.get("uid")
                )
                n += 1
        if n and quiet:
            log.info("deleted leftover children of a terminated workload", extra={"count": n})
        return n

    # ------------------------------------------------------------------ sweep
    async def _sweep(self, now: datetime) -> None:
        """§12.3 over the pre-filtered candidates (up and Preemptable=True)."""
        for kind, inf in self.shared.own.items():
            candidates = inf.by_index(IDX_UP_PREEMPTABLE, "y")
            if not candidates:
                continue
            for obj, new in sweep_expired(candidates, now):
                m = obj["metadata"]
                try:
                    patch = {"metadata": {"resourceVersion": m["resourceVersion"]}, "status": new}
                    result = await self.client.patch_status(OWN_RESOURCES[kind], m["name"], patch, m.get("namespace"))
                except ApiError as e:
                    log.warning("sweep: status write failed", extra={"object": m["name"], "error": str(e)})
                    continue
                recorder = self.mgr.recorder.for_component(COMPONENTS[kind])
                for type_, reason, message in status_events(obj.get("status"), new):
                    recorder.event(result, type_, reason, message)


CHILD_REJECTED = "ChildRejected"


def _refused_status(stored: dict, observed: dict, message: str, generation: int, now: datetime) -> dict:
    """ERROR with SpecValid=False/ChildRejected: the API server refused a child
    built from this spec (its message names the field). Unchanged when the
    stored status already says so."""
    cond = find_condition(stored.get("conditions"), SPEC_VALID)
    if (
        stored.get("status") == ERROR
        and cond is not None
        and (cond.get("status"), cond.get("reason"), cond.get("message")) == ("False", CHILD_REJECTED, message)
    ):
        return stored
    new = copy.deepcopy(observed)
    conds = new.setdefault("conditions", [])
    set_condition(conds, SPEC_VALID, "False", CHILD_REJECTED, message, generation, now)
    new["status"] = ERROR
    new["observedGeneration"] = generation
    return new


def _controller_name(kind: str) -> str:
    return kind.lower()


# --------------------------------------------------------------------------- wiring


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
    main_kinds = {"KaiwoJob": ("Job", "RayJob"), "KaiwoService": ("AppWrapper",)}[kind]

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
    for kind, other in (("KaiwoJob", "KaiwoService"), ("KaiwoService", "KaiwoJob")):
        rec = WorkloadReconciler(mgr, kind, shared)
        ctl = mgr.new_controller(
            _controller_name(kind), rec, workers=workers, tracer=tracer, rate_limiter=rate_limiter() if rate_limiter else None
        )
        ctl.for_(shared.own[kind], predicates=[ResourceVersionChanged(), _NotOurStatusWrite(shared, kind)])
        for child in ("Job", "PersistentVolumeClaim"):  # download Job, PVCs (§5.1 Decision)
            ctl.owns(shared.children[child], GROUP, kind, predicates=status_changed)
        if kind == "KaiwoJob":
            ctl.owns(shared.children["RayJob"], GROUP, kind, predicates=status_changed)
            ctl.watches(shared.children["Job"], _adopted_job_owner, predicates=status_changed)
        else:
            ctl.owns(shared.children["Deployment"], GROUP, kind, predicates=status_changed)
            ctl.owns(shared.children["AppWrapper"], GROUP, kind, predicates=status_changed)
            ctl.watches(shared.children["RayService"], _ray_service_owner, predicates=[ResourceVersionChanged()])
            ctl.watches(shared.pods, _pod_owner, predicates=[_NoUpdates()])
        ctl.watches(shared.workloads, _workload_owner(kind, shared), predicates=[_ConditionsChanged()])
        ctl.watches(shared.own[other], _map_to_running_with_duration(shared.own[kind]), predicates=[ResourceVersionChanged()])
        # ERROR is re-evaluated when what it depends on changes: the queue
        # config, KaiwoConfig, node GPU capacity (§5.9 "re-evaluated on every trigger")
        in_error = _map_to_in_error(shared.own[kind])
        ctl.watches(shared.queue_configs, in_error, predicates=[ResourceVersionChanged()])
        ctl.watches(shared.settings.informer, in_error, predicates=[ResourceVersionChanged()])
        ctl.watches(shared.nodes, in_error, predicates=[FieldsChanged(_node_capacity)])
        out[kind] = rec
    return out


class _NoUpdates(Predicate):
    def update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
        return _meta(old).get("deletionTimestamp") != _meta(new).get("deletionTimestamp")


__all__ = ["LocalQueueError", "QueueConfigMissing", "RecentWrites", "SharedCaches", "WorkloadReconciler", "setup"]
