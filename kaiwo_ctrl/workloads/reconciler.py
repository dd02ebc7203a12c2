"""The generic workload reconciler: one reconcile of one KaiwoJob or
KaiwoService, driven by its :class:`~.kinds.WorkloadKind` table.

A reconcile reads only the caches, builds the
:class:`~kaiwo_ctrl.workloads.world.World`, computes the desired children and
the observed status with the pure functions of this package, and writes only
what differs:

* the status, via a merge patch of the status subresource guarded by the
  object's resourceVersion, when :func:`observe` returns something new;
* each child while the status is active (not finished, not in ERROR):
  created when absent, else updated (PUT of the cached object with our fields
  merged in, resourceVersion guarded) when it does not already contain what
  we want. Paths the API server or the owning controller will not change
  (``IMMUTABLE_PATHS``) and fields other controllers own (``OWNED_BY_OTHERS``:
  ``spec.suspend`` under Kueue) are never sent; immutable drift becomes
  condition ``SpecChangeNotApplied``.

The status write and the children apply are sent together. The watch event
of our own status write is not reconciled again (the shared expectations
recognise it); when the written status itself leads further (RUNNING ->
``Preemptable`` from ``startTime``) the pass requeues at once instead.

Problems are reported on the workload, never by crashing: spec errors and an
unschedulable request are ERROR conditions from :func:`observe`; a child the
API server refuses to create puts the workload in ERROR with
``SpecValid=False/ChildRejected``; a change it refuses on an existing child
joins ``SpecChangeNotApplied``; any other exception while building the
children or observing the status is ERROR with ``SpecValid=False`` and reason
``BuildFailed``/``ObserveFailed`` naming the field (or the exception type),
logged once per generation and not retried on a timer. ERROR workloads are
re-evaluated when the queue config, KaiwoConfig or node GPU capacity change.

Children are never created for a workload that is being deleted or is gone
from the cache at write time; each child carries a controller owner
reference with the workload's UID and ``blockOwnerDeletion``, so a child
created in a race is collected by the garbage collector.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from pydantic import ValidationError

from kaiwo_ctrl.kinds import LOCALQUEUES
from kaiwo_ctrl.quantity import QuantityError, parse_quantity
from kaiwo_ctrl.queues.localqueue import resolve_local_queue
from kaiwo_ctrl.runtime.apply import contains, differing_paths
from kaiwo_ctrl.runtime.client import ApiError, Resource
from kaiwo_ctrl.runtime.conditions import find_condition, set_condition
from kaiwo_ctrl.runtime.controller import Result
from kaiwo_ctrl.runtime.fielderrors import FieldError
from kaiwo_ctrl.runtime.handler import Request
from kaiwo_ctrl.runtime.manager import Manager
from kaiwo_ctrl.runtime.objpath import get_path as _get_path
from kaiwo_ctrl.runtime.objpath import meta as _meta
from kaiwo_ctrl.runtime.objpath import pop_path as _pop_path
from kaiwo_ctrl.runtime.objpath import rv as _rv
from kaiwo_ctrl.runtime.store import OWNER_UID_INDEX

from .caches import IDX_JOB_UID, IDX_PENDING_GPU, IDX_RUN_ID, IDX_UP_PREEMPTABLE, SharedCaches, status_of as _status_of
from .caches import terminated_early as _terminated_early
from .childstatus import ACTIVE, ERROR, PENDING, TERMINAL, TERMINATED, TERMINATING, UP
from .desired import desired_children
from .drift import IMMUTABLE_PATHS, OWNED_BY_OTHERS, immutable_drift, is_controlled_by
from .kaiwoobject import KaiwoObject
from .kinds import CHILD_RESOURCES, COMPONENTS, OWN_RESOURCES, TERMINATION_KINDS, WORKLOAD_KINDS
from .status import (
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
from .world import World

log = logging.getLogger("kaiwo_ctrl.workloads.reconciler")


class _Gone(Exception):
    """The workload disappeared under a write (stop quietly)."""


class LocalQueueError(RuntimeError):
    """The LocalQueue the workload needs cannot be ensured (reconcile fails)."""


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


class WorkloadReconciler:
    """Reconciles one Kaiwo kind (``KaiwoJob`` or ``KaiwoService``)."""

    def __init__(self, mgr: Manager, kind: str, shared: SharedCaches) -> None:
        self.mgr = mgr
        self.kind = kind
        self.spec = WORKLOAD_KINDS[kind]
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
        #: uid -> (generation, stage) whose build/observe failure was logged
        self.failures: dict[str, tuple[int, str]] = {}

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
    def _observe_children(self, raw: dict, ko: KaiwoObject, world: World, desired: Any, now: datetime) -> tuple:
        """The cached children (with immutable drift and GPU demand) and the Kueue Workloads."""
        meta = raw["metadata"]
        ns, name, uid = meta.get("namespace") or "", meta["name"], meta.get("uid") or ""
        objs = self._child_objects(ns, name)
        unapplied: list[str] = []
        if not isinstance(desired, SpecError):
            for d in desired:
                ex = self.shared.get(d["kind"], ns, d["metadata"]["name"])
                if ex is not None and is_controlled_by(ex, uid):
                    unapplied += immutable_drift(d["kind"], ex, d)
        for paths in self.rejected.get((uid, meta.get("generation") or 0), {}).values():
            unapplied += paths
        gpu_demand = False
        if ko.spec.get("duration") and _status_of(raw) in UP:
            gpu_demand = has_gpu_demand(ko, self._pending_gpu_candidates(), world, now)
        children = ObservedChildren.from_objects(
            ko, objs, unapplied_fields=tuple(dict.fromkeys(unapplied)), gpu_demand=gpu_demand
        )
        return children, self._kueue_workloads(children.main, uid)

    async def _reconcile_active(self, raw: dict, world: World, now: datetime) -> Result | None:
        meta = raw["metadata"]
        uid, generation = meta.get("uid") or "", meta.get("generation") or 0
        stored = raw.get("status") or {}
        stage = "Build"
        try:
            try:
                ko: KaiwoObject | None = KaiwoObject.of(raw)
            except (ValidationError, ValueError):
                ko = None  # observe reports the spec error
            desired: Any = None
            children, workloads = ObservedChildren(), None
            if ko is not None:
                desired = desired_children(ko, world, download_succeeded=download_succeeded(stored))
                stage = "Observe"
                children, workloads = self._observe_children(raw, ko, world, desired, now)
            stage = "Observe"
            new = observe(self.kind, raw, world, children, workloads, now, typed=ko)
            status = new.get("status") or ""
            if status in ACTIVE and ko is not None and download_succeeded(new) != download_succeeded(stored):
                stage = "Build"
                desired = desired_children(ko, world, download_succeeded=download_succeeded(new))
        except Exception as exc:  # noqa: BLE001 - bad input ends in ERROR, never in a retry loop
            return await self._stage_failed(raw, stage, exc, now)
        self.failures.pop(uid, None)
        refused = self.refused.get((uid, generation))
        if refused is not None and status in ACTIVE:
            new = _refused_status(stored, new, refused, generation, now)
            status = new.get("status") or ""
        to_apply: list[dict] | None = None
        if status in ACTIVE and ko is not None:
            if isinstance(desired, SpecError):
                # observe reports spec problems itself; this only guards the apply
                self.recorder.warning(raw, "InvalidSpec", str(desired))
            else:
                to_apply = desired or []
        raw = await self._write(raw, new, stored, ko, world, to_apply)
        again = False
        if new != stored and refused is None and ko is not None:
            # The event of our own write is not reconciled, so look now whether
            # the written status leads further (e.g. RUNNING -> Preemptable
            # computed from startTime) and come back if it does.
            again = observe(self.kind, raw, world, children, workloads, now, typed=ko.with_object(raw)) != (
                raw.get("status") or {}
            )
        if status == PENDING:
            await self._sweep(now)
        if again:
            return Result(requeue_after=0.01)
        if status in UP and ko is not None and ko.spec.get("duration"):
            wait = requeue_after({**raw, "status": new}, now, typed=ko)
            if wait is not None:
                return Result(requeue_after=max(wait.total_seconds(), 0.05))
        return None

    async def _write(self, raw: dict, new: dict, stored: dict, ko: Any, world: World, to_apply: list | None) -> dict:
        """The status write and the children apply are independent requests:
        send them together (half the latency per workload). Returns the object
        as the status write left it."""
        steps = []
        if new != stored:
            steps.append(self._write_status(raw, new))
        if to_apply:
            steps.append(self._apply_children(raw, ko, world, to_apply))
        results = await asyncio.gather(*steps, return_exceptions=True) if steps else []
        failures = [r for r in results if isinstance(r, BaseException)]
        if failures:
            raise next((f for f in failures if isinstance(f, _Gone)), failures[0])
        return results[0] if new != stored else raw

    async def _stage_failed(self, raw: dict, stage: str, exc: Exception, now: datetime) -> Result | None:
        """Building or observing raised: ERROR with ``SpecValid=False`` and reason
        ``<stage>Failed`` naming the field (a FieldError) or the exception type.
        The traceback is logged once per generation; no timed retry (the spec,
        a child, the queue config, KaiwoConfig or the nodes changing re-run it)."""
        meta = raw["metadata"]
        uid, generation = meta.get("uid") or "", meta.get("generation") or 0
        if isinstance(exc, FieldError):
            message = str(exc)
        else:
            message = f"{stage.lower()} failed: {type(exc).__name__}: {exc}"
        message = message[:1000]
        if self.failures.get(uid) != (generation, stage):
            if len(self.failures) >= 10_000:  # bounded: deleted workloads leave entries
                self.failures.pop(next(iter(self.failures)))
            self.failures[uid] = (generation, stage)
            log.error(
                "workload %s failed", stage.lower(), exc_info=exc,
                extra={"object": f"{meta.get('namespace')}/{meta['name']}", "generation": generation},
            )
        stored = raw.get("status") or {}
        new = copy.deepcopy(stored)
        set_condition(new.setdefault("conditions", []), SPEC_VALID, "False", f"{stage}Failed", message, generation, now)
        new["status"] = ERROR
        new["observedGeneration"] = generation
        if new != stored:
            try:
                await self._write_status(raw, new)
            except _Gone:
                pass
        return None

    def _child_objects(self, ns: str, name: str) -> list[dict]:
        """Every declared child of the workload that the caches hold."""
        out = []
        for spec, child in self.spec.child_names(name):
            obj = self.shared.get(spec.kind, ns, child)
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
        self.shared.expectations.expect_status(key, meta["resourceVersion"], new)
        try:
            result = await self.client.patch_status(self.res, meta["name"], patch, meta.get("namespace"))
        except ApiError as e:
            self.shared.expectations.cancel_status(key)
            if e.not_found:
                raise _Gone() from e
            raise
        except BaseException:
            self.shared.expectations.cancel_status(key)
            raise
        self.shared.expectations.wrote(key, meta.get("resourceVersion"), result)
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
        main_kinds = {c.kind for c in self.spec.children if c.main}
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
            try:
                created = await self.client.create(LOCALQUEUES, decision.local_queue)
            except ApiError as e:
                if not e.already_exists:
                    raise
                return
            self.shared.expectations.wrote(("LocalQueue", ns, q), None, created)
            self.recorder.normal(raw, "ResourceCreated", _created_message(LOCALQUEUES, q))

    async def _ensure(self, owner: dict, desired: dict) -> None:
        kind = desired["kind"]
        res = CHILD_RESOURCES[kind]
        meta = desired["metadata"]
        ns, name = meta.get("namespace") or "", meta["name"]
        uid = owner["metadata"].get("uid") or ""
        existing = self.shared.get(kind, ns, name)
        if existing is None:
            if not self._owner_alive(owner):
                return  # being deleted or gone: a child now would only race the garbage collector
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
            self.shared.expectations.wrote((kind, ns, name), None, created)
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
        self.shared.expectations.wrote((kind, ns, name), _rv(existing), result)
        log.info("updated child", extra={"child_kind": kind, "child": name, "paths": differing_paths(existing, body)[:10]})

    def _owner_alive(self, owner: dict) -> bool:
        """The owner, as the cache shows it at write time, exists with the same
        UID and is not being deleted."""
        m = owner["metadata"]
        current = self.shared.own[self.kind].get(m["name"], m.get("namespace"))
        return current is not None and _meta(current).get("uid") == m.get("uid") and not _meta(current).get("deletionTimestamp")

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
            if c.name == self.spec.controller_name:
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




