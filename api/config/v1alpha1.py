"""config.kaiwo.silogen.ai/v1alpha1: KaiwoConfig (cluster singleton) and
AIMNamespaceConfig (per namespace)."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import model_validator

from api.base import ApiModel
from api.fields import field
from api.meta import SIMPLE_DURATION_PATTERN, DURATION_PATTERN, Condition, KubeObject

GROUP = "config.kaiwo.silogen.ai"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

#: The only KaiwoConfig name the operator reads (and the CRD accepts).
KAIWO_CONFIG_NAME = "kaiwo"


# --------------------------------------------------------------------------
# KaiwoConfig
# --------------------------------------------------------------------------


class KaiwoRayConfig(ApiModel):
    """Ray settings."""

    default_ray_image: str = field(
        "ghcr.io/silogen/rocm-ray:6.4",
        description="Image for Ray containers (and any workload container) that do not set one.",
    )
    head_pod_memory: str = field(
        "16Gi", description="Memory request and limit forced onto the Ray head pod."
    )


class KaiwoStorageConfig(ApiModel):
    """Storage settings."""

    default_storage_class: str | None = field(
        None, description="StorageClass for workload PVCs that do not name one; cluster default when empty."
    )
    default_data_mount_path: str = field(
        "/workload",
        description="Mount path of the data volume when the workload does not set storage.data.mountPath.",
    )
    default_hf_mount_path: str = field(
        "/hf_cache",
        description=(
            "Mount path (and HF_HOME) of the Hugging Face cache when the workload does not set "
            "storage.huggingFace.mountPath."
        ),
    )


class KaiwoStorageConfigOverrides(ApiModel):
    """The storage settings under their older field name ``data``; no defaults here, so only the
    values a user actually wrote take effect."""

    default_storage_class: str | None = field(None, description="See storage.defaultStorageClass.")
    default_data_mount_path: str | None = field(None, description="See storage.defaultDataMountPath.")
    default_hf_mount_path: str | None = field(None, description="See storage.defaultHfMountPath.")


class KaiwoNodeConfig(ApiModel):
    """Node settings."""

    default_gpu_resource_key: str = field(
        "amd.com/gpu", description="GPU resource name used when the workload's gpuVendor is neither amd nor nvidia."
    )
    default_gpu_taint_key: str = field(
        "kaiwo.silogen.ai/gpu", description="Key of the taint put on GPU nodes and tolerated by GPU pods."
    )
    exclude_master_nodes_from_node_pools: bool = field(
        False, description="Leave control-plane nodes out of node-pool discovery."
    )
    add_taints_to_gpu_nodes: bool = field(
        False, description="Taint GPU nodes with defaultGpuTaintKey during discovery."
    )


class KaiwoSchedulingConfig(ApiModel):
    """Scheduling settings."""

    kube_scheduler_name: str = field(
        "kaiwo-scheduler", description="schedulerName set on pod templates the operator generates."
    )
    pending_threshold_for_preemption: str = field(
        "5m",
        description=(
            "How long a GPU workload may wait before Kaiwo starts preempting same-vendor GPU workloads "
            "that have run past their duration."
        ),
        pattern=DURATION_PATTERN,
    )


class KaiwoResourceMonitoringConfig(ApiModel):
    """GPU-utilisation monitoring settings. Enabling the monitor, its metrics endpoint and polling
    interval are environment variables of the operator (RESOURCE_MONITORING_*), not fields here."""

    low_utilization_threshold: float = field(
        1.0,
        description="Utilisation (percent of the requested capacity) below which a workload counts as underutilised.",
        minimum=0,
    )
    target_namespaces: list[str] | None = field(
        None,
        description="Namespaces to monitor; all except kube-system when empty. Only Kaiwo workloads are affected.",
    )
    profile: Literal["gpu"] = field("gpu", description="Resource to monitor; only gpu is supported.")
    terminate_underutilized: bool = field(
        False, description="Terminate workloads that stay underutilised for terminateUnderutilizedAfter."
    )
    terminate_underutilized_after: str = field(
        "24h",
        description="How long a workload may stay underutilised before it is terminated (e.g. 24h, 1h30m).",
        pattern=SIMPLE_DURATION_PATTERN,
    )


class KaiwoGpuPreemptionConfig(ApiModel):
    """Cluster-wide defaults of idle-GPU reclaim (GpuWorkload), tunable without a restart. Each field
    is optional: unset falls through to the operator's GPU_PREEMPTION_DEFAULT_* environment, then to
    the built-in default. Enabling, the metrics endpoint and the polling interval are environment only."""

    default_threshold: float | None = field(
        None, description="Aggregated GPU utilisation (percent) below which a workload is idle (built-in 5).", minimum=0, maximum=100
    )
    default_grace_period: str | None = field(
        None, description="How long a workload must stay idle before it may be reclaimed, e.g. 10m (built-in 10m).", pattern=DURATION_PATTERN
    )
    default_policy: Literal["OnPressure", "Always"] | None = field(
        None, description="OnPressure (reclaim only for a workload waiting for GPUs) or Always (built-in OnPressure)."
    )
    default_aggregation: Literal["Min", "Max", "Avg"] | None = field(
        None, description="How a multi-Pod workload's utilisation is combined: Min, Max or Avg (built-in Max)."
    )
    default_ttl: str | None = field(
        None, alias="defaultTTL", description="How long a Preempted or Deleted GpuWorkload is kept; 0 keeps it forever (built-in 24h).", pattern=DURATION_PATTERN
    )


class KaiwoModelsConfig(ApiModel):
    """How KubeAI Models share the cluster with Kaiwo workloads."""

    cluster_queue: str | None = field(
        None,
        description=(
            "ClusterQueue for the server Pods of every Model that names none itself (label "
            "kueue.x-k8s.io/queue-name or annotation kaiwo.silogen.ai/cluster-queue). Unset: such Models "
            "run outside Kueue, as in KubeAI."
        ),
    )
    gpu_models_under_kueue: bool = field(
        True,
        description=(
            "Where a KaiwoQueueConfig exists, Models whose server Pods request GPUs and that name no queue go "
            "through Kueue under the default ClusterQueue (models.clusterQueue, else defaultClusterQueueName). "
            "false: such Models run outside Kueue's quota, priorities and preemption, as in KubeAI."
        ),
    )
    inference_pools: bool = field(
        False,
        description=(
            "Write an inference.networking.k8s.io/v1 InferencePool per Model (same name and namespace) "
            "selecting its server Pods, for a Gateway with an endpoint picker."
        ),
    )


class KaiwoConfigSpec(ApiModel):
    """Runtime configuration of the Kaiwo operator."""

    ray: KaiwoRayConfig = field(default_factory=KaiwoRayConfig, description="Ray settings.")
    storage: KaiwoStorageConfig = field(default_factory=KaiwoStorageConfig, description="Storage settings.")
    nodes: KaiwoNodeConfig = field(default_factory=KaiwoNodeConfig, description="Node settings.")
    scheduling: KaiwoSchedulingConfig = field(
        default_factory=KaiwoSchedulingConfig, description="Workload scheduling settings."
    )
    resource_monitoring: KaiwoResourceMonitoringConfig = field(
        default_factory=KaiwoResourceMonitoringConfig, description="Resource (GPU utilisation) monitoring settings."
    )
    gpu_preemption: KaiwoGpuPreemptionConfig = field(
        default_factory=KaiwoGpuPreemptionConfig,
        description="Idle-GPU reclaim (GpuWorkload) defaults; workload and namespace annotations override them.",
    )
    default_cluster_queue_name: str = field(
        "kaiwo",
        description="ClusterQueue for workloads without spec.clusterQueue; also the name of the generated default ClusterQueue.",
    )
    default_cluster_queue_cohort_name: str = field(
        "kaiwo", description="Cohort of the generated default ClusterQueue (queues in a cohort share quota)."
    )
    dynamically_update_default_cluster_queue: bool = field(
        False,
        description=(
            "Re-discover node pools and rewrite the default ClusterQueue on every queue-config reconcile, "
            "so it follows nodes being added, removed or cordoned."
        ),
    )
    default_topology_name: str = field(
        "default-topology",
        description=(
            "Kueue Topology the generated queue config defines (levels kaiwo/topology-block, "
            "kaiwo/topology-rack, kubernetes.io/hostname) and its ResourceFlavors reference, so they "
            "offer topology-aware scheduling; a workload uses it only when it sets preferredTopologyLabel "
            "or requiredTopologyLabel. Empty means default-topology."
        ),
    )
    models: KaiwoModelsConfig = field(
        default_factory=KaiwoModelsConfig, description="KubeAI Models: Kueue admission and InferencePools."
    )
    allowed_priority_classes: list[str] | None = field(
        None,
        max_items=256,
        description=(
            "PriorityClasses and WorkloadPriorityClasses that Models, KaiwoJobs and KaiwoServices may name in "
            "namespaces without the annotation kaiwo.silogen.ai/priority-classes (\"*\": any). Unset: any class. "
            "system-* classes are refused outside kube-system and the operator's namespace either way."
        ),
    )
    data: KaiwoStorageConfigOverrides | None = field(
        None,
        description=(
            "Deprecated older name of storage, still accepted so existing manifests keep working. "
            "Values set here override the same fields of storage."
        ),
    )

    @model_validator(mode="before")
    @classmethod
    def _fold_legacy_data(cls, raw: Any) -> Any:
        # Older manifests spell the storage section "data". The apiserver stores both sections
        # (storage with its defaults filled in); what the user wrote under data wins.
        if isinstance(raw, dict) and isinstance(raw.get("data"), dict) and raw["data"]:
            storage = dict(raw.get("storage") or {})
            storage.update({k: v for k, v in raw["data"].items() if v is not None})
            raw = {**raw, "storage": storage}
        return raw


class KaiwoConfig(KubeObject):
    """Runtime configuration of the Kaiwo operator; a cluster singleton named kaiwo."""

    GROUP: ClassVar[str] = GROUP
    VERSION: ClassVar[str] = VERSION
    KIND: ClassVar[str] = "KaiwoConfig"
    PLURAL: ClassVar[str] = "kaiwoconfigs"
    NAMESPACED: ClassVar[bool] = False

    spec: KaiwoConfigSpec = field(
        default_factory=KaiwoConfigSpec, description="Operator configuration; every field has a default."
    )


# --------------------------------------------------------------------------
# AIMNamespaceConfig
# --------------------------------------------------------------------------


class SecretValueReference(ApiModel):
    """A key inside a Kubernetes Secret."""

    secret_name: str | None = field(None, description="Name of the Secret.")
    secret_key: str | None = field(None, description="Key inside the Secret.")


class AIMS3Credential(ApiModel):
    """S3 credentials for one endpoint."""

    endpoint_url: str | None = field(None, description="S3 endpoint URL.")
    access_key_id: SecretValueReference | None = field(None, description="Secret key holding the access key ID.")
    secret_access_key: SecretValueReference | None = field(
        None, description="Secret key holding the secret access key."
    )


class AIMGCSCredential(ApiModel):
    """GCS service-account credentials."""

    application_credentials: SecretValueReference | None = field(
        None, description="Secret key holding the service-account JSON."
    )


class AIMAzureBlobCredential(ApiModel):
    """Azure Blob Storage credentials."""

    connection_string: SecretValueReference | None = field(
        None, description="Secret key holding the storage connection string."
    )


class AIMNamespaceCredentials(ApiModel):
    """Credentials for model sources and caches; any subset may be set."""

    hugging_face_token: SecretValueReference | None = field(
        None, description="Secret key holding the Hugging Face token."
    )
    s3: list[AIMS3Credential] | None = field(None, description="S3 credentials.")
    gcs: list[AIMGCSCredential] | None = field(None, description="GCS credentials.")
    azure_blob: list[AIMAzureBlobCredential] | None = field(None, description="Azure Blob credentials.")


class AIMNamespaceImageConfig(ApiModel):
    """Image pull settings for AIM images in the namespace."""

    image_pull_secrets: list[str] | None = field(
        None, description="Names of Secrets used to pull AIM images."
    )


class GatewayRef(ApiModel):
    """The KGateway instance used for exposure and routing."""

    name: str | None = field(None, description="Name of the gateway object.")
    namespace: str | None = field(None, description="Namespace of the gateway object.")


class AIMNamespaceConfigSpec(ApiModel):
    """AIM settings of one namespace."""

    gateway: GatewayRef | None = field(None, description="Gateway used for exposure and routing.")
    credentials: AIMNamespaceCredentials | None = field(
        None, description="Secret references used to access and cache models."
    )
    images: AIMNamespaceImageConfig | None = field(None, description="Image pull settings for AIM images.")


class AIMNamespaceConfigStatus(ApiModel):
    """Observed state of an AIMNamespaceConfig (written by kaiwo-ctrl)."""

    conditions: list[Condition] | None = field(
        None, description="Ready, GatewayFound, RoutesAccepted and Conflict."
    )
    observed_generation: int | None = field(None, description="The metadata.generation this status describes.")
    models: int | None = field(None, description="Models in the namespace that use this config.")
    workloads: int | None = field(
        None, description="KaiwoJobs and KaiwoServices in the namespace that use this config."
    )
    routes: int | None = field(None, description="HTTPRoutes kaiwo-ctrl maintains for this config.")


class AIMNamespaceConfig(KubeObject):
    """Credentials and routing for AIM workloads in one namespace."""

    GROUP: ClassVar[str] = GROUP
    VERSION: ClassVar[str] = VERSION
    KIND: ClassVar[str] = "AIMNamespaceConfig"
    PLURAL: ClassVar[str] = "aimnamespaceconfigs"
    NAMESPACED: ClassVar[bool] = True

    spec: AIMNamespaceConfigSpec = field(
        default_factory=AIMNamespaceConfigSpec, description="Gateway, credentials and image settings."
    )
    status: AIMNamespaceConfigStatus | None = field(None, description="Observed state, written by kaiwo-ctrl.")


class _ListBase(ApiModel):
    api_version: str = field(API_VERSION, description="APIVersion of the list.")
    kind: str = field("", description="Kind of the list.")
    metadata: dict[str, Any] | None = field(None, description="List metadata.")


class KaiwoConfigList(_ListBase):
    """A list of KaiwoConfigs."""

    kind: str = field("KaiwoConfigList", description="Kind of the list.")
    items: list[KaiwoConfig] = field(default_factory=list, description="The KaiwoConfigs.")


class AIMNamespaceConfigList(_ListBase):
    """A list of AIMNamespaceConfigs."""

    kind: str = field("AIMNamespaceConfigList", description="Kind of the list.")
    items: list[AIMNamespaceConfig] = field(default_factory=list, description="The AIMNamespaceConfigs.")


__all__ = [
    "AIMAzureBlobCredential",
    "AIMGCSCredential",
    "AIMNamespaceConfig",
    "AIMNamespaceConfigList",
    "AIMNamespaceConfigSpec",
    "AIMNamespaceConfigStatus",
    "AIMNamespaceCredentials",
    "AIMNamespaceImageConfig",
    "AIMS3Credential",
    "API_VERSION",
    "GROUP",
    "GatewayRef",
    "KAIWO_CONFIG_NAME",
    "KaiwoConfig",
    "KaiwoConfigList",
    "KaiwoConfigSpec",
    "KaiwoNodeConfig",
    "KaiwoRayConfig",
    "KaiwoResourceMonitoringConfig",
    "KaiwoSchedulingConfig",
    "KaiwoStorageConfig",
    "KaiwoStorageConfigOverrides",
    "SecretValueReference",
    "VERSION",
]
