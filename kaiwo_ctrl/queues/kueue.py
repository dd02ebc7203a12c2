"""KaiwoQueueConfig spec -> desired Kueue objects (the queue config is authoritative).

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

from kaiwo_ctrl.runtime.objects import ownership

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
from .translate import CLUSTER_QUEUE_V1BETA2_FIELDS, entry_name, shape_problems, translate_cluster_queue_spec
from .validate import entries, validate

__all__ = [
    "CLUSTER_QUEUE_V1BETA2_FIELDS",
    "DesiredState",
    "cluster_queue",
    "desired_kueue_objects",
    "entry_name",
    "local_queue",
    "managed_labels",
    "order_resources",
    "owner_reference",
    "resource_flavor",
    "shape_problems",
    "topology",
    "translate_cluster_queue_spec",
    "workload_priority_class",
]

def order_resources(spec: Mapping[str, Any]) -> dict[str, Any]:
    """Within every flavor, order resources as ``coveredResources`` lists them and drop
    resources that are not covered (Kueue validates flavors against
    ``coveredResources``). Returns a new spec."""
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
    """A controller owner reference to the named object (the one helper in
    :mod:`kaiwo_ctrl.runtime.objects.ownership` builds it)."""
    return ownership.owner_reference({"apiVersion": api_version, "kind": kind, "metadata": {"name": name, "uid": uid}})


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
    labels = extra.get("labels")
    user_labels = labels if isinstance(labels, Mapping) else {}
    meta["labels"] = {**user_labels, **managed_labels(qc_name)}
    if isinstance(extra.get("annotations"), Mapping) and extra["annotations"]:
        meta["annotations"] = dict(extra["annotations"])
    if owner is not None:
        meta["ownerReferences"] = [owner]
    return meta


# ---------------------------------------------------------------------------
# Per-kind conversion
# ---------------------------------------------------------------------------


def resource_flavor(
    entry: Mapping[str, Any],
    *,
    qc_name: str = QUEUE_CONFIG_NAME,
    owner: dict | None = None,
    default_topology: str = DEFAULT_TOPOLOGY_NAME,
) -> dict:
    """ResourceFlavor from a ``spec.resourceFlavors[]`` entry.

    ``nodeLabels`` are copied; a flavor without its own node labels gets
    ``kaiwo/worker: "true"`` (Kueue requires a node label on a flavor with a
    topology, and it keeps the flavor to pool nodes). Without a ``topologyName``
    the flavor gets ``default_topology`` (KaiwoConfig ``spec.defaultTopologyName``,
    the Topology the generated queue config defines). ``taints``/``tolerations``
    of the entry are not propagated: only the node labels and the topology reach
    the flavor.

    Decision (the Go operator added ``kaiwo/worker`` whenever ``topologyName`` was
    empty): the node labels never depend on whether the topology is named, so an
    entry without ``topologyName`` and the start-up task's entry of the same name
    with ``topologyName: default-topology`` yield the same flavor. Otherwise the
    flavor's nodeLabels would flip while its topologyName is set, which Kueue
    forbids (immutable), and the flavor could only be re-created - impossible
    while a ClusterQueue uses it. Discovered flavors come out as the Go operator
    wrote them.
    """
    node_labels = dict(entry.get("nodeLabels") or {}) or {WORKER_LABEL: "true"}
    spec: dict[str, Any] = {"nodeLabels": node_labels, "topologyName": entry.get("topologyName") or default_topology}
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


def _named(entry: Mapping[str, Any]) -> str:
    name = entry_name(entry)
    if name is None:  # desired_kueue_objects holds unnamed entries back
        raise ValueError("a queue-config entry without a name cannot be rendered")
    return name


def workload_priority_class(entry: Mapping[str, Any], *, qc_name: str = QUEUE_CONFIG_NAME, owner: dict | None = None) -> dict:
    obj: dict[str, Any] = {
        "apiVersion": KUEUE_API_VERSION,
        "kind": WORKLOAD_PRIORITY_CLASS,
        "metadata": _meta(_named(entry), qc_name, owner, entry_meta=entry.get("metadata")),
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
        "metadata": _meta(_named(entry), qc_name, owner, entry_meta=entry.get("metadata")),
        "spec": {"levels": levels},
    }


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
    *,
    default_topology: str = DEFAULT_TOPOLOGY_NAME,
) -> DesiredState:
    """Build the desired Kueue objects for a queue config (object dict, spec dict or model).

    ``cluster_queue_uids`` maps existing ClusterQueue names to their UIDs (for the
    LocalQueue owner references); ``default_topology`` is the Topology a flavor
    without ``topologyName`` references (KaiwoConfig ``spec.defaultTopologyName``). Items with validation problems are left out of
    ``objects`` and their existing objects are put on ``hold`` so one bad item never
    tears down something that works.
    """
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
            flavors.append(resource_flavor(entry, qc_name=qc_name, owner=owner, default_topology=default_topology))
    for i, entry in enumerate(entries(spec, "workloadPriorityClasses")):
        if usable(WORKLOAD_PRIORITY_CLASS, i, entry_name(entry)):
            wpcs.append(workload_priority_class(entry, qc_name=qc_name, owner=owner))
    for i, entry in enumerate(entries(spec, "clusterQueues")):
        name = entry_name(entry)
        if name is None or not usable(CLUSTER_QUEUE, i, name):
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
