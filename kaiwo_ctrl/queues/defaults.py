"""Default ClusterQueue and Topology and *ensure default queue config*.

Entries produced here are in the queue-config shape (the ClusterQueue spec uses
the v1beta1 field names users write, e.g. ``cohort``); :mod:`.kueue` translates.
Everything is deterministic, so re-running on an unchanged cluster gives an
identical spec and the reconciler can skip the write.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kaiwo_ctrl.runtime.objects.apply import contains
from kaiwo_ctrl.runtime.api.defaulting import apply_defaults
from kaiwo_ctrl.runtime.objects.diff import QUANTITY_KEYS

from .constants import (
    CLUSTER_QUEUE_SPEC_DEFAULTS,
    DEFAULT_CLUSTER_QUEUE_NAME,
    DEFAULT_COHORT_NAME,
    DEFAULT_TOPOLOGY_NAME,
    HOSTNAME_LABEL,
    QUOTA_FIELDS,
    QUEUE_CONFIG_API_VERSION,
    QUEUE_CONFIG_KIND,
    QUEUE_CONFIG_NAME,
    TOPOLOGY_BLOCK_LABEL,
    TOPOLOGY_RACK_LABEL,
)
from .nodepools import NodePool, discover, exclude_control_plane_setting, flavor_specs, node_patches

_BINARY_SUFFIXES = (("Ei", 2**60), ("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10))


def format_bytes(value: int) -> str:
    """Integer byte count as a quantity, using the largest binary suffix that divides it exactly."""
    if value == 0:
        return "0"
    for suffix, size in _BINARY_SUFFIXES:
        if value % size == 0:
            return f"{value // size}{suffix}"
    return str(value)


def format_quota(resource: str, value: int) -> str:
    return format_bytes(value) if resource == "memory" else str(value)


def covered_resources(pools: Iterable[NodePool]) -> list[str]:
    """``cpu``, ``memory``, then the GPU keys present in any pool, sorted."""
    gpu_keys = sorted({key for p in pools for key in p.quota if key not in ("cpu", "memory")})
    return ["cpu", "memory", *gpu_keys]


def default_cluster_queue(
    pools: Iterable[NodePool],
    name: str = DEFAULT_CLUSTER_QUEUE_NAME,
    cohort: str = DEFAULT_COHORT_NAME,
) -> dict[str, Any]:
    """The queue-config ``clusterQueues`` entry built from the discovered pools."""
    pools = sorted(pools, key=NodePool.sort_key)
    spec: dict[str, Any] = {"namespaceSelector": {}, "cohort": cohort, "resourceGroups": []}
    if pools:
        covered = covered_resources(pools)
        flavors = []
        for pool in pools:
            quota = pool.quota
            flavors.append(
                {
                    "name": pool.name,
                    "resources": [{"name": r, "nominalQuota": format_quota(r, quota.get(r, 0))} for r in covered],
                }
            )
        spec["resourceGroups"] = [{"coveredResources": covered, "flavors": flavors}]
    return {"name": name, "namespaces": [], "spec": spec}


def default_topology(name: str = DEFAULT_TOPOLOGY_NAME) -> dict[str, Any]:
    """The queue-config ``topologies`` entry for the default Topology ``name``
    (KaiwoConfig ``spec.defaultTopologyName``)."""
    return {
        "metadata": {"name": name},
        "spec": {
            "levels": [
                {"nodeLabel": TOPOLOGY_BLOCK_LABEL},
                {"nodeLabel": TOPOLOGY_RACK_LABEL},
                {"nodeLabel": HOSTNAME_LABEL},
            ]
        },
    }


def default_queue_config_spec(
    pools: Iterable[NodePool],
    cluster_queue_name: str = DEFAULT_CLUSTER_QUEUE_NAME,
    cohort: str = DEFAULT_COHORT_NAME,
    topology: str = DEFAULT_TOPOLOGY_NAME,
) -> dict[str, Any]:
    """Spec of a freshly created queue config: the default queue, the discovered flavors
    and the default topology (named ``topology``, which the flavors reference)."""
    pools = sorted(pools, key=NodePool.sort_key)
    return {
        "clusterQueues": [default_cluster_queue(pools, cluster_queue_name, cohort)],
        "resourceFlavors": flavor_specs(pools, topology),
        "topologies": [default_topology(topology)],
    }


def default_queue_config(
    pools: Iterable[NodePool],
    cluster_queue_name: str = DEFAULT_CLUSTER_QUEUE_NAME,
    cohort: str = DEFAULT_COHORT_NAME,
    topology: str = DEFAULT_TOPOLOGY_NAME,
) -> dict[str, Any]:
    """A complete ``KaiwoQueueConfig/kaiwo`` object to create when none exists."""
    return {
        "apiVersion": QUEUE_CONFIG_API_VERSION,
        "kind": QUEUE_CONFIG_KIND,
        "metadata": {"name": QUEUE_CONFIG_NAME},
        "spec": default_queue_config_spec(pools, cluster_queue_name, cohort, topology),
    }


def _entry_name(entry: Mapping[str, Any]) -> str | None:
    if "name" in entry:
        return entry["name"]
    return (entry.get("metadata") or {}).get("name")


def merge_by_name(existing: Iterable[Mapping[str, Any]] | None, incoming: Iterable[Mapping[str, Any]]) -> list[dict]:
    """Incoming entries replace same-named existing ones in place; new names are appended
    in incoming order; existing entries with other names are kept untouched."""
    wanted: list[dict] = [copy.deepcopy(dict(e)) for e in incoming]
    by_name = {_entry_name(e): e for e in wanted}
    used: set[str | None] = set()
    result: list[dict] = []
    for entry in existing or []:
        name = _entry_name(entry)
        if name in by_name:
            if name not in used:
                result.append(by_name[name])
                used.add(name)
            continue  # duplicates of a replaced name collapse into the replacement
        result.append(copy.deepcopy(dict(entry)))
    result.extend(e for e in wanted if _entry_name(e) not in used)
    return result


def _as_spec(queue_config: Any) -> dict[str, Any]:
    if queue_config is None:
        return {}
    if hasattr(queue_config, "to_k8s"):
        queue_config = queue_config.to_k8s()
    if isinstance(queue_config.get("spec"), Mapping):
        return dict(queue_config["spec"])
    return dict(queue_config)


def merge_queue_config_spec(
    existing: Any,
    pools: Iterable[NodePool],
    cluster_queue_name: str = DEFAULT_CLUSTER_QUEUE_NAME,
    cohort: str = DEFAULT_COHORT_NAME,
    topology: str = DEFAULT_TOPOLOGY_NAME,
) -> dict[str, Any]:
    """Merge discovery into an existing queue-config spec (or object/model).

    Flavors and topologies merge by name (discovered ones win, others are kept);
    the default ClusterQueue entry is replaced wholesale, other queues are kept;
    ``workloadPriorityClasses`` and any other field are left as they are. The input
    is not modified. Merging the same pools twice gives the same spec.
    """
    pools = sorted(pools, key=NodePool.sort_key)
    spec = copy.deepcopy(_as_spec(existing))
    spec["resourceFlavors"] = merge_by_name(spec.get("resourceFlavors"), flavor_specs(pools, topology))
    spec["clusterQueues"] = merge_by_name(
        spec.get("clusterQueues"), [default_cluster_queue(pools, cluster_queue_name, cohort)]
    )
    spec["topologies"] = merge_by_name(spec.get("topologies"), [default_topology(topology)])
    return spec


# ---------------------------------------------------------------------------
# One-call helper for the reconciler: discovery and the default queue config, with the KaiwoConfig settings applied
# ---------------------------------------------------------------------------


def _config_spec(config: Any) -> Mapping[str, Any]:
    if config is None:
        return {}
    if hasattr(config, "to_k8s"):
        config = config.to_k8s()
    return config["spec"] if isinstance(config.get("spec"), Mapping) else config


def default_topology_name(config: Any) -> str:
    """KaiwoConfig ``spec.defaultTopologyName``; empty or absent (a config stored before
    the field existed) means ``default-topology``, as upstream Kaiwo falls back."""
    name = _config_spec(config).get("defaultTopologyName")
    return name if isinstance(name, str) and name else DEFAULT_TOPOLOGY_NAME


@dataclass
class EnsureDefault:
    """Outcome of :func:`ensure_default_queue_config`.

    * ``pools``: the discovered node pools;
    * ``node_patches``: node name -> merge patch (labels, GPU taint) still needed;
    * ``create``: the complete KaiwoQueueConfig to create (when none exists), else ``None``;
    * ``spec``: the merged spec to write when it differs from the existing one, else ``None``.
    """

    pools: list[NodePool]
    node_patches: dict[str, dict[str, Any]]
    create: dict[str, Any] | None = None
    spec: dict[str, Any] | None = None


def ensure_default_queue_config(
    existing: Any,
    nodes: Iterable[Mapping[str, Any]],
    config: Any = None,
    *,
    spec_schema: Mapping[str, Any] | None = None,
) -> EnsureDefault:
    """Discover pools from ``nodes`` and work out the queue-config write.

    ``existing`` is the current KaiwoQueueConfig (object dict or model) or ``None``;
    ``config`` the KaiwoConfig (object, spec or model) supplying
    ``defaultClusterQueueName``, ``defaultClusterQueueCohortName``,
    ``defaultTopologyName`` and the ``nodes`` settings. Nothing to write on an unchanged cluster: ``create`` and ``spec`` are
    ``None`` and ``node_patches`` is empty.

    ``spec_schema`` is the installed CRD's schema of ``spec``: the stored spec
    carries its defaults (another operator's CRD may default more fields, such
    as ``flavorFungibility`` and ``preemption``), so the merged spec gets them
    too before the two are compared.
    """
    nodes = list(nodes)
    cfg = _config_spec(config)
    name = cfg.get("defaultClusterQueueName") or DEFAULT_CLUSTER_QUEUE_NAME
    cohort = cfg.get("defaultClusterQueueCohortName") or DEFAULT_COHORT_NAME
    topology = default_topology_name(cfg)
    pools = discover(nodes, exclude_control_plane_setting(config))
    result = EnsureDefault(pools=pools, node_patches=node_patches(pools, nodes, config))
    if existing is None:
        result.create = default_queue_config(pools, name, cohort, topology)
        return result
    current = _as_spec(existing)
    merged = apply_defaults(merge_queue_config_spec(current, pools, name, cohort, topology), spec_schema)
    if merged != current:
        result.spec = merged
    return result


def _without_entry_defaults(spec: Any) -> Any:
    """``spec`` with each embedded ClusterQueue spec's CRD-defaulted fields
    (``CLUSTER_QUEUE_SPEC_DEFAULTS``) left out where they hold the default: the
    KaiwoQueueConfig CRD may fill them in, and a spec that differs only by them
    needs no write."""
    if not isinstance(spec, Mapping):
        return spec
    out = dict(spec)
    queues = []
    for entry in out.get("clusterQueues") or []:
        if isinstance(entry, Mapping) and isinstance(entry.get("spec"), Mapping):
            cq = {k: v for k, v in entry["spec"].items() if CLUSTER_QUEUE_SPEC_DEFAULTS.get(k, object()) != v}
            entry = {**entry, "spec": cq}
        queues.append(entry)
    if "clusterQueues" in out:
        out["clusterQueues"] = queues
    return out


def queue_config_spec_equivalent(current: Any, wanted: Any) -> bool:
    """Whether writing ``wanted`` over the stored ``current`` spec would change nothing:
    equal up to quantity spelling (Kueue's quota fields included), empty lists/maps
    and the CRD's own defaults."""
    a, b = _without_entry_defaults(current or {}), _without_entry_defaults(wanted or {})
    return contains(a, b, quantity_keys=_QUANTITY_KEYS) and contains(b, a, quantity_keys=_QUANTITY_KEYS)


#: Quantity-valued keys of a queue config: the core kinds' and Kueue's quotas.
_QUANTITY_KEYS = QUANTITY_KEYS | frozenset(QUOTA_FIELDS)
