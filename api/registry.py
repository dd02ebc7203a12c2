"""Every top-level kind this project defines a CRD for, with its CRD names,
scope, subresources and printer columns.

``KINDS`` is the list the CRD generator (``api/crdgen.py``) and the CRD tests
iterate over; ``by_kind()`` / ``by_gvk()`` look entries up. The operator does not
read it: its clients and caches find our kinds in ``kaiwo_ctrl/kinds.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from api.config.v1alpha1 import KAIWO_CONFIG_NAME, AIMNamespaceConfig, KaiwoConfig
from api.kaiwo.gpuworkload import GpuWorkload
from api.kaiwo.v1alpha1 import KAIWO_QUEUE_CONFIG_NAME, KaiwoJob, KaiwoQueueConfig, KaiwoService
from api.kubeai.v1 import MODEL_NAME_MAX, Model
from api.meta import KubeObject

AGE_COLUMN = {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}


@dataclass(frozen=True)
class KindInfo:
    model: type[KubeObject]
    singular: str
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    status_subresource: bool = False
    #: ``{"specReplicasPath": ..., "statusReplicasPath": ...}`` when the kind has a scale subresource.
    scale_subresource: dict[str, str] | None = None
    printer_columns: tuple[dict[str, Any], ...] = ()
    #: CEL rules ``(rule, message)`` on the object root (may use metadata.name). They are enforced by
    #: the apiserver only: the Python models accept any name, so a controller can still read and
    #: report on objects created before the rule existed.
    root_validations: tuple[tuple[str, str], ...] = field(default=())

    @property
    def group(self) -> str:
        return self.model.GROUP

    @property
    def version(self) -> str:
        return self.model.VERSION

    @property
    def kind(self) -> str:
        return self.model.KIND

    @property
    def plural(self) -> str:
        return self.model.PLURAL

    @property
    def namespaced(self) -> bool:
        return self.model.NAMESPACED

    @property
    def scope(self) -> str:
        return "Namespaced" if self.model.NAMESPACED else "Cluster"

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    @property
    def crd_name(self) -> str:
        return f"{self.plural}.{self.group}"

    @property
    def file_name(self) -> str:
        return f"{self.group}_{self.plural}.yaml"


KINDS: tuple[KindInfo, ...] = (
    KindInfo(
        model=KaiwoJob,
        singular="kaiwojob",
        short_names=("kj",),
        categories=("kaiwo",),
        status_subresource=True,
        printer_columns=(
            {"name": "Status", "type": "string", "jsonPath": ".status.status"},
            {"name": "StartTime", "type": "date", "jsonPath": ".status.startTime"},
            {"name": "CompletionTime", "type": "date", "jsonPath": ".status.completionTime"},
            {"name": "Duration(s)", "type": "integer", "jsonPath": ".status.duration"},
            AGE_COLUMN,
        ),
    ),
    KindInfo(
        model=KaiwoService,
        singular="kaiwoservice",
        short_names=("ks",),
        categories=("kaiwo",),
        status_subresource=True,
        printer_columns=(
            {"name": "Status", "type": "string", "jsonPath": ".status.status"},
            {"name": "StartTime", "type": "date", "jsonPath": ".status.startTime"},
            {"name": "Duration(s)", "type": "integer", "jsonPath": ".status.duration"},
            AGE_COLUMN,
        ),
    ),
    KindInfo(
        model=KaiwoQueueConfig,
        singular="kaiwoqueueconfig",
        short_names=("kqc",),
        categories=("kaiwo",),
        status_subresource=True,
        printer_columns=(
            {"name": "WorkloadStatus", "type": "string", "jsonPath": ".status.status"},
            AGE_COLUMN,
        ),
        root_validations=(
            (
                f"self.metadata.name == '{KAIWO_QUEUE_CONFIG_NAME}'",
                f"metadata.name must be '{KAIWO_QUEUE_CONFIG_NAME}': KaiwoQueueConfig is a cluster singleton",
            ),
        ),
    ),
    KindInfo(
        model=KaiwoConfig,
        singular="kaiwoconfig",
        short_names=("kcfg",),
        categories=("kaiwo",),
        status_subresource=False,
        printer_columns=(
            {"name": "DefaultQueue", "type": "string", "jsonPath": ".spec.defaultClusterQueueName"},
            {"name": "RayImage", "type": "string", "jsonPath": ".spec.ray.defaultRayImage", "priority": 1},
            AGE_COLUMN,
        ),
        root_validations=(
            (
                f"self.metadata.name == '{KAIWO_CONFIG_NAME}'",
                f"metadata.name must be '{KAIWO_CONFIG_NAME}': KaiwoConfig is a cluster singleton",
            ),
        ),
    ),
    KindInfo(
        model=AIMNamespaceConfig,
        singular="aimnamespaceconfig",
        short_names=("aimnsc",),
        categories=("kaiwo",),
        status_subresource=True,
        printer_columns=(
            {"name": "Gateway", "type": "string", "jsonPath": ".spec.gateway.name"},
            {"name": "GatewayNamespace", "type": "string", "jsonPath": ".spec.gateway.namespace"},
            {"name": "Ready", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].status'},
            AGE_COLUMN,
        ),
    ),
    KindInfo(
        model=GpuWorkload,
        singular="gpuworkload",
        categories=("kaiwo",),
        status_subresource=True,
        # upstream's columns, in upstream's order
        printer_columns=(
            {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
            {"name": "Utilization", "type": "number", "format": "float", "jsonPath": ".status.aggregatedUtilization"},
            {"name": "Idle Since", "type": "date", "jsonPath": ".status.idleSince"},
            {"name": "Owner", "type": "string", "jsonPath": ".spec.workloadRef.kind"},
            {"name": "OwnerName", "type": "string", "jsonPath": ".spec.workloadRef.name"},
            AGE_COLUMN,
        ),
    ),
    KindInfo(
        model=Model,
        singular="model",
        status_subresource=True,
        scale_subresource={"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas.all"},
        printer_columns=(
            {"name": "Engine", "type": "string", "jsonPath": ".spec.engine"},
            {"name": "URL", "type": "string", "jsonPath": ".spec.url"},
            {"name": "Replicas", "type": "integer", "jsonPath": ".status.replicas.all"},
            {"name": "Ready", "type": "integer", "jsonPath": ".status.replicas.ready"},
            AGE_COLUMN,
        ),
        root_validations=(
            (
                f"self.metadata.name.size() <= {MODEL_NAME_MAX}",
                f"metadata.name must be at most {MODEL_NAME_MAX} characters",
            ),
        ),
    ),
)


def by_kind(kind: str) -> KindInfo:
    for info in KINDS:
        if info.kind == kind:
            return info
    raise KeyError(kind)


def by_gvk(group: str, version: str, kind: str) -> KindInfo:
    for info in KINDS:
        if (info.group, info.version, info.kind) == (group, version, kind):
            return info
    raise KeyError(f"{group}/{version}, Kind={kind}")


def model_for(obj: dict[str, Any]) -> type[KubeObject]:
    """The model class for a raw object, from its apiVersion and kind."""
    group, _, version = obj.get("apiVersion", "").rpartition("/")
    return by_gvk(group, version, obj.get("kind", "")).model


def parse(obj: dict[str, Any]) -> KubeObject:
    """Validate a raw object into its typed model."""
    return model_for(obj).model_validate(obj)


__all__ = ["KINDS", "KindInfo", "by_gvk", "by_kind", "model_for", "parse"]
