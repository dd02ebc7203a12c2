"""The generic workload reconciler: one reconcile of one KaiwoJob or
KaiwoService, driven by its :class:`~kaiwo_ctrl.workloads.kinds.WorkloadKind` table.

A reconcile reads only the caches, plans the workload once (parsed,
validated, its GPU and storage plans derived: :class:`~kaiwo_ctrl.workloads.builders.plan.WorkloadPlan`),
computes from that plan the desired children (each ``ChildSpec``'s builder)
and the observed status (the pure :func:`~kaiwo_ctrl.workloads.observe.status.observe`), and writes only what differs: the status
(:mod:`.statuswrite`, the one writer) and, while the status is active (not
finished, not in ERROR), the children (:mod:`.children`). Both are sent
together. The watch event of our own status write is not reconciled again;
when the written status itself leads further (RUNNING -> ``Preemptable`` from
``startTime``) the pass requeues at once instead.

Problems are reported on the workload, never by crashing: spec errors and an
unschedulable request are ERROR conditions from ``observe``; a refused child
is ERROR ``SpecValid=False/ChildRejected``; any other exception while building
or observing is ERROR ``SpecValid=False`` with reason ``BuildFailed`` or
``ObserveFailed``, logged once per generation and not retried on a timer.
ERROR workloads are re-evaluated when the queue config, KaiwoConfig or node
GPU capacity change. A deleted workload's children go with the garbage
collector; a TERMINATING one is handled by :mod:`.termination`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from dataclasses import dataclass, field
from datetime import datetime, timezone

from pydantic import ValidationError

from kaiwo_ctrl.runtime.control.controller import Result
from kaiwo_ctrl.runtime.control.handler import Request
from kaiwo_ctrl.runtime.manager.manager import Manager
from kaiwo_ctrl.runtime.objects.objpath import meta as _meta

from ..base.childstatus import ACTIVE, PENDING, TERMINAL, TERMINATED, TERMINATING, UP
from ..base.observed import ObservedChildren
from ..base.world import World
from ..builders.plan import WorkloadPlan
from ..builders.validation import SpecError
from ..kinds import WORKLOAD_KINDS, ChildSpec, WorkloadKind
from ..observe.drift import immutable_drift, is_controlled_by
from ..observe.status import download_succeeded, has_gpu_demand, observe, requeue_after, sweep_expired
from .caches import IDX_JOB_UID, IDX_PENDING_GPU, IDX_RUN_ID, SharedCaches, terminated_early
from .caches import status_of as _status_of
from .children import ChildApplier, LocalQueueError
from .desired import desired_pairs
from .statuswrite import Gone, StatusWriter, failed_stage_status, refused_status
from .sweep import Sweeper
from .termination import Terminator

__all__ = ["LocalQueueError", "WorkloadReconciler"]

log = logging.getLogger("kaiwo_ctrl.workloads.reconcile.reconciler")

Desired = list[tuple[ChildSpec, dict]] | SpecError | None


@dataclass
class _Pass:
    """One reconcile's view: the cached object, its plan (parsed, validated
    and derived once) and what was computed."""

    raw: dict
    world: World
    now: datetime
    plan: WorkloadPlan | None = None
    desired: Desired = None
    children: ObservedChildren = field(default_factory=ObservedChildren)
    workloads: list[dict] | None = None

    @property
    def stored(self) -> dict:
        return self.raw.get("status") or {}


class WorkloadReconciler:
    """Reconciles one Kaiwo workload kind."""

    def __init__(
        self, mgr: Manager, kind: str | WorkloadKind, shared: SharedCaches, sweeper: Sweeper | None = None
    ) -> None:
        self.mgr = mgr
        self.spec = kind if isinstance(kind, WorkloadKind) else WORKLOAD_KINDS[kind]
        self.kind = self.spec.kind
        self.shared = shared
        self.informer = shared.own[self.kind]
        self.recorder = mgr.recorder.for_component(self.spec.component)
        self.sweeper = sweeper
        self.writer = StatusWriter(shared, self.spec, self.recorder)
        self.applier = ChildApplier(shared, self.informer, self.recorder, self._requeue)
        self.terminator = Terminator(shared, self.spec, self.writer)
        #: uid -> (generation, stage) whose build/observe failure was logged
        self.failures: dict[str, tuple[int, str]] = {}

    async def __call__(self, req: Request) -> Result | None:
        raw = self.shared.get_own(self.kind, req.namespace, req.name)
        swept = self.sweeper is not None and self.sweeper.take(self.kind, req.namespace, req.name)
        if raw is None or raw["metadata"].get("deletionTimestamp"):
            return None  # the garbage collector removes the children
        state = _status_of(raw)
        if state in TERMINAL:
            if state == TERMINATED and terminated_early(raw):
                # TERMINATED is written first: finish deletions a failure cut short
                await self.terminator.delete_children(raw, quiet=True)
            return None
        world = self.shared.world()
        now = datetime.now(timezone.utc)
        try:
            if swept and state in UP:
                raw = await self._swept(raw)
                state = _status_of(raw)
            if state == TERMINATING:
                await self.terminator.terminate(raw, world, now)
                return None
            return await self._reconcile_active(_Pass(raw, world, now))
        except Gone:
            return None  # deleted while we were looking at it

    async def _swept(self, raw: dict) -> dict:
        """The sweep found this workload up past its duration while another is
        PENDING: write TERMINATING (the termination follows in this pass)."""
        for _, new in sweep_expired([raw], datetime.now(timezone.utc)):
            return await self.writer.write(raw, new)
        return raw

    # ------------------------------------------------------------ active path
    def _observe_children(self, p: _Pass) -> None:
        """The cached children (with immutable drift and GPU demand) and the Kueue Workloads."""
        assert p.plan is not None
        ko, uid = p.plan.o, p.plan.o.uid or ""
        applicable = self.spec.applicable(ko.is_ray)
        found = {}
        for spec in applicable:
            obj = self.shared.get(spec.kind, ko.namespace, spec.name(ko.name))
            if obj is not None:
                found[spec.slot] = obj
        unapplied: list[str] = []
        if isinstance(p.desired, list):
            for spec, d in p.desired:
                ex = found.get(spec.slot)
                if ex is not None and is_controlled_by(ex, uid):
                    unapplied += immutable_drift(spec, ex, d)
        unapplied += self.applier.unapplied(p.raw)
        gpu_demand = False
        if ko.spec.get("duration") and _status_of(p.raw) in UP:
            gpu_demand = has_gpu_demand(ko, self._pending_gpu_candidates(), p.world, p.now)
        p.children = ObservedChildren(**found, unapplied_fields=tuple(dict.fromkeys(unapplied)), gpu_demand=gpu_demand)
        p.workloads = self._kueue_workloads(p.children.main, uid)

    def _build(self, p: _Pass) -> None:
        """Plan once and build the desired children."""
        try:
            p.plan = WorkloadPlan.of(p.raw, p.world)
        except (ValidationError, ValueError):
            p.plan = None  # observe reports the spec error
        if p.plan is not None:
            p.desired = desired_pairs(p.plan, download_succeeded=download_succeeded(p.stored), kind=self.spec)

    def _observe(self, p: _Pass) -> dict:
        """The observed children and the new status."""
        if p.plan is not None:
            self._observe_children(p)
        return observe(self.spec, p.raw, p.world, p.children, p.workloads, p.now, plan=p.plan)

    async def _reconcile_active(self, p: _Pass) -> Result | None:
        meta = p.raw["metadata"]
        uid, generation = meta.get("uid") or "", meta.get("generation") or 0
        stage = "Build"
        try:
            self._build(p)
            stage = "Observe"
            new = self._observe(p)
            if new.get("status") in ACTIVE and p.plan is not None and download_succeeded(new) != download_succeeded(p.stored):
                stage = "Build"
                p.desired = desired_pairs(p.plan, download_succeeded=download_succeeded(new), kind=self.spec)
        except Exception as exc:  # noqa: BLE001 - bad input ends in ERROR, never in a retry loop
            await self._stage_failed(p, stage, exc)
            return None
        self.failures.pop(uid, None)
        refused = self.applier.refused.get((uid, generation))
        if refused is not None and new.get("status") in ACTIVE:
            new = refused_status(p.stored, new, refused, generation, p.now)
        status = new.get("status") or ""
        to_apply: list[tuple[ChildSpec, dict]] | None = None
        if status in ACTIVE and p.plan is not None:
            if isinstance(p.desired, SpecError):
                # observe reports spec problems itself; this only guards the apply
                self.recorder.warning(p.raw, "InvalidSpec", str(p.desired))
            else:
                to_apply = p.desired or []
        stored = p.stored
        written = await self._write(p, new, to_apply)
        again = False
        if new != stored and refused is None and p.plan is not None:
            # The event of our own write is not reconciled, so look now whether
            # the written status leads further and come back if it does.
            plan = p.plan.with_object(written)
            again = observe(self.spec, written, p.world, p.children, p.workloads, p.now, plan=plan) != (
                written.get("status") or {}
            )
        if status == PENDING and self.sweeper is not None:
            self.sweeper.trigger()
        if again:
            return Result(requeue_after=0.01)
        if status in UP and p.plan is not None and p.plan.o.spec.get("duration"):
            wait = requeue_after({**written, "status": new}, p.now, typed=p.plan.o)
            if wait is not None:
                return Result(requeue_after=max(wait.total_seconds(), 0.05))
        return None

    async def _write(self, p: _Pass, new: dict, to_apply: list | None) -> dict:
        """The status write and the children apply are independent requests:
        send them together. Returns the object as the status write left it."""
        steps: list[Awaitable[dict | None]] = []
        changed = new != p.stored
        if changed:
            steps.append(self.writer.write(p.raw, new))
        if to_apply:
            assert p.plan is not None
            steps.append(self.applier.apply(p.raw, p.plan, to_apply))
        results = await asyncio.gather(*steps, return_exceptions=True) if steps else []
        failures = [r for r in results if isinstance(r, BaseException)]
        if failures:
            raise next((f for f in failures if isinstance(f, Gone)), failures[0])
        written = results[0] if changed else None
        return written if isinstance(written, dict) else p.raw

    async def _stage_failed(self, p: _Pass, stage: str, exc: Exception) -> None:
        """Building or observing raised: ERROR naming the field, the traceback
        logged once per generation; no timed retry (the spec, a child, the
        queue config, KaiwoConfig or the nodes changing re-run it)."""
        meta = p.raw["metadata"]
        uid, generation = meta.get("uid") or "", meta.get("generation") or 0
        if self.failures.get(uid) != (generation, stage):
            if len(self.failures) >= 10_000:  # bounded: deleted workloads leave entries
                self.failures.pop(next(iter(self.failures)))
            self.failures[uid] = (generation, stage)
            log.error(
                "workload %s failed", stage.lower(), exc_info=exc,
                extra={"object": f"{meta.get('namespace')}/{meta['name']}", "generation": generation},
            )
        new = failed_stage_status(p.stored, stage, exc, generation, p.now)
        if new != p.stored:
            try:
                await self.writer.write(p.raw, new)
            except Gone:
                pass

    def _kueue_workloads(self, main: dict | None, uid: str) -> list[dict] | None:
        """The Kueue Workload(s) of the underlying object: by its UID, or for
        a Deployment by the UID of each of its pods."""
        if main is None:
            return None
        wl = self.shared.workloads
        if self.spec.pod_workloads and main.get("kind") == "Deployment":
            out: list[dict] = []
            for pod in self.shared.pods.by_index(IDX_RUN_ID, uid):
                if not _meta(pod).get("deletionTimestamp"):
                    out += wl.by_index(IDX_JOB_UID, _meta(pod).get("uid") or "")
            return out
        return wl.by_index(IDX_JOB_UID, _meta(main).get("uid") or "") or None

    def _pending_gpu_candidates(self) -> list[dict]:
        return [o for inf in self.shared.own.values() for o in inf.by_index(IDX_PENDING_GPU, "y")]

    def _requeue(self, owner: dict) -> None:
        meta = owner["metadata"]
        for c in self.mgr.controllers:
            if c.name == self.spec.controller_name:
                c.queue.add_after(Request(meta.get("namespace") or "", meta["name"]), 0.05)
