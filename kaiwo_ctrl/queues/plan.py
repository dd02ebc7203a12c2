"""Diff desired Kueue objects against the cluster: what to create, update, re-create, delete.

Only the fields kaiwo-ctrl owns are compared, after applying the CRD defaults the
apiserver fills in and comparing quantities by value, so an unchanged cluster
plans nothing:

* ResourceFlavor: ``spec`` (nodeLabels, nodeTaints, tolerations, topologyName);
* ClusterQueue: ``spec`` (defaults: queueingStrategy, stopPolicy, flavorFungibility,
  preemption, fairSharing.weight);
* LocalQueue: ``spec.clusterQueue``;
* WorkloadPriorityClass: ``value`` and ``description``;
* Topology: ``spec.levels``;
* on every kind: our two labels (plus labels/annotations an entry's own metadata
  asks for; others on the object are left alone) and our owner reference.

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

from kaiwo_ctrl.quantity import QuantityError, parse_quantity

from .constants import (
    ADOPTED_ANNOTATION,
    CLUSTER_QUEUE,
    KIND_ORDER,
    LOCAL_QUEUE,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    QUEUE_CONFIG_LABEL,
    QUEUE_CONFIG_NAME,
    RESOURCE_FLAVOR,
    TOPOLOGY,
    WORKLOAD_PRIORITY_CLASS,
    Key,
)
from .kueue import translate_cluster_queue_spec


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


# ---------------------------------------------------------------------------
# Normalisation of owned fields
# ---------------------------------------------------------------------------


def _quantity(value: Any) -> Any:
    if value is None:
        return None
    try:
        return parse_quantity(value).normalize()
    except (QuantityError, ArithmeticError):
        return value


def _without_none(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _without_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_none(v) for v in value]
    return value


def normalize_cluster_queue_spec(spec: Mapping[str, Any] | None) -> dict[str, Any]:
    """A v1beta2 ClusterQueue spec with CRD defaults applied and quantities as Decimals.

    A spec still in v1beta1 shape (read through the v1beta1 endpoint) is translated first.
    """
    out, _ = translate_cluster_queue_spec(_without_none(dict(spec or {})))
    out.setdefault("queueingStrategy", "BestEffortFIFO")
    out.setdefault("stopPolicy", "None")
    fung = out.setdefault("flavorFungibility", {})
    fung.setdefault("whenCanBorrow", "MayStopSearch")
    fung.setdefault("whenCanPreempt", "TryNextFlavor")
    pre = out.setdefault("preemption", {})
    pre.setdefault("reclaimWithinCohort", "Never")
    pre.setdefault("withinClusterQueue", "Never")
    pre.setdefault("borrowWithinCohort", {}).setdefault("policy", "Never")
    if "fairSharing" in out:
        out["fairSharing"]["weight"] = _quantity(out["fairSharing"].get("weight", 1))
    if not out.get("resourceGroups"):
        out.pop("resourceGroups", None)
    for group in out.get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            for res in flavor.get("resources") or []:
                for qkey in ("nominalQuota", "borrowingLimit", "lendingLimit"):
                    if qkey in res:
                        res[qkey] = _quantity(res[qkey])
    if out.get("cohortName") == "":
        out.pop("cohortName")
    return out


def _drop_empty(spec: Mapping[str, Any] | None) -> dict[str, Any]:
    return {k: v for k, v in _without_none(dict(spec or {})).items() if v not in ({}, [], "")}


def owned_fields(obj: Mapping[str, Any]) -> Any:
    """The comparable projection of the fields kaiwo-ctrl owns on ``obj``."""
    kind = obj.get("kind")
    if kind == CLUSTER_QUEUE:
        return normalize_cluster_queue_spec(obj.get("spec"))
    if kind == RESOURCE_FLAVOR:
        return _drop_empty(obj.get("spec"))
    if kind == LOCAL_QUEUE:
        return (obj.get("spec") or {}).get("clusterQueue")
    if kind == WORKLOAD_PRIORITY_CLASS:
        return (obj.get("value"), obj.get("description") or "")
    if kind == TOPOLOGY:
        return _without_none((obj.get("spec") or {}).get("levels") or [])
    return _without_none(obj.get("spec"))


def _immutable_change(desired: Mapping[str, Any], existing: Mapping[str, Any]) -> str | None:
    kind = desired.get("kind")
    if kind == TOPOLOGY and owned_fields(desired) != owned_fields(existing):
        return "levels changed (immutable)"
    if kind == LOCAL_QUEUE and owned_fields(desired) != owned_fields(existing):
        return "clusterQueue changed (immutable)"
    if kind == RESOURCE_FLAVOR:
        old = _drop_empty(existing.get("spec"))
        new = _drop_empty(desired.get("spec"))
        if old.get("topologyName"):
            for key in ("topologyName", "nodeLabels", "tolerations"):
                if old.get(key) != new.get(key):
                    return f"{key} changed (immutable once topologyName is set)"
    return None


#: How many users an in-use message names before it summarises the rest.
_USERS_NAMED = 3


def _users(have: Mapping[Key, Mapping[str, Any]]) -> dict[Key, list[str]]:
    """Objects in the cluster that use another one Kueue guards with its
    ``resource-in-use`` finalizer: ResourceFlavor key -> ClusterQueues listing it,
    Topology key -> ResourceFlavors naming it. Objects being deleted use nothing."""
    users: dict[Key, list[str]] = {}
    for (kind, _, name), obj in sorted(have.items()):
        if _deleting(obj):
            continue
        spec = obj.get("spec") or {}
        if kind == CLUSTER_QUEUE:
            flavors = {f.get("name") for g in spec.get("resourceGroups") or [] for f in g.get("flavors") or []}
            for flavor in sorted(f for f in flavors if f):
                users.setdefault((RESOURCE_FLAVOR, None, flavor), []).append(f"ClusterQueue {name}")
        elif kind == RESOURCE_FLAVOR and spec.get("topologyName"):
            users.setdefault((TOPOLOGY, None, spec["topologyName"]), []).append(f"ResourceFlavor {name}")
    return users


def _in_use_reason(immutable: str, users: list[str]) -> str:
    named = ", ".join(users[:_USERS_NAMED]) + (f" and {len(users) - _USERS_NAMED} more" if len(users) > _USERS_NAMED else "")
    return (
        f"{immutable}: not re-created while {named} use{'s' if len(users) == 1 else ''} it "
        "(stop using it, or delete it, to apply the change)"
    )


def _metadata_changes(desired: Mapping[str, Any], existing: Mapping[str, Any]) -> list[str]:
    want = desired.get("metadata") or {}
    have = existing.get("metadata") or {}
    changes = []
    have_labels = have.get("labels") or {}
    if any(have_labels.get(k) != v for k, v in (want.get("labels") or {}).items()):
        changes.append("labels")
    have_annotations = have.get("annotations") or {}
    if any(have_annotations.get(k) != v for k, v in (want.get("annotations") or {}).items()):
        changes.append("annotations")
    have_uids = {ref.get("uid") for ref in have.get("ownerReferences") or []}
    if any(ref.get("uid") not in have_uids for ref in want.get("ownerReferences") or []):
        changes.append("owner reference")
    return changes


def _merged_update(desired: Mapping[str, Any], existing: Mapping[str, Any]) -> dict[str, Any]:
    """The existing object with our labels, owner references and owned fields applied."""
    obj = copy.deepcopy(dict(existing))
    obj["apiVersion"] = desired.get("apiVersion", obj.get("apiVersion"))
    obj["kind"] = desired["kind"]
    meta = obj.setdefault("metadata", {})
    want = desired.get("metadata") or {}
    meta["labels"] = {**(meta.get("labels") or {}), **(want.get("labels") or {})}
    if want.get("annotations"):
        meta["annotations"] = {**(meta.get("annotations") or {}), **want["annotations"]}
    refs = [dict(r) for r in meta.get("ownerReferences") or []]
    for ref in want.get("ownerReferences") or []:
        refs = [r for r in refs if r.get("uid") != ref.get("uid")]
        ref = dict(ref)
        if ref.get("controller") and any(r.get("controller") for r in refs):
            ref["controller"] = False  # only one controller reference is allowed
        refs.append(ref)
    if refs:
        meta["ownerReferences"] = refs
    kind = desired["kind"]
    if kind == WORKLOAD_PRIORITY_CLASS:
        obj["value"] = desired.get("value")
        if desired.get("description"):
            obj["description"] = desired["description"]
        else:
            obj.pop("description", None)
    elif kind == LOCAL_QUEUE:
        obj.setdefault("spec", {})["clusterQueue"] = desired["spec"]["clusterQueue"]
    else:
        obj["spec"] = copy.deepcopy(desired.get("spec") or {})
    return obj


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
        if current is not None and _deleting(current):
            plan.blocked.append(copy.deepcopy(dict(want)))
            plan.reasons[key] = "waiting for the old object to finish deleting"
            continue
        if current is None:
            plan.creates.append(copy.deepcopy(dict(want)))
            plan.reasons[key] = "missing"
            continue
        adopted = not _is_ours(current, queue_config_name) or _adopted(current)
        if adopted:
            want = _without_owner_refs(want)
        immutable = _immutable_change(want, current)
        if immutable and users.get(key):
            plan.conflicts.append(copy.deepcopy(dict(want)))
            plan.reasons[key] = _in_use_reason(immutable, users[key])
            continue
        if immutable:
            recreate = copy.deepcopy(dict(want))
            if adopted:
                _mark_adopted(recreate)
            plan.recreates.append(recreate)
            plan.reasons[key] = immutable
            continue
        reasons = []
        if owned_fields(want) != owned_fields(current):
            reasons.append("value" if want.get("kind") == WORKLOAD_PRIORITY_CLASS else "spec")
        reasons.extend(_metadata_changes(want, current))
        if reasons:
            update = _merged_update(want, current)
            if adopted:
                _mark_adopted(update)
            plan.updates.append(update)
            plan.reasons[key] = ", ".join(reasons) + " differ" if len(reasons) > 1 else reasons[0] + " differs"
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

