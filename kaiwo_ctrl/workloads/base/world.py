"""The read-only view of the cluster a builder needs (``World``) and the
operator settings derived from KaiwoConfig (``Settings``).

The reconciler fills a ``World`` from its informer caches:

* ``config``: the KaiwoConfig ``spec`` (model or plain dict),
* ``nodes``: every Node (``None`` means "cluster unknown", used by ``render``
  without a nodes file: GPU capacity checks are then skipped),
* ``queue_config``: the ``spec`` of KaiwoQueueConfig ``kaiwo`` (``None`` if absent),
* ``workload_priority_classes`` / ``priority_classes``: names of the Kueue
  WorkloadPriorityClasses and scheduling.k8s.io PriorityClasses that exist,
* ``downloader_image``: the operator's own image (the download Job runs it),
* ``aim_configs``: namespace -> its effective AIMNamespaceConfig (object or spec).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from api.config.v1alpha1 import KaiwoConfigSpec
from kaiwo_ctrl.settings.environment import DEFAULT_DOWNLOAD_DEADLINE_SECONDS, DEFAULT_IMAGE
from kaiwo_ctrl.settings.priority import PriorityRules, configured_list

from .gpu import GpuCapacity

#: Used when the reconciler does not tell us the operator image.
DEFAULT_DOWNLOADER_IMAGE = DEFAULT_IMAGE


def as_dict(value: Any) -> dict[str, Any]:
    """A model (anything with ``to_k8s``) or mapping as a plain camelCase dict."""
    if value is None:
        return {}
    if hasattr(value, "to_k8s"):
        return value.to_k8s()
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"expected a mapping or an API model, got {type(value).__name__}")


def _typed_config(spec: Any) -> KaiwoConfigSpec:
    """The KaiwoConfigSpec model with every CRD default filled in."""
    if isinstance(spec, KaiwoConfigSpec):
        return spec
    return KaiwoConfigSpec.model_validate(as_dict(spec))


@dataclass(frozen=True)
class Settings:
    """The KaiwoConfig values the workload builders use, flattened."""

    default_ray_image: str
    head_pod_memory: str
    default_storage_class: str
    default_data_mount_path: str
    default_hf_mount_path: str
    default_gpu_resource_key: str
    default_gpu_taint_key: str
    add_taints_to_gpu_nodes: bool
    kube_scheduler_name: str
    pending_threshold_for_preemption: str
    default_cluster_queue_name: str

    @classmethod
    def from_config(cls, config: Any) -> Settings:
        doc = _typed_config(config).to_k8s()

        def pick(section: str | None, key: str) -> Any:
            src = (doc.get(section) or {}) if section else doc
            return src.get(key)

        return cls(
            default_ray_image=pick("ray", "defaultRayImage"),
            head_pod_memory=str(pick("ray", "headPodMemory")),
            default_storage_class=pick("storage", "defaultStorageClass") or "",
            default_data_mount_path=pick("storage", "defaultDataMountPath"),
            default_hf_mount_path=pick("storage", "defaultHfMountPath"),
            default_gpu_resource_key=pick("nodes", "defaultGpuResourceKey"),
            default_gpu_taint_key=pick("nodes", "defaultGpuTaintKey"),
            add_taints_to_gpu_nodes=bool(pick("nodes", "addTaintsToGpuNodes")),
            kube_scheduler_name=pick("scheduling", "kubeSchedulerName"),
            pending_threshold_for_preemption=pick("scheduling", "pendingThresholdForPreemption"),
            default_cluster_queue_name=pick(None, "defaultClusterQueueName"),
        )


@dataclass(frozen=True)
class World:
    config: Any = None
    nodes: tuple[dict, ...] | None = ()
    queue_config: dict | None = None
    workload_priority_classes: frozenset[str] = frozenset()
    priority_classes: frozenset[str] = frozenset()
    downloader_image: str = DEFAULT_DOWNLOADER_IMAGE
    download_deadline_seconds: int = DEFAULT_DOWNLOAD_DEADLINE_SECONDS
    aim_configs: Mapping[str, Any] = field(default_factory=dict)
    #: which priority classes each namespace may use (the admin's allow-lists)
    priority: PriorityRules = field(default_factory=PriorityRules)

    @cached_property
    def settings(self) -> Settings:
        return Settings.from_config(self.config)

    def aim_config(self, namespace: str) -> Any:
        """The effective AIMNamespaceConfig of ``namespace`` (None if it has none)."""
        return self.aim_configs.get(namespace)

    @property
    def nodes_known(self) -> bool:
        return self.nodes is not None

    @cached_property
    def gpu_capacity(self) -> GpuCapacity:
        """The nodes' GPU statistics per vendor, computed once: a World is
        rebuilt whenever the caches it comes from change. No nodes (unknown
        cluster) count as none."""
        return GpuCapacity(self.nodes or (), self.settings.default_gpu_resource_key)

    @classmethod
    def from_dicts(
        cls,
        *,
        config: Mapping[str, Any] | None = None,
        nodes: Sequence[Mapping[str, Any]] | None = (),
        queue_config: Mapping[str, Any] | None = None,
        workload_priority_classes: Iterable[str] = (),
        priority_classes: Iterable[str] = (),
        downloader_image: str = DEFAULT_DOWNLOADER_IMAGE,
        download_deadline_seconds: int = DEFAULT_DOWNLOAD_DEADLINE_SECONDS,
        aim_configs: Mapping[str, Any] | None = None,
        priority: PriorityRules | None = None,
    ) -> World:
        """Build from plain dicts (tests, ``render``). ``config`` and
        ``queue_config`` may be whole objects or just their ``spec``."""
        cfg = dict(config or {})
        if "spec" in cfg and "kind" in cfg:
            cfg = dict(cfg.get("spec") or {})
        qc = dict(queue_config) if queue_config is not None else None
        if qc is not None and "spec" in qc and "kind" in qc:
            qc = dict(qc.get("spec") or {})
        return cls(
            config=_typed_config(cfg),
            nodes=None if nodes is None else tuple(dict(n) for n in nodes),
            queue_config=qc,
            workload_priority_classes=frozenset(workload_priority_classes),
            priority_classes=frozenset(priority_classes),
            downloader_image=downloader_image,
            download_deadline_seconds=download_deadline_seconds,
            aim_configs=dict(aim_configs or {}),
            priority=priority or PriorityRules(configured=configured_list(cfg)),
        )
