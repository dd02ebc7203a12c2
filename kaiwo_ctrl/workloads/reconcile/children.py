"""Applying a workload's desired children: create what is absent, update what
differs, never write what we do not control.

An existing child that does not already contain what we want is updated with
a JSON merge patch of only the fields we set, guarded by the cached
``metadata.resourceVersion`` (a conflict fails the pass, which is retried), so
the cache never needs the fields we do not own. Mappings merge key by key
(others' keys stay), lists and scalars are replaced (an env variable removed
from the spec goes away). Its ``ChildSpec.paths.immutable`` paths (a larger request
on a ``growable`` path stays: volume expansion) and ``ChildSpec.paths.foreign``
fields (e.g. ``spec.suspend`` under Kueue) are never sent. A child the API server refuses
to create puts the workload in ERROR (``SpecValid=False/ChildRejected``); a
change it refuses on an existing child joins ``SpecChangeNotApplied``. Neither
is retried until the spec changes.

Children are never created for a workload that is being deleted or is gone
from the cache at write time; each child carries a controller owner reference
with the workload's UID, so one created in a race is garbage-collected.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Mapping
from typing import Any

from kaiwo_ctrl.kinds import LOCALQUEUES
from kaiwo_ctrl.queues.localqueue import create_local_queue, resolve_local_queue
from kaiwo_ctrl.runtime.api.client import ApiError, Resource
from kaiwo_ctrl.runtime.objects.apply import contains, differing_paths
from kaiwo_ctrl.runtime.objects.objpath import get_path, pop_path
from kaiwo_ctrl.runtime.objects.objpath import meta as _meta
from kaiwo_ctrl.runtime.objects.objpath import rv as _rv

from ..builders.plan import WorkloadPlan
from ..kinds import CHILD_RESOURCES, ChildSpec
from ..observe.drift import growing, is_controlled_by
from .caches import SharedCaches

log = logging.getLogger("kaiwo_ctrl.workloads.reconcile.children")


class LocalQueueError(RuntimeError):
    """The LocalQueue the workload needs cannot be ensured (reconcile fails)."""


def writable_part(spec: ChildSpec, desired: Mapping[str, Any], existing: Mapping[str, Any]) -> dict:
    """``desired`` without what must not be sent to the existing child: its
    immutable paths (unless growing a growable one), fields other controllers
    own, and the owner references (already verified). ``existing`` may be a
    cached, trimmed child (its packed paths are read through ``get_path``)."""
    body = copy.deepcopy(dict(desired))
    for path in spec.paths.immutable:
        # only growable paths read the existing value (a packed template is not unpacked)
        if path not in spec.paths.growable or not growing(
            path, get_path(desired, path), get_path(existing, path), spec.paths.growable
        ):
            pop_path(body, path)
    for path in spec.paths.foreign:
        pop_path(body, path)
    (body.get("metadata") or {}).pop("ownerReferences", None)
    return body


def update_patch(body: Mapping[str, Any], existing: Mapping[str, Any]) -> dict:
    """The merge patch that lays ``body`` (from :func:`writable_part`) over
    ``existing``: ``body`` itself, guarded by ``existing``'s resourceVersion."""
    patch = dict(body)
    patch["metadata"] = {**(body.get("metadata") or {}), "resourceVersion": _rv(existing)}
    return patch


def created_message(res: Resource, name: str) -> str:
    return f"Created {res.group}/{res.version}, Kind={res.kind}: {name}"


def _key(owner: Mapping[str, Any]) -> tuple[str, int]:
    m = owner["metadata"]
    return (m.get("uid") or "", m.get("generation") or 0)


