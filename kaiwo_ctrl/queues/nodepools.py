"""Node-pool discovery and the node writes it implies.

Nodes are grouped into pools by a generated flavor name
``<vendor>-<model>-<gpus>gpu-<nominalCPU>core-<nominalMemGi>gi``. Discovery is
pure: :func:`discover` reads Node dicts, :func:`node_patches` and
:func:`topology_label_patches` return only the changes a node still needs, so an
unchanged cluster yields no writes at all.

AMD model names are cleaned by lower-casing and removing the substrings
``instinct``, ``radeon``, ``_``, ``oam``, ``amd``, ``series`` and ``gpu``; after
that the GPU model also keeps only ``[a-z0-9]`` characters, so a model is always
a single token (``AMD-Instinct-MI300X`` -> ``mi300x`` instead of ``--mi300x``) and the
flavor name stays a valid object name and label value. A model that cleans to
nothing becomes ``unknown``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from kaiwo_ctrl.runtime.objects.quantity import QuantityError, cpu_cores_ceil, parse_quantity

from .constants import (
    AMD_GPU_RESOURCE,
    CONTROL_PLANE_LABELS,
    DEFAULT_GPU_TAINT_KEY,
    DEFAULT_TOPOLOGY_BLOCK,
    DEFAULT_TOPOLOGY_NAME,
    DEFAULT_TOPOLOGY_RACK,
    GPU_MODEL_LABEL,
    NODEPOOL_LABEL,
    NVIDIA_GPU_RESOURCE,
    TOPOLOGY_BLOCK_LABEL,
    TOPOLOGY_RACK_LABEL,
    WORKER_LABEL,
)

AMD_PRODUCT_LABEL = "amd.com/gpu.product-name"
AMD_COUNT_LABEL = "beta.amd.com/gpu.family.AI"
NVIDIA_PRODUCT_LABEL = "nvidia.com/gpu.product"
NVIDIA_COUNT_LABEL = "nvidia.com/gpu.count"

GI = 2**30
NOMINAL_FACTOR = Decimal("0.9")
_AMD_NOISE = ("instinct", "radeon", "_", "oam", "amd", "series", "gpu")
_NON_TOKEN = re.compile(r"[^a-z0-9]")
GPU_RESOURCES = {"amd": AMD_GPU_RESOURCE, "nvidia": NVIDIA_GPU_RESOURCE}


def clean_amd_model(product_name: str) -> str:
    """``AMD_Instinct_MI300X_OAM`` -> ``mi300x`` (lower-case, drop the vendor words, keep one token)."""
    text = product_name.lower()
    for noise in _AMD_NOISE:
        text = text.replace(noise, "")
    return _NON_TOKEN.sub("", text.strip()) or "unknown"


def clean_nvidia_model(product: str) -> str:
    """``Tesla-K80`` -> ``teslak80``."""
    return _NON_TOKEN.sub("", product.lower().replace("-", "")) or "unknown"


def _int_label(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        number = int(str(value).strip())
    except ValueError:
        return None
    return number if number >= 0 else None


@dataclass(frozen=True)
class NodeProfile:
    """What discovery derives from one node."""

    node: str
    vendor: str
    model: str
    gpus: int
    cpu_cores: int
    memory_gi: int

    @property
    def nominal_cpu(self) -> int:
        return math.floor(self.cpu_cores * NOMINAL_FACTOR)

    @property
    def nominal_memory(self) -> int:
        """Nominal memory in bytes: floor(memGi * 0.9 * 2^30)."""
        return math.floor(self.memory_gi * NOMINAL_FACTOR * GI)

    @property
    def flavor_name(self) -> str:
        return (
            f"{self.vendor}-{self.model}-{self.gpus}gpu-"
            f"{self.nominal_cpu}core-{self.nominal_memory // GI}gi"
        )


@dataclass
class NodePool:
    """Nodes sharing one generated flavor name, with the pool's total quota."""

    name: str
    vendor: str
    model: str
    gpus_per_node: int
    nominal_cpu_per_node: int
    nominal_memory_per_node: int
    nodes: list[str] = field(default_factory=list)

    @property
    def is_cpu_only(self) -> bool:
        return "cpu-only" in self.name

    @property
    def gpu_resource(self) -> str | None:
        """GPU resource key counted in the quota (only for amd/nvidia pools with GPUs)."""
        if self.gpus_per_node <= 0:
            return None
        return GPU_RESOURCES.get(self.vendor)

    @property
    def model_token(self) -> str:
        """Second dash-separated part of the flavor name (value of ``kaiwo/gpu-model``)."""
        parts = self.name.split("-")
        return parts[1] if len(parts) > 1 else ""

    @property
    def quota(self) -> dict[str, int]:
        """Resource name -> summed nominal quota (cpu cores, memory bytes, GPUs)."""
        count = len(self.nodes)
        quota = {
            "cpu": self.nominal_cpu_per_node * count,
            "memory": self.nominal_memory_per_node * count,
        }
        if self.gpu_resource:
            quota[self.gpu_resource] = self.gpus_per_node * count
        return quota

    def sort_key(self) -> tuple:
        """CPU-only (0 GPU) first, then ascending GPU count, then ascending CPU."""
        return (self.gpus_per_node, self.nominal_cpu_per_node, self.name)


