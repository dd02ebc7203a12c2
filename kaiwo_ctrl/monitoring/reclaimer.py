"""The idle-GPU reclaim runnable (GpuWorkload), leader-only, one pass per polling interval.

A pass: read KaiwoConfig.spec.gpuPreemption; scrape the exporter (both vendors' activity
metrics, ``SCRAPE_TIMEOUT``, at most ``MAX_SCRAPE_BYTES``, through the runtime's HTTP client);
group the cached GPU Pods and Kueue Workloads by root owner (owners read from the API server
once per Pod, memoised, at most ``MAX_RESOLVES`` new ones a pass); create the records of
opted-in roots; write each record's status only when it changed; choose victims
(:func:`.reclaim.choose`) and delete their root owners (UID precondition); delete records past
their TTL. At most ``MAX_WRITES`` writes a pass; the rest waits for the next pass.

The global decision runs only on the leader, so the leader-election Lease is the one Lease
guarding it (upstream takes a second Lease per evaluation, raced for by every replica).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from typing import Any

from prometheus_client import Counter, Gauge
from pydantic import ValidationError

from api.kaiwo.gpuworkload import PHASES
from kaiwo_ctrl.kinds import APPWRAPPERS, GPUWORKLOADS, KAIWOJOBS, KAIWOSERVICES, RAYCLUSTERS, RAYJOBS, RAYSERVICES, WORKLOADS
from kaiwo_ctrl.runtime.api.client import ApiError, Resource
from kaiwo_ctrl.runtime.api.resources import DEPLOYMENTS, JOBS, NAMESPACES, PODS, REPLICASETS, STATEFULSETS
from kaiwo_ctrl.runtime.manager.manager import Manager
from kaiwo_ctrl.runtime.net.fetch import FETCH_ERRORS, Fetcher
from kaiwo_ctrl.settings import ConfigMissing, settings_for

from . import owners
from .reclaim import PREEMPTED, PREEMPTING, Candidate, Observation, choose, kueue_gpu_pending, parse_activity
from .reclaimsettings import PREFIX, ReclaimEnv, opted_in, resolve, spec_from_annotations
from .reclaimstatus import desired_status, finished_status, preempting_status

log = logging.getLogger("kaiwo_ctrl.monitoring.reclaim")

COMPONENT = "kaiwo-gpu-reclaim"
RUNNABLE = "gpu-reclaim"
SCRAPE_TIMEOUT = 5.0
MAX_SCRAPE_BYTES = 32 << 20
MAX_RESOLVES = 200
MAX_WRITES = 200

OWNER_RESOURCES: dict[tuple[str, str], Resource] = {
    ("batch", "Job"): JOBS, ("apps", "Deployment"): DEPLOYMENTS, ("apps", "ReplicaSet"): REPLICASETS,
    ("apps", "StatefulSet"): STATEFULSETS, ("ray.io", "RayCluster"): RAYCLUSTERS, ("ray.io", "RayJob"): RAYJOBS,
    ("ray.io", "RayService"): RAYSERVICES, ("kaiwo.silogen.ai", "KaiwoJob"): KAIWOJOBS,
    ("kaiwo.silogen.ai", "KaiwoService"): KAIWOSERVICES, ("workload.codeflare.dev", "AppWrapper"): APPWRAPPERS,
    ("", "Pod"): PODS,
}


def _utcnow() -> datetime:
    return datetime.now(timezone.utc)


def _time(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


class Reclaimer:
    """One observe-decide-apply pass per interval, on the leader only."""

    def __init__(self, mgr: Manager, env: ReclaimEnv, *, clock: Callable[[], datetime] = _utcnow) -> None:
        self.mgr, self.env, self.clock = mgr, env, clock
        self.settings = settings_for(mgr)
        self.pods = mgr.cache.informer(PODS, transform=owners.trim_gpu_pod)
        self.records = mgr.cache.informer(GPUWORKLOADS)
        self.kueue = mgr.cache.informer(WORKLOADS)
        self.recorder = mgr.recorder.for_component(COMPONENT)
        self.expectations = mgr.expectations
        #: uid of a Pod or Kueue Workload -> its root (None: not reclaimable)
        self.roots: dict[str, owners.RootOwner | None] = {}
        #: uid of a Kueue Workload -> GPUs its owner's template asks for (no Pods yet)
        self.demand: dict[str, dict[str, int]] = {}
        self.passes = 0
        self.writes = 0
        self.last_error: str | None = None
        self.reclaims = Counter("kaiwo_gpu_reclaims", "Workloads deleted by idle-GPU reclaim", ["namespace"], registry=mgr.metrics.registry)
        self.phases = Gauge("kaiwo_gpuworkloads", "GpuWorkload records by phase at the last reclaim pass", ["phase"], registry=mgr.metrics.registry)

    async def run(self) -> None:
        async with Fetcher() as http:
            while True:
                try:
                    await self.tick(http)
                except asyncio.CancelledError:
                    raise
                except Exception as e:  # one bad pass must not stop reclaim
                    self.last_error = repr(e)[:500]
                    log.exception("gpu reclaim pass failed")
                self.passes += 1
                await asyncio.sleep(self.env.interval)

    def _config(self) -> dict:
        try:
            return self.settings.current().spec.gpu_preemption.to_k8s()
        except (ConfigMissing, ValidationError) as e:
            log.warning("gpu reclaim: KaiwoConfig unreadable, environment defaults used", extra={"error": str(e)[:300]})
            return {}

    async def scrape(self, http: Fetcher) -> dict[tuple[str, str], dict[str, float]] | None:
        try:
            r = await http.get(self.env.endpoint, timeout=SCRAPE_TIMEOUT, max_bytes=MAX_SCRAPE_BYTES)
            if r.status != 200:
                raise ValueError(f"answered {r.status}")
            return parse_activity(r.text())
        except (*FETCH_ERRORS, ValueError) as e:
            self.last_error = f"scrape: {e!r}"[:500]
            log.warning("gpu metrics scrape failed: no reclaim this pass", extra={"endpoint": self.env.endpoint, "error": repr(e)[:300]})
            return None

    # ------------------------------------------------------------------ owners
    async def _lookup(self, api_version: str, kind: str, namespace: str, name: str) -> Mapping[str, Any] | None:
        res = OWNER_RESOURCES[(owners.group_of(api_version), kind)]
        obj = await self.mgr.client.get_or_none(res, name, namespace)
        if obj is not None:
            obj.setdefault("apiVersion", api_version)
            obj.setdefault("kind", kind)
        return obj

    async def _root(self, obj: Mapping[str, Any] | None, budget: list[int], uid: str = "") -> owners.RootOwner | None:
        """The root of ``obj`` (memoised under ``uid``, by default its own), within the pass's budget."""
        uid = uid or str(((obj or {}).get("metadata") or {}).get("uid") or "")
        if uid in self.roots:
            return self.roots[uid]
        if budget[0] <= 0 or obj is None:
            return None
        budget[0] -= 1
        try:
            root = await owners.resolve_root(obj, self._lookup)
        except owners.OwnerUnresolvable as e:
            log.info("gpu reclaim: not tracked", extra={"object": ((obj.get("metadata") or {}).get("name")), "reason": str(e)[:200]})
            root = None
        except ApiError as e:
            log.warning("gpu reclaim: owner lookup failed", extra={"code": e.status})
            return None  # tried again next pass
        if root is not None:  # keep only what discovery reads of the root: its opt-in annotations
            ann = owners.merge_annotations(PREFIX, (root.obj.get("metadata") or {}).get("annotations"))
            root = dataclasses.replace(root, obj={"metadata": {"annotations": ann}})
        self.roots[uid] = root
        return root

    async def _group(self, budget: list[int]) -> tuple[dict[str, owners.RootOwner], dict[str, list], dict[str, list]]:
        """Roots by UID, their GPU Pods, and their Kueue Workloads."""
        roots: dict[str, owners.RootOwner] = {}
        pods: dict[str, list] = {}
        wls: dict[str, list] = {}
        live = set()
        for p in self.pods.list():
            if not p.get("spec"):
                continue
            live.add(p["metadata"].get("uid"))
            if (root := await self._root(p, budget)) is not None:
                roots[root.uid] = root
                pods.setdefault(root.uid, []).append(p)
        for wl in self.kueue.list():
            ref = owners.controller_ref(wl)
            uid = str((wl.get("metadata") or {}).get("uid") or "")
            if ref is None or not owners.supported(str(ref.get("apiVersion") or ""), str(ref.get("kind") or "")):
                continue
            live.add(uid)
            if uid not in self.roots and budget[0] > 0:
                # the object Kueue admits (a Job Kueue holds suspended has no Pods yet): its template's GPUs
                first = await self._lookup(str(ref.get("apiVersion")), str(ref.get("kind")), wl["metadata"].get("namespace") or "", str(ref.get("name")))
                if first is not None:
                    self.demand[uid] = owners.template_gpus(first)
                await self._root(first, budget, uid)
            root = self.roots.get(uid)
            if root is not None:
                roots.setdefault(root.uid, root)
                wls.setdefault(root.uid, []).append(wl)
        for uid in list(self.roots):
            if uid not in live:
                self.roots.pop(uid, None)
                self.demand.pop(uid, None)
        return roots, pods, wls

    # ------------------------------------------------------------------ pass
    def _record(self, namespace: str, name: str) -> dict | None:
        return self.expectations.view((GPUWORKLOADS.kind, namespace, name), self.records.get(name, namespace))

    async def _write_status(self, record: Mapping[str, Any], status: dict) -> dict | None:
        """Replace the status (keys dropped are sent as null), guarded by the cached resourceVersion."""
        if self.writes_left <= 0:
            return None
        self.writes_left -= 1
        meta = record.get("metadata") or {}
        key = (GPUWORKLOADS.kind, str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        sent = {**{k: None for k in (record.get("status") or {}) if k not in status}, **status}
        try:
            out = await self.expectations.write_status(
                key, record, sent,
                lambda patch: self.mgr.client.patch_status(GPUWORKLOADS, meta["name"], patch, meta.get("namespace")), own=False,
            )
        except ApiError as e:
            if e.conflict or e.not_found:
                return None  # changed or gone since the cache saw it: the next pass decides again
            raise
        self.writes += 1
        return out

    async def tick(self, http: Fetcher) -> None:
        self.last_error = None
        self.writes_left = MAX_WRITES
        now = self.clock()
        config = self._config()
        samples = await self.scrape(http)
        roots, pods, wls = await self._group([MAX_RESOLVES])
        await self._discover(roots, pods, wls)
        candidates: list[Candidate] = []
        for record in list(self.records.list()):
            meta = record.get("metadata") or {}
            current = self._record(meta.get("namespace") or "", meta.get("name") or "") or record
            settings = resolve(current.get("spec"), config, self.env.env)
            c = await self._observe(current, settings, pods, wls, samples, now)
            if c is not None:
                candidates.append(c)
        self.phases.clear()
        for phase in PHASES:
            self.phases.labels(phase).set(sum(1 for c in candidates if c.phase == phase))
        if samples is None:
            return  # no fresh evidence: reclaim nothing this pass
        for victim in choose(candidates, now):
            await self._reclaim(victim, now)

    async def _namespace_annotations(self, namespace: str, memo: dict[str, Mapping[str, str]]) -> Mapping[str, str]:
        if namespace not in memo:
            ns = await self.mgr.client.get_or_none(NAMESPACES, namespace)
            memo[namespace] = ((ns or {}).get("metadata") or {}).get("annotations") or {}
        return memo[namespace]

    async def _discover(self, roots: Mapping[str, owners.RootOwner], pods: Mapping[str, list], wls: Mapping[str, list]) -> None:
        """Create the record of each opted-in root that has none (annotations are read here, once)."""
        memo: dict[str, Mapping[str, str]] = {}
        for uid, root in roots.items():
            name = owners.record_name(root.kind, root.name, root.uid)
            if self._record(root.namespace, name) is not None or self.writes_left <= 0:
                continue
            mine = ((root.obj.get("metadata") or {}).get("annotations")) or {}
            ann = owners.merge_annotations(PREFIX, await self._namespace_annotations(root.namespace, memo), mine)
            gpus: dict[str, int] = {}
            for p in pods.get(uid, ()):
                owners.add_gpus(gpus, owners.pod_gpus(p.get("spec")))
            if not gpus:
                for wl in wls.get(uid, ()):
                    owners.add_gpus(gpus, self.demand.get((wl.get("metadata") or {}).get("uid") or "", {}))
            if not opted_in(ann) or not gpus:
                continue
            spec, errors = spec_from_annotations(ann)
            body = {"metadata": {"name": name, "namespace": root.namespace}, "spec": {"workloadRef": root.ref(), "gpuResources": gpus, **spec}}
            self.writes_left -= 1
            try:
                created = await self.mgr.client.create(GPUWORKLOADS, body, root.namespace)
            except ApiError as e:
                if e.status == 409:
                    continue
                raise
            self.writes += 1
            self.recorder.event(created, "Normal", "Tracking", f"Tracking {root.kind}/{root.name} ({root.chain}) for idle-GPU reclaim")
            for message in errors:
                self.recorder.event(created, "Warning", "InvalidAnnotation", f"{message}; the cluster default is used")

    async def _owner_gone(self, ref: Mapping[str, Any], namespace: str) -> bool:
        key = (owners.group_of(str(ref.get("apiVersion") or "")), str(ref.get("kind") or ""))
        if key not in OWNER_RESOURCES:
            return False
        obj = await self._lookup(str(ref.get("apiVersion")), key[1], namespace, str(ref.get("name") or ""))
        return obj is None or ((obj.get("metadata") or {}).get("uid") or "") != ref.get("uid")

    async def _observe(self, record: dict, settings: Any, pods: Mapping[str, list], wls: Mapping[str, list],
                       samples: Mapping[tuple[str, str], dict[str, float]] | None, now: datetime) -> Candidate | None:
        meta, spec = record.get("metadata") or {}, record.get("spec") or {}
        status = record.get("status") or {}
        ns, phase, ref = meta.get("namespace") or "", status.get("phase") or "", spec.get("workloadRef") or {}
        gpus = spec.get("gpuResources") or {}
        name = f"{ns}/{meta.get('name')}"
        if phase in (PREEMPTED, "Deleted"):
            await self._expire(record, settings, now)
            at = status.get("preemptedAt")
            return Candidate(name, phase, gpus, settings, preempted_for=status.get("preemptedFor") or "",
                             preempted_at=_time(at) if at else None)
        if phase == PREEMPTING:
            await self._finish(record, now)
            return Candidate(name, PREEMPTING, gpus, settings, preempted_for=status.get("preemptedFor") or "")
        root_uid = str(ref.get("uid") or "")
        mine, my_wls = pods.get(root_uid, []), wls.get(root_uid, [])
        names = [str((p.get("metadata") or {}).get("name") or "") for p in mine]
        obs = Observation(
            pods=mine, kueue_pending=any(kueue_gpu_pending(w, gpus.keys()) for w in my_wls),
            owner_gone=not mine and not my_wls and await self._owner_gone(ref, ns), scrape_ok=samples is not None,
            samples={n: (samples or {}).get((ns, n), {}) for n in names},
        )
        new, events, evidence = desired_status(record, obs, settings, now)
        root = self.roots.get(str((mine[0].get("metadata") or {}).get("uid") or "")) if mine else None
        if root is not None and new.get("phase") != "Deleted":
            new["ownerChain"] = root.chain
        if new != status:
            record = await self._write_status(record, new) or record
            for type_, reason, message in events:
                self.recorder.event(record, type_, reason, message)
        idle = new.get("idleSince")
        return Candidate(name, new.get("phase") or "", gpus, settings, created=meta.get("creationTimestamp") or "",
                         idle_since=_time(idle) if idle else None, evidence=evidence)

    async def _expire(self, record: Mapping[str, Any], settings: Any, now: datetime) -> None:
        finished = (record.get("status") or {}).get("finishedAt")
        if not finished or settings.ttl.total_seconds() == 0 or self.writes_left <= 0:
            return  # a TTL of 0 keeps the record forever
        if now - _time(finished) < settings.ttl:
            return
        meta = record.get("metadata") or {}
        self.writes_left -= 1
        try:
            await self.mgr.client.delete(GPUWORKLOADS, meta["name"], meta.get("namespace"), uid=meta.get("uid"))
            self.writes += 1
        except ApiError as e:
            if not (e.not_found or e.conflict):
                raise

    async def _reclaim(self, victim: Any, now: datetime) -> None:
        ns, _, name = victim.name.partition("/")
        record = self._record(ns, name)
        if record is None or not await self._still_opted_in(record):
            return
        written = await self._write_status(record, preempting_status(record, victim.reason, victim.preempted_for, now))
        if written is None:
            return
        self.recorder.event(written, "Warning", "PreemptionStarted", f"Reclaiming idle GPUs: {victim.reason}")
        await self._finish(written, now)

    async def _still_opted_in(self, record: Mapping[str, Any]) -> bool:
        """Check with the API server before deleting: the owner (this UID) or its namespace must
        opt in now. A record anyone with create rights wrote, or one whose owner has since opted
        out, deletes nothing: the record is removed instead (tracking ends)."""
        meta, ref = record.get("metadata") or {}, (record.get("spec") or {}).get("workloadRef") or {}
        ns = str(meta.get("namespace") or "")
        key = (owners.group_of(str(ref.get("apiVersion") or "")), str(ref.get("kind") or ""))
        owner = await self._lookup(str(ref.get("apiVersion")), key[1], ns, str(ref.get("name") or "")) if key in OWNER_RESOURCES else None
        if owner is not None and ((owner.get("metadata") or {}).get("uid") or "") == ref.get("uid"):
            ann = owners.merge_annotations(PREFIX, await self._namespace_annotations(ns, {}), (owner.get("metadata") or {}).get("annotations"))
            if opted_in(ann):
                return True
        log.info("gpu reclaim: owner not opted in (or gone): record removed, nothing deleted", extra={"record": f"{ns}/{meta.get('name')}"})
        try:
            await self.mgr.client.delete(GPUWORKLOADS, str(meta.get("name")), ns, uid=meta.get("uid"))
        except ApiError as e:
            if not (e.not_found or e.conflict):
                raise
        return False

    async def _finish(self, record: Mapping[str, Any], now: datetime) -> None:
        """Delete the root owner (only the object tracked: UID precondition), then Preempted."""
        ref, ns = (record.get("spec") or {}).get("workloadRef") or {}, (record.get("metadata") or {}).get("namespace")
        key = (owners.group_of(str(ref.get("apiVersion") or "")), str(ref.get("kind") or ""))
        phase, why = PREEMPTED, ""
        try:
            if key in OWNER_RESOURCES:  # the record's spec is user-writable: only kinds we know
                await self.mgr.client.delete(OWNER_RESOURCES[key], str(ref.get("name")), ns, uid=str(ref.get("uid") or "") or None)
        except ApiError as e:
            if e.status == 403:
                phase, why = "Idle", f"the operator may not delete {ref.get('kind')} objects"
            elif not (e.not_found or e.conflict):  # 409: the UID precondition failed, that object is gone
                raise
        written = await self._write_status(record, finished_status(record, phase, now))
        if written is None:
            return
        if phase == PREEMPTED:
            self.reclaims.labels(str(ns or "")).inc()
            reason = (record.get("status") or {}).get("preemptionReason") or ""
            self.recorder.event(written, "Warning", "WorkloadPreempted", f"{ref.get('kind')}/{ref.get('name')} was deleted to free its GPUs: {reason}")
            owner = {"apiVersion": ref.get("apiVersion"), "kind": ref.get("kind"), "metadata": {"name": ref.get("name"), "namespace": ns, "uid": ref.get("uid")}}
            self.recorder.event(owner, "Warning", "GpuReclaimed", f"Deleted to free idle GPUs: {reason}")
        else:
            self.recorder.event(written, "Warning", "PreemptionFailed", f"Cannot delete {ref.get('kind')}/{ref.get('name')}: {why}")


def setup(mgr: Manager, env: ReclaimEnv | None, *, clock: Callable[[], datetime] = _utcnow) -> Reclaimer | None:
    """Register reclaim as a leader-only runnable when GPU_PREEMPTION_ENABLED=true."""
    if env is None:
        return None
    reclaimer = Reclaimer(mgr, env, clock=clock)
    mgr.add_runnable(RUNNABLE, reclaimer.run, leader=True)
    mgr.gpu_reclaimer = reclaimer  # type: ignore[attr-defined]
    log.info("idle-GPU reclaim enabled", extra={"endpoint": env.endpoint, "interval_seconds": env.interval})
    return reclaimer
