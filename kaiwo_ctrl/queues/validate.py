"""Bad-input checks for a KaiwoQueueConfig spec.

:func:`validate` returns a list of :class:`Problem`, each naming the offending
item by its path in the spec, e.g.::

    spec.clusterQueues[1].spec.resourceGroups[0].flavors[0].name: flavor "x" is not defined in spec.resourceFlavors

Every problem carries the kind and name (or list index) of the item it makes
unusable; :func:`kaiwo_ctrl.queues.kueue.desired_kueue_objects` leaves exactly
those items out and holds their existing Kueue objects, so the good items still
sync and nothing that already works is torn down.

Limits follow the API reference (clusterQueues <= 10, workloadPriorityClasses <= 5,
flavor nodeLabels <= 10, taints <= 5, tolerations <= 5, resourceFlavors <= 20,
topologies <= 10) and the Kueue v1beta2 schema where that is stricter: a
ResourceFlavor holds at most 8 nodeLabels (the ``kaiwo/worker`` label is added
only to flavors without labels of their own), a Topology 1..8 levels here (Kueue
allows 16; the Kaiwo schema 8).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kaiwo_ctrl.runtime.objects.quantity import QuantityError, parse_quantity

from .constants import (
    CLUSTER_QUEUE,
    HOSTNAME_LABEL,
    QUOTA_FIELDS,
    RESOURCE_FLAVOR,
    TOPOLOGY,
    WORKLOAD_PRIORITY_CLASS,
)
from .translate import entry_name, translate_cluster_queue_spec

LIMITS = {
    "clusterQueues": 10,
    "resourceFlavors": 20,
    "workloadPriorityClasses": 5,
    "topologies": 10,
}
FLAVOR_NODE_LABELS_MAX = 10  # Kaiwo schema
KUEUE_FLAVOR_NODE_LABELS_MAX = 8  # Kueue v1beta2 ResourceFlavor.spec.nodeLabels maxProperties
FLAVOR_TAINTS_MAX = 5
FLAVOR_TOLERATIONS_MAX = 5
TOPOLOGY_LEVELS_MAX = 8
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1

_KIND_OF_LIST = {
    "clusterQueues": CLUSTER_QUEUE,
    "resourceFlavors": RESOURCE_FLAVOR,
    "workloadPriorityClasses": WORKLOAD_PRIORITY_CLASS,
    "topologies": TOPOLOGY,
}
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")

#: Records one problem of the entry being checked: ``bad(path below the entry, message)``.
_Bad = Callable[[str, str], None]


@dataclass(frozen=True)
class Problem:
    """One bad item. ``kind``/``name``/``index`` identify the queue-config entry it
    disables (``None`` when the problem does not disable an entry)."""

    path: str
    message: str
    kind: str | None = None
    name: str | None = None
    index: int | None = None

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


def _subdomain_problem(name: Any) -> str | None:
    if not isinstance(name, str) or not name:
        return "name is required"
    if len(name) > 253 or not _DNS1123_SUBDOMAIN.match(name):
        return f"name {name!r} is not a valid Kubernetes object name (lower-case RFC 1123 subdomain)"
    return None


def _name_path(list_name: str, index: int, entry: Mapping[str, Any]) -> str:
    if list_name in ("clusterQueues", "resourceFlavors"):
        return f"spec.{list_name}[{index}].name"
    return f"spec.{list_name}[{index}].metadata.name"


def _check_list_entries(spec: Mapping[str, Any], list_name: str, out: list[Problem]) -> None:
    """Limits, names and duplicates of one top-level list."""
    entries = spec.get(list_name) or []
    kind = _KIND_OF_LIST[list_name]
    if not isinstance(entries, list):
        out.append(Problem(f"spec.{list_name}", "must be a list", kind))
        return
    limit = LIMITS[list_name]
    first_seen: dict[str | None, int] = {}  # (None never gets past the name check)
    for i, entry in enumerate(entries):
        if not isinstance(entry, Mapping):
            out.append(Problem(f"spec.{list_name}[{i}]", "must be an object", kind, None, i))
            continue
        name = entry_name(entry)
        if not isinstance(name, str):
            name = None
        if i >= limit:
            out.append(
                Problem(
                    f"spec.{list_name}[{i}]",
                    f"exceeds the limit of {limit} {list_name}; item {name!r} is ignored",
                    kind,
                    name,
                    i,
                )
            )
            continue
        bad_name = _subdomain_problem(name)
        if bad_name:
            out.append(Problem(_name_path(list_name, i, entry), bad_name, kind, name or None, i))
            continue
        if name in first_seen:
            out.append(
                Problem(
                    _name_path(list_name, i, entry),
                    f"duplicate name {name!r} (also at spec.{list_name}[{first_seen[name]}])",
                    kind,
                    name,
                    i,
                )
            )
        else:
            first_seen[name] = i


def _str_name(entry: Any) -> str | None:
    name = entry_name(entry)
    return name if isinstance(name, str) else None


def _check_flavor(i: int, entry: Mapping[str, Any], out: list[Problem]) -> None:
    name = _str_name(entry)
    base = f"spec.resourceFlavors[{i}]"

    def bad(path: str, message: str) -> None:
        out.append(Problem(f"{base}.{path}", message, RESOURCE_FLAVOR, name, i))

    labels = entry.get("nodeLabels") or {}
    if not isinstance(labels, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
    ):
        bad("nodeLabels", "must be a map of label keys to string values")
        labels = {}
    if len(labels) > FLAVOR_NODE_LABELS_MAX:
        bad("nodeLabels", f"has {len(labels)} entries, more than the limit of {FLAVOR_NODE_LABELS_MAX}")
    elif len(labels) > KUEUE_FLAVOR_NODE_LABELS_MAX:
        bad("nodeLabels", f"has {len(labels)} entries; a Kueue ResourceFlavor allows at most {KUEUE_FLAVOR_NODE_LABELS_MAX}")
    for list_name, limit in (("taints", FLAVOR_TAINTS_MAX), ("tolerations", FLAVOR_TOLERATIONS_MAX)):
        items = entry.get(list_name) or []
        if not isinstance(items, list):
            bad(list_name, "must be a list")
        elif len(items) > limit:
            bad(list_name, f"has {len(items)} items, more than the limit of {limit}")
    topology_name = entry.get("topologyName")
    if topology_name and (not isinstance(topology_name, str) or not _DNS1123_SUBDOMAIN.match(topology_name)):
        bad("topologyName", f"{topology_name!r} is not a valid Topology name")


def _check_quantity(value: Any) -> str | None:
    if value is None:
        return None
    try:
        amount = parse_quantity(value)
    except QuantityError:
        return f"{value!r} is not a valid quantity"
    if amount < 0:
        return f"{value!r} must not be negative"
    return None


def _check_cluster_queue(i: int, entry: Mapping[str, Any], flavor_names: set[str], out: list[Problem]) -> None:
    name = _str_name(entry)
    base = f"spec.clusterQueues[{i}]"

    def bad(path: str, message: str) -> None:
        out.append(Problem(f"{base}.{path}", message, CLUSTER_QUEUE, name, i))

    namespaces = entry.get("namespaces") or []
    if not isinstance(namespaces, list):
        bad("namespaces", "must be a list of namespace names")
        namespaces = []
    for j, ns in enumerate(namespaces):
        if not isinstance(ns, str) or len(ns) > 63 or not _DNS1123_LABEL.match(ns):
            bad(f"namespaces[{j}]", f"{ns!r} is not a valid namespace name")

    raw = entry.get("spec") or {}
    if not isinstance(raw, Mapping):
        bad("spec", "must be an object")
        return
    spec, translation_problems = translate_cluster_queue_spec(raw)
    for problem in translation_problems:
        path, _, message = problem.partition(": ")
        bad(f"spec.{path}" if path != "spec" else "spec", message)
    if translation_problems:
        return  # the remaining checks assume a well-formed spec
    _check_policies(spec, bad)
    _check_resource_groups(spec, flavor_names, bad)


def _check_policies(spec: Mapping[str, Any], bad: _Bad) -> None:
    """Flavor fungibility and preemption settings Kueue only accepts together."""
    fungibility = spec.get("flavorFungibility") or {}
    if fungibility.get("preference") and not (
        fungibility.get("whenCanBorrow") == "TryNextFlavor" and fungibility.get("whenCanPreempt") == "TryNextFlavor"
    ):
        bad(
            "spec.flavorFungibility.preference",
            "can only be set when whenCanBorrow and whenCanPreempt are both TryNextFlavor",
        )
    preemption = spec.get("preemption") or {}
    borrow_policy = (preemption.get("borrowWithinCohort") or {}).get("policy", "Never")
    if preemption.get("reclaimWithinCohort", "Never") == "Never" and borrow_policy != "Never":
        bad(
            "spec.preemption.borrowWithinCohort.policy",
            f"{borrow_policy!r} requires reclaimWithinCohort other than Never",
        )


def _check_resource_groups(spec: Mapping[str, Any], flavor_names: set[str], bad: _Bad) -> None:
    """Each resource covered by one group only, each flavor used once, quotas for every covered resource."""
    seen_covered: dict[str, int] = {}
    seen_flavors: dict[str, int] = {}
    has_cohort = bool(spec.get("cohortName"))
    groups = spec.get("resourceGroups") or []
    if not isinstance(groups, list):
        bad("spec.resourceGroups", "must be a list")
        groups = []
    for g, group in enumerate(groups):
        gpath = f"spec.resourceGroups[{g}]"
        if not isinstance(group, Mapping):
            bad(gpath, "must be an object")
            continue
        covered = group.get("coveredResources") or []
        if not isinstance(covered, list) or not all(isinstance(c, str) for c in covered):
            bad(f"{gpath}.coveredResources", "must be a list of resource names")
            continue
        if not covered:
            bad(f"{gpath}.coveredResources", "must list at least one resource")
        for resource in covered:
            if resource in seen_covered:
                bad(
                    f"{gpath}.coveredResources",
                    f"resource {resource!r} is already covered by spec.resourceGroups[{seen_covered[resource]}]",
                )
            else:
                seen_covered[resource] = g
        if len(set(covered)) != len(covered):
            bad(f"{gpath}.coveredResources", "lists a resource more than once")
        flavors = group.get("flavors") or []
        if not isinstance(flavors, list) or not flavors:
            bad(f"{gpath}.flavors", "must list at least one flavor")
            continue
        for f, flavor in enumerate(flavors):
            fpath = f"{gpath}.flavors[{f}]"
            resources = flavor.get("resources") if isinstance(flavor, Mapping) else None
            if not isinstance(flavor, Mapping) or not isinstance(resources or [], list) or not all(
                isinstance(r, Mapping) for r in resources or []
            ):
                bad(fpath, "must be an object with a name and a list of resources")
                continue
            _check_flavor_name(fpath, flavor.get("name"), g, flavor_names, seen_flavors, bad)
            _check_flavor_quotas(fpath, flavor, covered, has_cohort, bad)


def _check_flavor_name(
    fpath: str, fname: Any, group: int, flavor_names: set[str], seen_flavors: dict[str, int], bad: _Bad
) -> None:
    if not fname:
        bad(f"{fpath}.name", "name is required")
    elif fname not in flavor_names:
        bad(f"{fpath}.name", f"flavor {fname!r} is not defined in spec.resourceFlavors")
    if fname:
        if fname in seen_flavors:
            bad(f"{fpath}.name", f"flavor {fname!r} is used more than once in this ClusterQueue")
        else:
            seen_flavors[fname] = group


def _check_flavor_quotas(fpath: str, flavor: Mapping[str, Any], covered: list[str], has_cohort: bool, bad: _Bad) -> None:
    given = {r.get("name") for r in flavor.get("resources") or []}
    for resource in covered:
        if resource not in given:
            bad(f"{fpath}.resources", f"missing a quota for covered resource {resource!r}")
    for r, res in enumerate(flavor.get("resources") or []):
        rpath = f"{fpath}.resources[{r}]"
        if res.get("name") not in covered:
            continue  # dropped during conversion (not covered)
        if res.get("nominalQuota") is None:
            bad(f"{rpath}.nominalQuota", "is required")
        for key in QUOTA_FIELDS:
            quantity_problem = _check_quantity(res.get(key))
            if quantity_problem:
                bad(f"{rpath}.{key}", quantity_problem)
        if res.get("borrowingLimit") is not None and not has_cohort:
            bad(f"{rpath}.borrowingLimit", "requires the ClusterQueue to be in a cohort")


def _check_priority_class(i: int, entry: Mapping[str, Any], out: list[Problem]) -> None:
    value = entry.get("value")
    if isinstance(value, bool) or not isinstance(value, int):
        out.append(
            Problem(
                f"spec.workloadPriorityClasses[{i}].value",
                "is required and must be an integer",
                WORKLOAD_PRIORITY_CLASS,
                _str_name(entry),
                i,
            )
        )
    elif not INT32_MIN <= value <= INT32_MAX:
        out.append(
            Problem(
                f"spec.workloadPriorityClasses[{i}].value",
                f"{value} is outside the 32-bit integer range",
                WORKLOAD_PRIORITY_CLASS,
                _str_name(entry),
                i,
            )
        )


def _check_topology(i: int, entry: Mapping[str, Any], out: list[Problem]) -> None:
    name = _str_name(entry)
    path = f"spec.topologies[{i}].spec.levels"

    def bad(message: str, sub: str = "") -> None:
        out.append(Problem(path + sub, message, TOPOLOGY, name, i))

    topo_spec = entry.get("spec") or {}
    levels = topo_spec.get("levels") if isinstance(topo_spec, Mapping) else None
    if not isinstance(levels, list):
        levels = []
    if not 1 <= len(levels) <= TOPOLOGY_LEVELS_MAX:
        bad(f"must have between 1 and {TOPOLOGY_LEVELS_MAX} levels, has {len(levels)}")
    labels = [lvl.get("nodeLabel") if isinstance(lvl, Mapping) else None for lvl in levels]
    for j, label in enumerate(labels):
        if not label:
            bad("nodeLabel is required", f"[{j}].nodeLabel")
        elif not isinstance(label, str):
            bad("nodeLabel must be a string", f"[{j}].nodeLabel")
        elif labels.index(label) != j:
            bad(f"level {label!r} is listed more than once", f"[{j}].nodeLabel")
        elif label == HOSTNAME_LABEL and j != len(labels) - 1:
            bad(f"{HOSTNAME_LABEL} may only be the last level", f"[{j}].nodeLabel")


def entries(spec: Mapping[str, Any], list_name: str) -> list[Any]:
    """The entries of a top-level list (``[]`` when missing or not a list)."""
    value = spec.get(list_name)
    return value if isinstance(value, list) else []


def validate(spec: Mapping[str, Any] | None) -> list[Problem]:
    """All problems of a queue-config spec (empty list = valid). Pure."""
    spec = spec if isinstance(spec, Mapping) else {}
    out: list[Problem] = []
    for list_name in ("resourceFlavors", "clusterQueues", "workloadPriorityClasses", "topologies"):
        _check_list_entries(spec, list_name, out)

    flavor_names = {n for n in map(_str_name, entries(spec, "resourceFlavors")) if n is not None}
    for i, entry in enumerate(entries(spec, "resourceFlavors")):
        if isinstance(entry, Mapping):
            _check_flavor(i, entry, out)
    for i, entry in enumerate(entries(spec, "clusterQueues")):
        if isinstance(entry, Mapping):
            _check_cluster_queue(i, entry, flavor_names, out)
    for i, entry in enumerate(entries(spec, "workloadPriorityClasses")):
        if isinstance(entry, Mapping):
            _check_priority_class(i, entry, out)
    for i, entry in enumerate(entries(spec, "topologies")):
        if isinstance(entry, Mapping):
            _check_topology(i, entry, out)
    return out
