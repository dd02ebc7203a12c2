"""Diff desired Kueue objects against the cluster: what to create, update, re-create, delete.

Only the fields kaiwo-ctrl owns are compared (:mod:`kaiwo_ctrl.queues.owned`
lists them), so an unchanged cluster plans nothing.

Fields Kueue made immutable cannot be updated in place, so a change there plans a
*re-create* (delete, then create): Topology levels, LocalQueue clusterQueue, and a
ResourceFlavor's nodeLabels/tolerations/topologyName once it has a topologyName.
A ResourceFlavor a ClusterQueue in the cluster lists, and a Topology a
ResourceFlavor names, are never re-created: Kueue's ``resource-in-use`` finalizer
would hold the deleted object until nothing uses it, leaving the name blocked
(and the ClusterQueue without its flavor) for as long as it is used. Such a change
is a *conflict* instead: nothing is written, and the status names the object, the
immutable field and its users until they stop using it (their update events
trigger the next sync).

An object already being deleted is neither deleted again nor updated; a desired
object whose namesake is still terminating is reported as *blocked* until it is gone.
So is a desired object that would newly *name* a terminating object (a
ResourceFlavor naming a Topology, a ClusterQueue listing a ResourceFlavor): the
new reference would keep Kueue's finalizer on the terminating object for ever
(the queue config deleted and re-created while garbage collection still deletes
its old Topology), so it is written once the old object is gone.

Deletes are limited to objects carrying both ``app.kubernetes.io/managed-by:
kaiwo-ctrl`` and ``kaiwo.silogen.ai/queue-config: <name>`` that are no longer
desired and not on hold. Objects made by hand are never deleted; a hand-made
object whose name the queue config lists is adopted (updated and labelled, but
given no owner reference, so no garbage collection can reach it)
and annotated ``kaiwo.silogen.ai/adopted: "true"``, which keeps it from being
deleted when the queue config stops listing it (kaiwo-ctrl did not create it).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .constants import (
    ADOPTED_ANNOTATION,
    CLUSTER_QUEUE,
    KIND_ORDER,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    QUEUE_CONFIG_LABEL,
    QUEUE_CONFIG_NAME,
    RESOURCE_FLAVOR,
    TOPOLOGY,
    WORKLOAD_PRIORITY_CLASS,
    Key,
)
from .owned import immutable_change, merged_update, metadata_changes, owned_fields


def object_key(obj: Mapping[str, Any]) -> Key:
    meta = obj.get("metadata") or {}
    return (obj.get("kind", ""), meta.get("namespace") or None, meta.get("name", ""))


def key_str(key: Key) -> str:
    kind, ns, name = key
    return f"{kind} {ns}/{name}" if ns else f"{kind} {name}"


@dataclass
class Plan:
    """Writes needed to make the cluster match.

    ``updates`` are complete objects (the existing one with our fields set, keeping
    its ``resourceVersion``) ready for a PUT. ``recreates`` are desired objects whose
    existing namesake must be deleted first. ``deletes`` are the existing objects.
    ``reasons`` says why each key is in the plan (for events and status messages).
    """

    creates: list[dict] = field(default_factory=list)
    updates: list[dict] = field(default_factory=list)
    recreates: list[dict] = field(default_factory=list)
    deletes: list[dict] = field(default_factory=list)
    #: desired objects whose existing namesake is still being deleted (finalizers,
    #: e.g. Kueue's resource-in-use): nothing to write now, sync again later.
    blocked: list[dict] = field(default_factory=list)
    #: desired objects that change an immutable field of an object still in use:
    #: not re-created (see the module docstring); reported until the users let go.
    conflicts: list[dict] = field(default_factory=list)
    reasons: dict[Key, str] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        """No write to make (``blocked`` items need a later retry, not a write)."""
        return not (self.creates or self.updates or self.recreates or self.deletes)

    def out_of_sync(self) -> list[str]:
        """Status lines for objects that stay out of sync after this plan runs."""
        return [f"{key_str(object_key(o))}: {self.reasons[object_key(o)]}" for o in self.blocked + self.conflicts]

    def describe(self) -> list[str]:
        """One human-readable line per planned write, in plan order."""
        lines = []
        for action, objs in (
            ("create", self.creates),
            ("re-create", self.recreates),
            ("update", self.updates),
            ("delete", self.deletes),
        ):
            for obj in objs:
                key = object_key(obj)
                lines.append(f"{action} {key_str(key)}: {self.reasons.get(key, '')}".rstrip(": "))
        return lines


#: How many users an in-use message names before it summarises the rest.
_USERS_NAMED = 3


def _references(obj: Mapping[str, Any] | None) -> list[Key]:
    """The objects ``obj`` uses that Kueue guards with its ``resource-in-use``
    finalizer: a ClusterQueue's flavors, a ResourceFlavor's Topology."""
    if obj is None:
        return []
    kind, spec = obj.get("kind"), obj.get("spec") or {}
    if kind == CLUSTER_QUEUE:
        flavors = {f.get("name") for g in spec.get("resourceGroups") or [] for f in g.get("flavors") or []}
        return [(RESOURCE_FLAVOR, None, f) for f in sorted(f for f in flavors if isinstance(f, str) and f)]
    if kind == RESOURCE_FLAVOR and isinstance(spec.get("topologyName"), str) and spec["topologyName"]:
        return [(TOPOLOGY, None, spec["topologyName"])]
    return []


def _users(have: Mapping[Key, Mapping[str, Any]]) -> dict[Key, list[str]]:
    """Used object key -> the objects in the cluster using it (see :func:`_references`).
    Objects being deleted use nothing."""
    users: dict[Key, list[str]] = {}
    for (kind, _, name), obj in sorted(have.items()):
        if not _deleting(obj):
            for ref in _references({"kind": kind, **obj}):
                users.setdefault(ref, []).append(f"{kind} {name}")
    return users


def _new_terminating_reference(want: Mapping[str, Any], current: Mapping[str, Any] | None,
                               have: Mapping[Key, Mapping[str, Any]]) -> Key | None:
    """A terminating object ``want`` names and ``current`` does not name yet."""
    already = set(_references(current))
    for ref in _references(want):
        if ref not in already and ref in have and _deleting(have[ref]):
            return ref
    return None


def _in_use_reason(immutable: str, users: list[str]) -> str:
    named = ", ".join(users[:_USERS_NAMED]) + (f" and {len(users) - _USERS_NAMED} more" if len(users) > _USERS_NAMED else "")
    return (
        f"{immutable}: not re-created while {named} use{'s' if len(users) == 1 else ''} it "
        "(stop using it, or delete it, to apply the change)"
    )


def _is_ours(obj: Mapping[str, Any], queue_config_name: str) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return labels.get(MANAGED_BY_LABEL) == MANAGED_BY_VALUE and labels.get(QUEUE_CONFIG_LABEL) == queue_config_name


def _adopted(obj: Mapping[str, Any]) -> bool:
    return ((obj.get("metadata") or {}).get("annotations") or {}).get(ADOPTED_ANNOTATION) == "true"


def _mark_adopted(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj.setdefault("metadata", {})
    meta["annotations"] = {**(meta.get("annotations") or {}), ADOPTED_ANNOTATION: "true"}
    return obj


def _without_owner_refs(obj: Mapping[str, Any]) -> dict[str, Any]:
    """An adopted object keeps no owner reference to us: deleting the queue
    config (or a ClusterQueue) must never garbage-collect what an admin made."""
    out = copy.deepcopy(dict(obj))
    (out.get("metadata") or {}).pop("ownerReferences", None)
    return out


def _deleting(obj: Mapping[str, Any]) -> bool:
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))


def _held(key: Key, hold: set[Key]) -> bool:
    return key in hold or (key[0], None, key[2]) in hold


def _order(key: Key, reverse: bool = False) -> tuple:
    kind, ns, name = key
    rank = KIND_ORDER.index(kind) if kind in KIND_ORDER else len(KIND_ORDER)
    return (-rank if reverse else rank, ns or "", name)


def _flatten(existing: Iterable[Mapping[str, Any]] | Mapping[str, Iterable[Mapping[str, Any]]]) -> list[dict]:
    if isinstance(existing, Mapping):
        out = []
        for kind, items in existing.items():
            for item in items:
                item = dict(item)
                item.setdefault("kind", kind)
                out.append(item)
        return out
    return [dict(o) for o in existing]


def plan_sync(
    desired: Iterable[Mapping[str, Any]],
    existing: Iterable[Mapping[str, Any]] | Mapping[str, Iterable[Mapping[str, Any]]],
    hold: Iterable[Key] = (),
    queue_config_name: str = QUEUE_CONFIG_NAME,
) -> Plan:
    """Plan the writes turning ``existing`` into ``desired``.

    ``existing`` is a list of objects (with ``kind``) or a mapping kind -> list (for
    LIST results whose items lack ``kind``). ``hold`` keys (see
    :class:`~kaiwo_ctrl.queues.kueue.DesiredState`) are never updated or deleted.
    """
    hold = set(hold)
    have = {object_key(o): o for o in _flatten(existing)}
    users = _users(have)
    plan = Plan()
    desired_keys: set[Key] = set()
    for want in sorted(desired, key=lambda o: _order(object_key(o))):
        key = object_key(want)
        desired_keys.add(key)
        if _held(key, hold):
            continue
        current = have.get(key)
        ref = None if current is not None and _deleting(current) else _new_terminating_reference(want, current, have)
        if ref is not None:
            plan.blocked.append(copy.deepcopy(dict(want)))
            plan.reasons[key] = f"waiting for {key_str(ref)} to finish deleting"
            continue
        _plan_desired(plan, key, want, current, users.get(key), queue_config_name)
    for key in sorted(have, key=lambda k: _order(k, reverse=True)):
        obj = have[key]
        if (
            key in desired_keys
            or _held(key, hold)
            or not _is_ours(obj, queue_config_name)
            or _adopted(obj)
            or _deleting(obj)
        ):
            continue
        plan.deletes.append(obj)
        plan.reasons[key] = "no longer listed in the queue config"
    return plan


def _plan_desired(
    plan: Plan,
    key: Key,
    want: Mapping[str, Any],
    current: Mapping[str, Any] | None,
    users: list[str] | None,
    queue_config_name: str,
) -> None:
    """Add what one desired object needs to ``plan``: nothing, a create, a re-create,
    an update, or a blocked/conflict entry. ``users`` use ``current`` (see :func:`_users`)."""
    if current is not None and _deleting(current):
        plan.blocked.append(copy.deepcopy(dict(want)))
        plan.reasons[key] = "waiting for the old object to finish deleting"
        return
    if current is None:
        plan.creates.append(copy.deepcopy(dict(want)))
        plan.reasons[key] = "missing"
        return
    adopted = not _is_ours(current, queue_config_name) or _adopted(current)
    if adopted:
        want = _without_owner_refs(want)
    immutable = immutable_change(want, current)
    if immutable and users:
        plan.conflicts.append(copy.deepcopy(dict(want)))
        plan.reasons[key] = _in_use_reason(immutable, users)
        return
    if immutable:
        recreate = copy.deepcopy(dict(want))
        if adopted:
            _mark_adopted(recreate)
        plan.recreates.append(recreate)
        plan.reasons[key] = immutable
        return
    reasons = []
    if owned_fields(want) != owned_fields(current):
        reasons.append("value" if want.get("kind") == WORKLOAD_PRIORITY_CLASS else "spec")
    reasons.extend(metadata_changes(want, current))
    if reasons:
        update = merged_update(want, current)
        if adopted:
            _mark_adopted(update)
        plan.updates.append(update)
        plan.reasons[key] = ", ".join(reasons) + " differ" if len(reasons) > 1 else reasons[0] + " differs"