class ChildApplier:
    """Creates and updates one kind's children; remembers what the API server
    refused, per workload generation (only the latest generation is kept)."""

    def __init__(self, shared: SharedCaches, own_informer: Any, recorder: Any, requeue: Callable[[dict], None]) -> None:
        self.shared = shared
        self.client = shared.mgr.client
        self.own = own_informer
        self.recorder = recorder
        self.requeue = requeue
        #: (uid, generation) -> child -> paths the API server refused on update
        self.rejected: dict[tuple[str, int], dict[str, list[str]]] = {}
        #: (uid, generation) -> why the API server refused to create a child
        self.refused: dict[tuple[str, int], str] = {}

    def unapplied(self, owner: Mapping[str, Any]) -> list[str]:
        """Paths refused on update for the owner's current generation."""
        return [p for paths in self.rejected.get(_key(owner), {}).values() for p in paths]

    async def apply(self, owner: dict, plan: WorkloadPlan, desired: list[tuple[ChildSpec, dict]]) -> None:
        for spec, child in desired:
            if spec.main:
                await self._ensure_local_queue(owner, plan)
            await self._ensure(owner, spec, child)

    async def _ensure_local_queue(self, owner: dict, plan: WorkloadPlan) -> None:
        ns, q, world = plan.o.namespace, plan.queue, plan.world
        if self.shared.get("LocalQueue", ns, q) is not None:
            return
        decision = resolve_local_queue(
            ns, q, world.queue_config, local_queue_exists=False, cluster_queue=self.shared.cluster_queues.get(q)
        )
        if decision.action == "error":
            self.recorder.warning(owner, "LocalQueueError", decision.message)
            raise LocalQueueError(decision.message)
        if decision.action == "create" and decision.local_queue is not None:
            created = await create_local_queue(self.client, decision.local_queue)  # one POST per queue
            if created is None:
                return
            self.shared.expectations.wrote(("LocalQueue", ns, q), None, created)
            self.recorder.normal(owner, "ResourceCreated", created_message(LOCALQUEUES, q))

    async def _ensure(self, owner: dict, spec: ChildSpec, desired: dict) -> None:
        meta = desired["metadata"]
        ns, name = meta.get("namespace") or "", meta["name"]
        existing = self.shared.get(spec.kind, ns, name)
        if existing is None:
            await self._create(owner, spec, desired, ns, name)
            return
        uid = owner["metadata"].get("uid") or ""
        if not is_controlled_by(existing, uid) or _meta(existing).get("deletionTimestamp"):
            return  # adopted or someone else's: read, never write
        body = writable_part(spec, desired, existing)
        if contains(existing, body):
            return
        child = f"{spec.kind}/{name}"
        if child in self.rejected.get(_key(owner), {}):
            return  # refused for this generation already: reported, not retried
        try:
            result = await self.client.patch(CHILD_RESOURCES[spec.kind], name, update_patch(body, existing), ns)
        except ApiError as e:
            if e.invalid or e.forbidden:  # validation or admission (e.g. PVC resize) said no
                self._reject(owner, child, [f"{child}:{p}" for p in differing_paths(existing, body)], e)
                return
            raise
        self.shared.expectations.wrote((spec.kind, ns, name), _rv(existing), result)
        log.info("updated child", extra={"child_kind": spec.kind, "child": name, "paths": differing_paths(existing, body)[:10]})

    async def _create(self, owner: dict, spec: ChildSpec, desired: dict, ns: str, name: str) -> None:
        if not self._owner_alive(owner):
            return  # being deleted or gone: a child now would only race the garbage collector
        try:
            created = await self.client.create(CHILD_RESOURCES[spec.kind], desired)
        except ApiError as e:
            if e.already_exists:
                return  # our cache has not seen it yet
            if e.invalid:
                self._refuse(owner, f"{spec.kind} {name}: {e.message}")
                return
            raise
        self.refused.pop(_key(owner), None)
        self.shared.expectations.wrote((spec.kind, ns, name), None, created)
        self.recorder.normal(owner, "ResourceCreated", created_message(CHILD_RESOURCES[spec.kind], name))

    def _owner_alive(self, owner: dict) -> bool:
        """The owner, as the cache shows it at write time, exists with the same
        UID and is not being deleted."""
        m = owner["metadata"]
        current = self.own.get(m["name"], m.get("namespace"))
        return current is not None and _meta(current).get("uid") == m.get("uid") and not _meta(current).get("deletionTimestamp")

    def _refuse(self, owner: dict, message: str) -> None:
        """The API server refused to create a child built from this spec: the
        workload goes to ERROR (next pass) until the spec changes."""
        key = _key(owner)
        self.refused = {k: v for k, v in self.refused.items() if k[0] != key[0]}
        self.refused[key] = message[:2000]
        self.requeue(owner)

    def _reject(self, owner: dict, child: str, paths: list[str], error: ApiError) -> None:
        """The API server refused a change: remember it for the
        SpecChangeNotApplied condition of the next pass and tell the user."""
        key = _key(owner)
        for k in [k for k in self.rejected if k[0] == key[0] and k != key]:
            del self.rejected[k]
        self.rejected.setdefault(key, {})[child] = paths
        self.recorder.warning(owner, "SpecChangeRejected", f"{', '.join(paths)}: {error.message}"[:1000])
        self.requeue(owner)