def _labels(node: Mapping[str, Any]) -> Mapping[str, str]:
    return (node.get("metadata") or {}).get("labels") or {}


def _name(node: Mapping[str, Any]) -> str:
    return (node.get("metadata") or {}).get("name", "")


def is_control_plane(node: Mapping[str, Any]) -> bool:
    labels = _labels(node)
    return any(key in labels for key in CONTROL_PLANE_LABELS)


def is_cordoned(node: Mapping[str, Any]) -> bool:
    return bool((node.get("spec") or {}).get("unschedulable"))


def profile_node(node: Mapping[str, Any]) -> NodeProfile:
    """Vendor, model, GPU count, CPU cores and memory of one node (no eligibility checks)."""
    labels = _labels(node)
    vendor, model, gpus = "cpu", "only", 0
    if AMD_PRODUCT_LABEL in labels:
        model = clean_amd_model(labels[AMD_PRODUCT_LABEL])
    amd_count = _int_label(labels.get(AMD_COUNT_LABEL))
    if amd_count is not None:
        gpus, vendor = amd_count, "amd"
    if NVIDIA_PRODUCT_LABEL in labels:
        model = clean_nvidia_model(labels[NVIDIA_PRODUCT_LABEL])
    nvidia_count = _int_label(labels.get(NVIDIA_COUNT_LABEL))
    if nvidia_count is not None:
        gpus, vendor = nvidia_count, "nvidia"

    capacity = (node.get("status") or {}).get("capacity") or {}
    try:
        cores = cpu_cores_ceil(capacity.get("cpu"))
    except QuantityError:
        cores = 0
    try:
        memory_gi = math.floor(parse_quantity(capacity.get("memory")) / GI)
    except QuantityError:
        memory_gi = 0
    return NodeProfile(_name(node), vendor, model, gpus, cores, memory_gi)


def eligible(node: Mapping[str, Any], exclude_control_plane: bool) -> bool:
    """Cordoned nodes never join a pool; control-plane nodes only when not excluded."""
    if is_cordoned(node):
        return False
    if exclude_control_plane and is_control_plane(node):
        return False
    return True


def discover(nodes: Iterable[Mapping[str, Any]], exclude_control_plane: bool = False) -> list[NodePool]:
    """Group eligible nodes into pools, sorted as the default ClusterQueue lists them."""
    pools: dict[str, NodePool] = {}
    for node in nodes:
        if not eligible(node, exclude_control_plane):
            continue
        prof = profile_node(node)
        name = prof.flavor_name
        pool = pools.get(name)
        if pool is None:
            pool = pools[name] = NodePool(
                name=name,
                vendor=prof.vendor,
                model=prof.model,
                gpus_per_node=prof.gpus,
                nominal_cpu_per_node=prof.nominal_cpu,
                nominal_memory_per_node=prof.nominal_memory,
            )
        pool.nodes.append(prof.node)
    for pool in pools.values():
        pool.nodes.sort()
    return sorted(pools.values(), key=NodePool.sort_key)


def flavor_specs(pools: Iterable[NodePool], topology: str = DEFAULT_TOPOLOGY_NAME) -> list[dict[str, Any]]:
    """Queue-config ``resourceFlavors`` entries for discovered pools, each referencing
    ``topology`` (KaiwoConfig ``spec.defaultTopologyName``)."""
    return [{"name": p.name, "nodeLabels": {NODEPOOL_LABEL: p.name}, "topologyName": topology} for p in pools]


# ---------------------------------------------------------------------------
# Node writes
# ---------------------------------------------------------------------------


