"""KaiwoQueueConfig spec -> desired Kueue objects (spec 15.7).

Kueue API versions written (Kueue v0.19.2 CRDs): every kind at
``kueue.x-k8s.io/v1beta2``, the storage version. That includes Topology, which
Kueue v0.19 serves at v1beta1 (deprecated) and v1beta2 only - the older
``v1alpha1`` no longer exists.

The queue config embeds ClusterQueue specs in the v1beta1 shape users know.
:func:`translate_cluster_queue_spec` turns one into a v1beta2 spec; the
translations it makes (mirroring Kueue's own v1beta1 -> v1beta2 conversion):

* ``cohort`` -> ``cohortName`` (an empty ``cohort`` is left out; a v1beta2
  ``cohortName`` written directly is accepted too);
* ``admissionChecks: [name, ...]`` (removed in v1beta2) ->
  ``admissionChecksStrategy: {admissionChecks: [{name: ...}, ...]}`` (giving
  both is an error, as it was in v1beta1);
* ``flavorFungibility.whenCanBorrow: Borrow`` -> ``MayStopSearch`` and
  ``flavorFungibility.whenCanPreempt: Preempt`` -> ``MayStopSearch`` (the
  v1beta1 values v1beta2 dropped from its enums);
* every other field has the same name and shape in both versions and is copied.

A field v1beta2 does not know is reported as a problem instead of being written:
the apiserver would prune it silently. LocalQueue, ResourceFlavor,
WorkloadPriorityClass and Topology have identical schemas in v1beta1 and v1beta2.

Ownership: every object gets the labels ``app.kubernetes.io/managed-by:
kaiwo-ctrl`` and ``kaiwo.silogen.ai/queue-config: kaiwo``. ResourceFlavors,
ClusterQueues, WorkloadPriorityClasses and Topologies get a controller owner
reference to the KaiwoQueueConfig; LocalQueues a controller owner reference to
their ClusterQueue (so removing a ClusterQueue garbage-collects its LocalQueues).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .constants import (
    CLUSTER_QUEUE,
    DEFAULT_TOPOLOGY_NAME,
    KUEUE_API_VERSION,
    LOCAL_QUEUE,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    QUEUE_CONFIG_API_VERSION,
    QUEUE_CONFIG_KIND,
    QUEUE_CONFIG_LABEL,
    QUEUE_CONFIG_NAME,
    RESOURCE_FLAVOR,
    TOPOLOGY,
    TOPOLOGY_API_VERSION,
    WORKER_LABEL,
    WORKLOAD_PRIORITY_CLASS,
    Key,
)

# ---------------------------------------------------------------------------
# v1beta1 -> v1beta2 ClusterQueue spec translation
# ---------------------------------------------------------------------------

#: Known v1beta2 ClusterQueue spec fields (from the Kueue v0.19.2 CRD schema) and
#: their types: a dict = object with these keys, a one-element list = list whose
#: items have that shape, and leaf tags ``str``, ``int``, ``quantity`` (int or
#: string), ``strs`` (list of strings) and ``map`` (string -> string).
CLUSTER_QUEUE_V1BETA2_FIELDS: dict[str, Any] = {
    "admissionChecksStrategy": {"admissionChecks": [{"name": "str", "onFlavors": "strs"}]},
    "admissionScope": {"admissionMode": "str"},
    "cohortName": "str",
    "concurrentAdmissionPolicy": {"migration": {"constraints": {"lastAcceptableFlavorName": "str"}, "mode": "str"}},
    "fairSharing": {"weight": "quantity"},
    "flavorFungibility": {"preference": "str", "whenCanBorrow": "str", "whenCanPreempt": "str"},
    "namespaceSelector": {
        "matchExpressions": [{"key": "str", "operator": "str", "values": "strs"}],
        "matchLabels": "map",
    },
    "preemption": {
        "borrowWithinCohort": {"maxPriorityThreshold": "int", "policy": "str"},
        "reclaimWithinCohort": "str",
        "withinClusterQueue": "str",
    },
    "queueingStrategy": "str",
    "resourceGroups": [
        {
            "coveredResources": "strs",
            "flavors": [
                {
                    "name": "str",
                    "resources": [
                        {
                            "name": "str",
                            "nominalQuota": "quantity",
                            "borrowingLimit": "quantity",
                            "lendingLimit": "quantity",
                        }
                    ],
                }
            ],
        }
    ],
    "stopPolicy": "str",
}

_FUNGIBILITY_VALUES = {("whenCanBorrow", "Borrow"): "MayStopSearch", ("whenCanPreempt", "Preempt"): "MayStopSearch"}


def _is_str_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


_LEAF_CHECKS = {
    "str": (lambda v: isinstance(v, str), "must be a string"),
    "int": (_is_int, "must be an integer"),
    "quantity": (lambda v: _is_int(v) or isinstance(v, str), "must be a quantity (integer or string)"),
    "strs": (_is_str_list, "must be a list of strings"),
    "map": (lambda v: isinstance(v, Mapping) and all(isinstance(x, str) for x in v.values()), "must be a map of strings"),
}


def shape_problems(value: Any, shape: Any, path: str = "") -> list[str]:
    """``"<path>: <reason>"`` for every field of ``value`` that the v1beta2 schema
    ``shape`` does not declare (the apiserver would prune it) or whose type is wrong."""
    where = path or "spec"
    if isinstance(shape, str):
        check, reason = _LEAF_CHECKS[shape]
        return [] if check(value) else [f"{where}: {reason}"]
    if isinstance(shape, list):
        if not isinstance(value, list):
            return [f"{where}: must be a list"]
        out: list[str] = []
        for i, item in enumerate(value):
            out.extend(shape_problems(item, shape[0], f"{path}[{i}]"))
        return out
    if not isinstance(value, Mapping):
        return [f"{where}: must be an object"]
    out = []
    for key, sub in value.items():
        sub_path = f"{path}.{key}" if path else str(key)
        if key not in shape:
            out.append(f"{sub_path}: unknown field, not part of the Kueue v1beta2 ClusterQueue spec")
        elif sub is not None:
            out.extend(shape_problems(sub, shape[key], sub_path))
    return out


def _drop_nulls(value: Any) -> Any:
    """Deep copy without ``None`` map values (the apiserver drops nulls of non-nullable fields)."""
    if isinstance(value, Mapping):
        return {k: _drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_nulls(v) for v in value]
    return copy.deepcopy(value)


def translate_cluster_queue_spec(spec: Mapping[str, Any] | None) -> tuple[dict[str, Any], list[str]]:
    """Translate a ClusterQueue spec written with v1beta1 names into a v1beta2 spec.

    Returns ``(v1beta2_spec, problems)``; each problem is ``"<field path>: <reason>"``
    relative to the spec. The input is not modified. ``None`` values are dropped, and
    so are top-level empty strings (they mean "unset"; an empty cohort name would
    fail the schema pattern).
    """
    if not isinstance(spec, Mapping):
        return {}, [] if spec is None else ["spec: must be an object"]
    src = {k: _drop_nulls(v) for k, v in spec.items() if v is not None and v != ""}
    problems: list[str] = []

    cohort = src.pop("cohort", None)
    if cohort is not None and not isinstance(cohort, str):
        problems.append("cohort: must be a string")
    elif cohort is not None:
        existing = src.get("cohortName")
        if existing is not None and existing != cohort:
            problems.append(f"cohort: {cohort!r} conflicts with cohortName {existing!r}; set only one")
        else:
            src["cohortName"] = cohort

    checks = src.pop("admissionChecks", None)
    if checks is not None and not _is_str_list(checks):
        problems.append("admissionChecks: must be a list of strings")
    elif checks:
        if src.get("admissionChecksStrategy"):
            problems.append("admissionChecks: cannot be used together with admissionChecksStrategy")
        else:
            src["admissionChecksStrategy"] = {"admissionChecks": [{"name": name} for name in checks]}

    fungibility = src.get("flavorFungibility")
    if isinstance(fungibility, Mapping):
        fungibility = dict(fungibility)
        for (key, old), new in _FUNGIBILITY_VALUES.items():
            if fungibility.get(key) == old:
                fungibility[key] = new
        src["flavorFungibility"] = fungibility

    problems.extend(shape_problems(src, CLUSTER_QUEUE_V1BETA2_FIELDS))
    return src, problems


def order_resources(spec: Mapping[str, Any]) -> dict[str, Any]:
    """Within every flavor, order resources as ``coveredResources`` lists them and drop
    resources that are not covered (spec 15.7). Returns a new spec."""
    out = copy.deepcopy(dict(spec))
    for group in out.get("resourceGroups") or []:
        covered = list(group.get("coveredResources") or [])
        for flavor in group.get("flavors") or []:
            by_name = {r.get("name"): r for r in flavor.get("resources") or []}
            flavor["resources"] = [by_name[name] for name in covered if name in by_name]
    return out


# ---------------------------------------------------------------------------
# Metadata helpers
# ---------------------------------------------------------------------------


def managed_labels(queue_config_name: str = QUEUE_CONFIG_NAME) -> dict[str, str]:
    return {MANAGED_BY_LABEL: MANAGED_BY_VALUE, QUEUE_CONFIG_LABEL: queue_config_name}


def owner_reference(api_version: str, kind: str, name: str, uid: str) -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": name,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _meta(
    name: str,
    qc_name: str,
    owner: dict | None,
    namespace: str | None = None,
    entry_meta: Any = None,
) -> dict[str, Any]:
    """Object metadata; labels/annotations given in an entry's own ``metadata``
    (WorkloadPriorityClass, Topology) are kept, our ownership labels win."""
    meta: dict[str, Any] = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    extra = entry_meta if isinstance(entry_meta, Mapping) else {}
    user_labels = extra.get("labels") if isinstance(extra.get("labels"), Mapping) else {}
    meta["labels"] = {**user_labels, **managed_labels(qc_name)}
    if isinstance(extra.get("annotations"), Mapping) and extra["annotations"]:
        meta["annotations"] = dict(extra["annotations"])
    if owner is not None:
        meta["ownerReferences"] = [owner]
    return meta


# ---------------------------------------------------------------------------
# Per-kind conversion
# ---------------------------------------------------------------------------


def resource_flavor(entry: Mapping[str, Any], *, qc_name: str = QUEUE_CONFIG_NAME, owner: dict | None = None) -> dict:
    """ResourceFlavor from a ``spec.resourceFlavors[]`` entry.

    ``nodeLabels`` are copied; without a ``topologyName`` the flavor gets
    ``topologyName: default-topology`` and the node label ``kaiwo/worker: "true"``.
    ``taints``/``tolerations`` of the entry are not propagated (spec 15.7).
    """
    node_labels = dict(entry.get("nodeLabels") or {})
    topology = entry.get("topologyName") or ""
    if not topology:
        topology = DEFAULT_TOPOLOGY_NAME
        node_labels[WORKER_LABEL] = "true"
    spec: dict[str, Any] = {}
    if node_labels:
        spec["nodeLabels"] = node_labels
    spec["topologyName"] = topology
    return {
        "apiVersion": KUEUE_API_VERSION,
        "kind": RESOURCE_FLAVOR,
        "metadata": _meta(entry["name"], qc_name, owner),
        "spec": spec,
    }


def cluster_queue(entry: Mapping[str, Any], *, qc_name: str = QUEUE_CONFIG_NAME, owner: dict | None = None) -> dict:
    """ClusterQueue (v1beta2) from a ``spec.clusterQueues[]`` entry; translation problems
    are ignored here (:mod:`.validate` reports them and holds the item)."""
    spec, _ = translate_cluster_queue_spec(entry.get("spec"))
    return {
        "apiVersion": KUEUE_API_VERSION,
        "kind": CLUSTER_QUEUE,
        "metadata": _meta(entry["name"], qc_name, owner),
        "spec": order_resources(spec),
    }


def local_queue(
    namespace: str,
    cluster_queue_name: str,
    *,
    qc_name: str | None = QUEUE_CONFIG_NAME,
    cluster_queue_uid: str | None = None,
    controller: bool = True,
) -> dict:
    """LocalQueue ``<cq>`` in ``namespace`` pointing at ClusterQueue ``<cq>``.

    ``qc_name=None`` leaves out the queue-config label: such a LocalQueue is not
    owned by the queue-config sync (the workload helper's LocalQueues).
    """
    labels = managed_labels(qc_name) if qc_name else {MANAGED_BY_LABEL: MANAGED_BY_VALUE}
    meta: dict[str, Any] = {"name": cluster_queue_name, "namespace": namespace, "labels": labels}
    if cluster_queue_uid:
        ref = owner_reference(KUEUE_API_VERSION, CLUSTER_QUEUE, cluster_queue_name, cluster_queue_uid)
        if not controller:
            # plain (non-controller) reference, as a workload-created LocalQueue gets
            del ref["controller"], ref["blockOwnerDeletion"]
        meta["ownerReferences"] = [ref]
    return {
        "apiVersion": KUEUE_API_VERSION,
        "kind": LOCAL_QUEUE,
        "metadata": meta,
        "spec": {"clusterQueue": cluster_queue_name},
    }


def workload_priority_class(entry: Mapping[str, Any], *, qc_name: str = QUEUE_CONFIG_NAME, owner: dict | None = None) -> dict:
    obj: dict[str, Any] = {
        "apiVersion": KUEUE_API_VERSION,
        "kind": WORKLOAD_PRIORITY_CLASS,
        "metadata": _meta(entry_name(entry), qc_name, owner, entry_meta=entry.get("metadata")),
        "value": entry.get("value"),
    }
    if entry.get("description"):
        obj["description"] = entry["description"]
    return obj


def topology(entry: Mapping[str, Any], *, qc_name: str = QUEUE_CONFIG_NAME, owner: dict | None = None) -> dict:
    levels = [{"nodeLabel": lvl.get("nodeLabel")} for lvl in (entry.get("spec") or {}).get("levels") or []]
    return {
        "apiVersion": TOPOLOGY_API_VERSION,
        "kind": TOPOLOGY,
        "metadata": _meta(entry_name(entry), qc_name, owner, entry_meta=entry.get("metadata")),
        "spec": {"levels": levels},
    }


def entry_name(entry: Mapping[str, Any]) -> str | None:
    """Name of a queue-config list entry (``name`` or ``metadata.name``; ``None`` unless a non-empty string)."""
    if not isinstance(entry, Mapping):
        return None
    name = entry.get("name")
    if not name:
        meta = entry.get("metadata")
        name = meta.get("name") if isinstance(meta, Mapping) else None
    return name if isinstance(name, str) and name else None


# ---------------------------------------------------------------------------
# Whole desired state
# ---------------------------------------------------------------------------

@dataclass
class DesiredState:
    """What the queue config asks for, after leaving out the bad items.

    * ``objects``: Kueue objects to create/keep in sync, in creation order.
    * ``hold``: keys of existing objects that must be neither updated nor deleted
      (bad items, and LocalQueues the queue-config sync never touches). A key with
      namespace ``None`` matches that kind and name in every namespace.
    * ``waiting``: LocalQueues whose ClusterQueue has no UID yet (not created);
      sync them after the ClusterQueue exists (requeue).
    * ``problems``: validation problems (see :mod:`.validate`).
    """

    objects: list[dict] = field(default_factory=list)
    hold: set[Key] = field(default_factory=set)
    waiting: list[dict] = field(default_factory=list)
    problems: list[Any] = field(default_factory=list)


def _split(queue_config: Any) -> tuple[dict, str, str | None]:
    if hasattr(queue_config, "to_k8s"):
        queue_config = queue_config.to_k8s()
    queue_config = dict(queue_config or {})
    if isinstance(queue_config.get("spec"), Mapping) or "metadata" in queue_config:
        meta = queue_config.get("metadata") or {}
        return dict(queue_config.get("spec") or {}), meta.get("name") or QUEUE_CONFIG_NAME, meta.get("uid")
    return queue_config, QUEUE_CONFIG_NAME, None


def desired_kueue_objects(
    queue_config: Any,
    cluster_queue_uids: Mapping[str, str] | None = None,
) -> DesiredState:
    """Build the desired Kueue objects for a queue config (object dict, spec dict or model).

    ``cluster_queue_uids`` maps existing ClusterQueue names to their UIDs (for the
    LocalQueue owner references). Items with validation problems are left out of
    ``objects`` and their existing objects are put on ``hold`` so one bad item never
    tears down something that works.
    """
    from .validate import entries, validate  # local import: validate uses the translation above

    spec, qc_name, qc_uid = _split(queue_config)
    uids = dict(cluster_queue_uids or {})
    owner = owner_reference(QUEUE_CONFIG_API_VERSION, QUEUE_CONFIG_KIND, qc_name, qc_uid) if qc_uid else None
    problems = validate(spec)
    bad = {(p.kind, p.name) for p in problems if p.kind and p.name is not None}
    bad_indexes = {(p.kind, p.index) for p in problems if p.kind and p.index is not None}
    state = DesiredState(problems=problems)

    def usable(kind: str, index: int, name: str | None) -> bool:
        if not name or (kind, name) in bad or (kind, index) in bad_indexes:
            if name:
                state.hold.add((kind, None, name))
                if kind == CLUSTER_QUEUE:
                    state.hold.add((LOCAL_QUEUE, None, name))
            return False
        return True

    topologies, flavors, wpcs, queues, lqs = [], [], [], [], []
    for i, entry in enumerate(entries(spec, "topologies")):
        if usable(TOPOLOGY, i, entry_name(entry)):
            topologies.append(topology(entry, qc_name=qc_name, owner=owner))
    for i, entry in enumerate(entries(spec, "resourceFlavors")):
        if usable(RESOURCE_FLAVOR, i, entry_name(entry)):
            flavors.append(resource_flavor(entry, qc_name=qc_name, owner=owner))
    for i, entry in enumerate(entries(spec, "workloadPriorityClasses")):
        if usable(WORKLOAD_PRIORITY_CLASS, i, entry_name(entry)):
            wpcs.append(workload_priority_class(entry, qc_name=qc_name, owner=owner))
    for i, entry in enumerate(entries(spec, "clusterQueues")):
        name = entry_name(entry)
        if not usable(CLUSTER_QUEUE, i, name):
            continue
        queues.append(cluster_queue(entry, qc_name=qc_name, owner=owner))
        namespaces = sorted(set(entry.get("namespaces") or []))
        if not namespaces:
            # LocalQueues of a ClusterQueue without namespaces belong to the workload helper.
            state.hold.add((LOCAL_QUEUE, None, name))
            continue
        for ns in namespaces:
            lq = local_queue(ns, name, qc_name=qc_name, cluster_queue_uid=uids.get(name))
            if name in uids:
                lqs.append(lq)
            else:
                state.waiting.append(lq)
                state.hold.add((LOCAL_QUEUE, ns, name))

    for group in (topologies, flavors, wpcs, queues, lqs):
        group.sort(key=lambda o: (o["metadata"].get("namespace") or "", o["metadata"]["name"]))
        state.objects.extend(group)
    return state