def _config_nodes(config: Any) -> Mapping[str, Any]:
    """The ``nodes`` section of a KaiwoConfig (object dict, spec dict or model)."""
    if config is None:
        return {}
    if hasattr(config, "to_k8s"):
        config = config.to_k8s()
    if "spec" in config and isinstance(config["spec"], Mapping):
        config = config["spec"]
    return config.get("nodes") or {}


def gpu_taint_settings(config: Any) -> tuple[bool, str]:
    """``(addTaintsToGpuNodes, defaultGpuTaintKey)`` with the CRD defaults."""
    nodes = _config_nodes(config)
    return bool(nodes.get("addTaintsToGpuNodes", False)), nodes.get("defaultGpuTaintKey") or DEFAULT_GPU_TAINT_KEY


def exclude_control_plane_setting(config: Any) -> bool:
    return bool(_config_nodes(config).get("excludeMasterNodesFromNodePools", False))


#: Default topology labels, written only where a node lacks them (a node's own values are kept).
TOPOLOGY_DEFAULTS = ((TOPOLOGY_BLOCK_LABEL, DEFAULT_TOPOLOGY_BLOCK), (TOPOLOGY_RACK_LABEL, DEFAULT_TOPOLOGY_RACK))


def desired_node_labels(pool: NodePool) -> dict[str, str]:
    labels = {WORKER_LABEL: "true", NODEPOOL_LABEL: pool.name}
    if not pool.is_cpu_only:
        labels[GPU_MODEL_LABEL] = pool.model_token
    return labels


def missing_topology_labels(labels: Mapping[str, str]) -> dict[str, str]:
    """The default topology labels a node with ``labels`` still lacks (its own values are kept)."""
    return {key: value for key, value in TOPOLOGY_DEFAULTS if key not in labels}


def node_patches(
    pools: Iterable[NodePool],
    nodes: Iterable[Mapping[str, Any]],
    config: Any = None,
) -> dict[str, dict[str, Any]]:
    """Patches bringing pool members to their labels (and GPU taint), keyed by node name.

    A member also gets the default ``kaiwo/topology-block``/``-rack`` labels it
    lacks: the start-up task gives them to the nodes present then, and a node that
    joins later needs them just as much - without every level of the flavors'
    topology, Kueue's topology-aware scheduling finds no place on it.

    Only nodes that need a change appear. A patch is a merge patch:
    ``{"metadata": {"labels": {<only changed keys>}}}`` plus, when a taint is
    added, ``"spec": {"taints": <complete new list>}`` and the node's
    ``metadata.resourceVersion`` so a concurrent taint change makes the write fail
    with a conflict instead of being lost (re-read and retry). Labels on nodes
    that left a pool are never removed.
    """
    add_taints, taint_key = gpu_taint_settings(config)
    by_name = {_name(n): n for n in nodes}
    patches: dict[str, dict[str, Any]] = {}
    for pool in pools:
        want = desired_node_labels(pool)
        taint = add_taints and not pool.name.startswith("cpu-only")
        for node_name in pool.nodes:
            node = by_name.get(node_name)
            if node is None:
                continue
            have = _labels(node)
            changed = {k: v for k, v in want.items() if have.get(k) != v}
            changed.update(missing_topology_labels(have))
            patch: dict[str, Any] = {}
            if changed:
                patch["metadata"] = {"labels": changed}
            if taint:
                taints = list((node.get("spec") or {}).get("taints") or [])
                if not any(t.get("key") == taint_key and t.get("effect") == "NoSchedule" for t in taints):
                    taints.append({"key": taint_key, "value": "true", "effect": "NoSchedule"})
                    patch["spec"] = {"taints": taints}
                    meta = patch.setdefault("metadata", {})
                    rv = (node.get("metadata") or {}).get("resourceVersion")
                    if rv:
                        meta["resourceVersion"] = rv
            if patch:
                patches[node_name] = patch
    return patches


def topology_label_patches(nodes: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Startup step 15.2.2: add ``kaiwo/topology-block``/``-rack`` defaults where missing."""
    patches: dict[str, dict[str, Any]] = {}
    for node in nodes:
        missing = missing_topology_labels(_labels(node))
        if missing:
            patches[_name(node)] = {"metadata": {"labels": missing}}
    return patches


def node_fingerprint(node: Mapping[str, Any]) -> tuple:
    """The node fields whose change must trigger a queue-config reconcile."""
    capacity = (node.get("status") or {}).get("capacity") or {}
    return (
        is_cordoned(node),
        str(capacity.get("cpu")),
        str(capacity.get("memory")),
        tuple(sorted(_labels(node).items())),
    )
