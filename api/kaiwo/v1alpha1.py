"""kaiwo.silogen.ai/v1alpha1: KaiwoJob, KaiwoService, KaiwoQueueConfig.

Embedded Kubernetes / KubeRay / Kueue objects (``job``, ``rayJob``,
``deployment``, ``rayService``, ClusterQueue specs, resources, env, ...) are
plain dicts; the CRD keeps them with ``x-kubernetes-preserve-unknown-fields``
or a partial core-type schema.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, ClassVar

from pydantic import model_validator

from api.base import ApiModel
from api.fields import field
from api.kaiwo.download import (
    AzureBlobStorageDownloadItem,
    CloudDownloadBucket,
    CloudDownloadFile,
    CloudDownloadFolder,
    DownloadTaskConfig,
    GCSDownloadItem,
    GitDownloadItem,
    HuggingFaceDownloadItem,
    ObjectStorageDownloadSpec,
    S3DownloadItem,
    ValueReference,
)
from api.meta import (
    CONDITION_TYPE_PATTERN,
    DURATION_PATTERN,
    ENV_VAR_ITEM_SCHEMA,
    LOCAL_OBJECT_REFERENCE_SCHEMA,
    RESOURCE_REQUIREMENTS_SCHEMA,
    TAINT_SCHEMA,
    TOLERATION_SCHEMA,
    Condition,
    KubeObject,
    ObjectMeta,
    embedded_object,
)

GROUP = "kaiwo.silogen.ai"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

#: Label-key shaped strings (optional DNS prefix + name), e.g. kubernetes.io/hostname.
LABEL_KEY_PATTERN = CONDITION_TYPE_PATTERN
#: Queue and priority-class names are copied into label values
#: (kueue.x-k8s.io/queue-name, kueue.x-k8s.io/priority-class): at most 63
#: characters of a DNS subdomain.
QUEUE_NAME_MAX = 63
QUEUE_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
NAMESPACE_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
HOSTNAME_LABEL = "kubernetes.io/hostname"
#: The only KaiwoQueueConfig name the operator reconciles.
KAIWO_QUEUE_CONFIG_NAME = "kaiwo"


def _duplicates(values: list[str]) -> list[str]:
    seen: set[str] = set()
    dups: list[str] = []
    for v in values:
        if v in seen and v not in dups:
            dups.append(v)
        seen.add(v)
    return dups


class Status(StrEnum):
    """High-level lifecycle phase written to ``status.status``.

    The CRD does not enforce these values (it is a free string)."""

    NEW = ""
    DOWNLOADING = "DOWNLOADING"
    PENDING = "PENDING"
    STARTING = "STARTING"
    READY = "READY"
    RUNNING = "RUNNING"
    COMPLETE = "COMPLETE"
    ERROR = "ERROR"
    FAILED = "FAILED"
    TERMINATING = "TERMINATING"
    TERMINATED = "TERMINATED"


# --------------------------------------------------------------------------
# Storage
# --------------------------------------------------------------------------


class SecretVolume(ApiModel):
    """Mounts one key of a Secret (or the whole Secret) into the workload containers."""

    name: str | None = field(None, description="Name of the pod volume to create; unique within the pod.")
    secret_name: str | None = field(None, description="Secret to mount from.")
    key: str | None = field(None, description="Key of the Secret to mount; the whole Secret when empty.")
    sub_path: str | None = field(
        None, description="File name inside mountPath that receives the key's content."
    )
    mount_path: str | None = field(
        None, description="Directory (or file, with subPath) inside the containers where the secret appears."
    )


class DataStorageSpec(ApiModel):
    """The workload's main data volume."""

    mount_path: str = field(
        "/workload", description="Where the data PersistentVolumeClaim is mounted inside the workload containers."
    )
    storage_size: str | None = field(
        None, description="Requested size of the data PVC (e.g. 100Gi). The PVC is created only when set."
    )
    download: ObjectStorageDownloadSpec | None = field(
        None,
        description="Downloads (S3, GCS, Azure Blob, Git) into the data volume, run before the workload starts.",
    )


class HfStorageSpec(ApiModel):
    """A volume used as the Hugging Face cache."""

    mount_path: str = field(
        "/hf_cache",
        description="Where the Hugging Face cache PVC is mounted; also exported as HF_HOME in the containers.",
    )
    storage_size: str | None = field(
        None, description="Requested size of the Hugging Face cache PVC (e.g. 50Gi). The PVC is created only when set."
    )
    pre_cache_repos: list[HuggingFaceDownloadItem] | None = field(
        None, description="Hugging Face repositories downloaded into the cache before the workload starts."
    )


class StorageSpec(ApiModel):
    """Persistent storage (PVCs) for the workload."""

    storage_enabled: bool | None = field(
        None, description="Must be true for any PVC of this spec to be created; data and huggingFace are ignored otherwise."
    )
    storage_class_name: str | None = field(
        None, description="StorageClass used for the data and Hugging Face PVCs; must exist in the cluster."
    )
    access_mode: str = field(
        "ReadWriteMany",
        description=(
            "Access mode of the created PVCs (ReadWriteOnce, ReadWriteMany, ReadOnlyMany). "
            "ReadWriteMany is usually needed when pods, including the download pod, can land on different nodes."
        ),
    )
    data: DataStorageSpec | None = field(None, description="Data PVC and the downloads that fill it.")
    hugging_face: HfStorageSpec | None = field(
        None, description="Hugging Face cache PVC and the repositories to pre-cache in it."
    )


# --------------------------------------------------------------------------
# Workloads
# --------------------------------------------------------------------------


class CommonMetaSpec(ApiModel):
    """Fields shared by KaiwoJob and KaiwoService specs."""

    user: str | None = field(
        None,
        description=(
            "Owner of the workload, usually an e-mail address. Used for the kaiwo.silogen.ai/user label "
            "on everything the operator creates."
        ),
        max_length=253,
    )
    pod_template_spec_labels: dict[str, str] | None = field(
        None,
        description="Extra labels for the generated pod templates; Kaiwo system labels win on conflicts.",
    )
    gpus: int = field(0, description="Total number of GPUs for the whole workload.")
    gpu_vendor: str = field(
        "amd", description="GPU vendor, e.g. amd or nvidia; selects the GPU resource name.", max_length=63
    )
    gpu_models: list[str] | None = field(
        None,
        description="Restrict GPU pods to nodes whose kaiwo/gpu-model label is one of these models.",
        max_items=64,
        items={"maxLength": 63},
    )
    version: str | None = field(None, description="Free-form version string, kept as metadata only.")
    replicas: int = field(1, description="Number of replicas (Ray worker replicas or Deployment replicas).")
    gpus_per_replica: int | None = field(
        None, description="GPUs per replica. When set, replicas should be set as well."
    )
    duration: str | None = field(
        None,
        description=(
            "Maximum run time (Go duration such as 1h30m) after which the workload becomes preemptable "
            "when other workloads wait for GPUs."
        ),
        pattern=DURATION_PATTERN,
        max_length=64,
    )
    preferred_topology_label: str | None = field(
        None, description="Kueue preferred topology level (node label) for the pods.", max_length=316
    )
    required_topology_label: str | None = field(
        None, description="Kueue required topology level (node label) for the pods.", max_length=316
    )
    resources: dict[str, Any] | None = field(
        None,
        description=(
            "Default resource requests/limits applied to every container (init containers included) unless the "
            "container already sets that resource. GPU resources here are ignored; use gpus/gpusPerReplica."
        ),
        schema=RESOURCE_REQUIREMENTS_SCHEMA,
    )
    image: str | None = field(
        None, description="Default image for containers that do not set one.", max_length=4096
    )
    image_pull_secrets: list[dict[str, Any]] | None = field(
        None,
        description="Secrets (by name) used to pull images; added to every generated pod.",
        items=LOCAL_OBJECT_REFERENCE_SCHEMA,
    )
    env: list[dict[str, Any]] | None = field(
        None,
        description="Environment variables appended to the primary workload containers.",
        items=ENV_VAR_ITEM_SCHEMA,
    )
    secret_volumes: list[SecretVolume] | None = field(
        None, description="Secrets, or single keys of them, mounted as files into the workload containers."
    )
    ray: bool = field(
        False,
        description=(
            "Run on Ray (RayJob / RayService) instead of a batch Job / Deployment."
        ),
    )
    storage: StorageSpec | None = field(
        None,
        description=(
            "PersistentVolumeClaims for data and the Hugging Face cache. Configured downloads run in a "
            "download Job that must finish before the workload starts."
        ),
    )
    dangerous: bool = field(
        False,
        description=(
            "When true, the default pod security context (runAsUser/runAsGroup/fsGroup 1000) is not added."
        ),
    )


class KaiwoJobSpec(CommonMetaSpec):
    """Desired state of a KaiwoJob."""

    cluster_queue: str | None = field(
        None,
        description=(
            "Kueue ClusterQueue (and LocalQueue of the same name) the job is submitted to; "
            "the KaiwoConfig default queue when empty."
        ),
        max_length=QUEUE_NAME_MAX,
        pattern=QUEUE_NAME_PATTERN,
    )
    priority_class: str | None = field(
        None,
        description="Priority class for the job (Kueue WorkloadPriorityClass and/or pod PriorityClass).",
        max_length=QUEUE_NAME_MAX,
        pattern=QUEUE_NAME_PATTERN,
    )
    entrypoint: str | None = field(
        None,
        description=(
            "Command or script run by the main container (becomes command/args for a batch Job, or the "
            "RayJob entrypoint). May be multi-line; a shebang selects the interpreter."
        ),
    )
    ray_job: dict[str, Any] | None = field(
        None,
        description="A complete ray.io/v1 RayJob manifest used as the base of the generated RayJob.",
        schema=embedded_object(
            "A complete ray.io/v1 RayJob manifest used as the base of the generated RayJob."
        ),
    )
    job: dict[str, Any] | None = field(
        None,
        description="A complete batch/v1 Job manifest used as the base of the generated Job.",
        schema=embedded_object("A complete batch/v1 Job manifest used as the base of the generated Job."),
    )


class KaiwoServiceSpec(CommonMetaSpec):
    """Desired state of a KaiwoService."""

    cluster_queue: str | None = field(
        None,
        description=(
            "Kueue ClusterQueue (and LocalQueue of the same name) the service is submitted to; "
            "the KaiwoConfig default queue when empty."
        ),
        max_length=QUEUE_NAME_MAX,
        pattern=QUEUE_NAME_PATTERN,
    )
    priority_class: str | None = field(
        None,
        description="Priority class for the service (Kueue WorkloadPriorityClass and/or pod PriorityClass).",
        max_length=QUEUE_NAME_MAX,
        pattern=QUEUE_NAME_PATTERN,
    )
    entrypoint: str | None = field(
        None, description="Command or script run by the main Deployment container; not used with ray: true."
    )
    serve_config_v2: str | None = field(
        None,
        alias="serveConfigV2",
        description="Ray Serve applications as a YAML multi-line string (ray: true only).",
    )
    ray_service: dict[str, Any] | None = field(
        None,
        description="A complete ray.io/v1 RayService manifest used as the base of the generated RayService.",
        schema=embedded_object(
            "A complete ray.io/v1 RayService manifest used as the base of the generated RayService."
        ),
    )
    deployment: dict[str, Any] | None = field(
        None,
        description="A complete apps/v1 Deployment manifest used as the base of the generated Deployment.",
        schema=embedded_object(
            "A complete apps/v1 Deployment manifest used as the base of the generated Deployment."
        ),
    )


class KaiwoJobStatus(ApiModel):
    """Observed state of a KaiwoJob."""

    start_time: str | None = field(
        None, description="When the first pod of the job started running.", fmt="date-time"
    )
    completion_time: str | None = field(
        None, description="When the job finished (successfully or not).", fmt="date-time"
    )
    conditions: list[Condition] | None = field(None, description="Standard conditions of the KaiwoJob.")
    status: str | None = field(
        None, description="Lifecycle phase, e.g. PENDING, RUNNING, COMPLETE, FAILED."
    )
    duration: int | None = field(
        None, description="Run time in seconds from startTime to completionTime (or now).", fmt="int64"
    )
    observed_generation: int | None = field(
        None, description="metadata.generation last processed by the controller.", fmt="int64"
    )


class KaiwoServiceStatus(ApiModel):
    """Observed state of a KaiwoService."""

    start_time: str | None = field(
        None, description="When the first pod of the service started running.", fmt="date-time"
    )
    conditions: list[Condition] | None = field(None, description="Standard conditions of the KaiwoService.")
    status: str | None = field(
        None, description="Lifecycle phase, e.g. PENDING, STARTING, RUNNING, READY, FAILED."
    )
    duration: int | None = field(
        None, description="Seconds the service has been running since startTime.", fmt="int64"
    )
    observed_generation: int | None = field(
        None, description="metadata.generation last processed by the controller.", fmt="int64"
    )


class KaiwoJob(KubeObject):
    """A batch workload run by Kaiwo as a batch Job or a RayJob, queued through Kueue."""

    GROUP: ClassVar[str] = GROUP
    VERSION: ClassVar[str] = VERSION
    KIND: ClassVar[str] = "KaiwoJob"
    PLURAL: ClassVar[str] = "kaiwojobs"
    NAMESPACED: ClassVar[bool] = True

    spec: KaiwoJobSpec = field(
        default_factory=KaiwoJobSpec, description="Desired state: workload type, image, resources, storage."
    )
    status: KaiwoJobStatus | None = field(None, description="Observed state: phase, times and conditions.")


class KaiwoService(KubeObject):
    """A long-running workload run by Kaiwo as a Deployment or a RayService (wrapped in an AppWrapper)."""

    GROUP: ClassVar[str] = GROUP
    VERSION: ClassVar[str] = VERSION
    KIND: ClassVar[str] = "KaiwoService"
    PLURAL: ClassVar[str] = "kaiwoservices"
    NAMESPACED: ClassVar[bool] = True

    spec: KaiwoServiceSpec = field(
        default_factory=KaiwoServiceSpec, description="Desired state: workload type, image, resources, storage."
    )
    status: KaiwoServiceStatus | None = field(None, description="Observed state: phase, times and conditions.")


# --------------------------------------------------------------------------
# Queue configuration
# --------------------------------------------------------------------------

NAME_MAX = 253


class EmbeddedObjectMeta(ApiModel):
    """Metadata of an object embedded in the queue config (only name, labels, annotations are kept)."""

    name: str = field(description="Name of the object to manage.", min_length=1, max_length=NAME_MAX)
    labels: dict[str, str] | None = field(None, description="Labels for the managed object.")
    annotations: dict[str, str] | None = field(None, description="Annotations for the managed object.")


_CLUSTER_QUEUE_SPEC_DESCRIPTION = (
    "Kueue ClusterQueueSpec (resourceGroups, cohort, preemption, queueingStrategy, ...) the "
    "ClusterQueue is kept equal to. Fields not listed here are kept as written."
)


def _opaque(description: str) -> dict[str, Any]:
    return {"description": description, "type": "object", "x-kubernetes-preserve-unknown-fields": True}


#: Partial schema: the fields Kaiwo copies are named and typed, anything else is kept as written.
#: No defaults here: Kueue's own ClusterQueue CRD defaults queueingStrategy/stopPolicy on the
#: ClusterQueue, and the queue config must keep exactly what the user (or the operator) wrote.
CLUSTER_QUEUE_SPEC_SCHEMA: dict[str, Any] = {
    "description": _CLUSTER_QUEUE_SPEC_DESCRIPTION,
    "type": "object",
    "x-kubernetes-preserve-unknown-fields": True,
    "properties": {
        "resourceGroups": {
            "description": "Resource groups: covered resources and the flavors that give them quota.",
            "type": "array",
            "maxItems": 16,
            "items": _opaque("One resource group (coveredResources and flavors with their quotas)."),
        },
        "cohort": {"description": "Cohort this ClusterQueue borrows within (Kueue v1beta1 name).", "type": "string"},
        "cohortName": {"description": "Cohort this ClusterQueue borrows within (Kueue v1beta2 name).", "type": "string"},
        "queueingStrategy": {
            "description": "StrictFIFO or BestEffortFIFO (Kueue defaults it to BestEffortFIFO).",
            "type": "string",
            "enum": ["StrictFIFO", "BestEffortFIFO"],
        },
        "namespaceSelector": _opaque("Namespaces allowed to submit to this queue; {} selects all."),
        "flavorFungibility": _opaque("Whether to try the next flavor before borrowing or preempting."),
        "preemption": _opaque("Preemption policies of the queue."),
        "admissionChecks": {
            "description": "Admission checks required by this queue.",
            "type": "array",
            "items": {"type": "string"},
        },
        "admissionChecksStrategy": _opaque("Per-flavor admission check strategy."),
        "stopPolicy": {
            "description": "None, Hold or HoldAndDrain (Kueue defaults it to None); anything but None makes the queue inactive.",
            "type": "string",
            "enum": ["None", "Hold", "HoldAndDrain"],
        },
        "fairSharing": _opaque("Fair-sharing weight of the queue."),
    },
}


class ClusterQueue(ApiModel):
    """A Kueue ClusterQueue managed by Kaiwo."""

    name: str = field(description="Name of the ClusterQueue.", min_length=1, max_length=NAME_MAX)
    spec: dict[str, Any] | None = field(
        None,
        description=_CLUSTER_QUEUE_SPEC_DESCRIPTION,
        schema=CLUSTER_QUEUE_SPEC_SCHEMA,
    )
    namespaces: list[str] | None = field(
        None,
        description=(
            "Namespaces that get a LocalQueue of the same name pointing at this ClusterQueue. When set, "
            "Kaiwo manages those LocalQueues; leave empty to manage LocalQueues yourself."
        ),
        items={"maxLength": 63, "pattern": NAMESPACE_PATTERN},
    )


class ResourceFlavorSpec(ApiModel):
    """A Kueue ResourceFlavor managed by Kaiwo."""

    name: str = field(
        description="Name of the ResourceFlavor, e.g. amd-mi300-8gpu.", min_length=1, max_length=NAME_MAX
    )
    node_labels: dict[str, str] | None = field(
        None,
        description="Node labels a pod using this flavor must match, e.g. {kaiwo/nodepool: amd-gpu-nodes}.",
        max_properties=10,
    )
    taints: list[dict[str, Any]] | None = field(
        None, description="Taints associated with this flavor.", max_items=5, items=TAINT_SCHEMA
    )
    tolerations: list[dict[str, Any]] | None = field(
        None, description="Tolerations associated with this flavor.", max_items=5, items=TOLERATION_SCHEMA
    )
    topology_name: str | None = field(
        None, description="Kueue Topology this flavor belongs to (default-topology when empty)."
    )


class WorkloadPriorityClass(ApiModel):
    """A Kueue WorkloadPriorityClass managed by Kaiwo."""

    api_version: str | None = field(None, description="Optional; kueue.x-k8s.io version of the object.")
    kind: str | None = field(None, description="Optional; WorkloadPriorityClass.")
    metadata: EmbeddedObjectMeta = field(description="Metadata; name is required.")
    value: int = field(
        description="Priority value; higher values are admitted and preempt first.", fmt="int32"
    )
    description: str | None = field(None, description="Free-form description.")


class TopologyLevel(ApiModel):
    """One level of a Kueue topology, identified by a node label."""

    node_label: str = field(
        description="Node label that defines this level, e.g. kaiwo/topology-rack.",
        min_length=1,
        max_length=316,
        pattern=LABEL_KEY_PATTERN,
    )


class TopologySpec(ApiModel):
    """Levels of a Kueue topology, from the widest to the narrowest."""

    levels: list[TopologyLevel] = field(
        description=(
            "Topology levels, widest first (1 to 8). Node labels must be unique; kubernetes.io/hostname "
            "may only be the last level."
        ),
        min_items=1,
        max_items=8,
        cel=[
            (
                "self.all(x, self.exists_one(y, y.nodeLabel == x.nodeLabel))",
                "levels[].nodeLabel must be unique",
            ),
            (
                f"!self.exists(l, l.nodeLabel == '{HOSTNAME_LABEL}') || "
                f"self[size(self) - 1].nodeLabel == '{HOSTNAME_LABEL}'",
                f"levels: the {HOSTNAME_LABEL} label can only be used as the last (lowest) level",
            ),
        ],
    )

    @model_validator(mode="after")
    def _levels_rules(self) -> TopologySpec:
        # Same rules as the CRD's CEL validations, so invalid specs fail before reaching the apiserver.
        labels = [lvl.node_label for lvl in self.levels]
        if _duplicates(labels):
            raise ValueError("levels[].nodeLabel must be unique")
        if HOSTNAME_LABEL in labels and labels[-1] != HOSTNAME_LABEL:
            raise ValueError(f"levels: the {HOSTNAME_LABEL} label can only be used as the last (lowest) level")
        return self


class Topology(ApiModel):
    """A Kueue Topology managed by Kaiwo."""

    api_version: str | None = field(None, description="Optional; kueue.x-k8s.io version of the object.")
    kind: str | None = field(None, description="Optional; Topology.")
    metadata: EmbeddedObjectMeta = field(description="Metadata; name is required.")
    spec: TopologySpec = field(description="Topology levels.")


def _unique(path: str, key: str) -> tuple[str, str]:
    return (
        f"self.all(x, self.exists_one(y, y.{key} == x.{key}))",
        f"{path}: {key} must be unique",
    )


class KaiwoQueueConfigSpec(ApiModel):
    """Kueue objects Kaiwo manages. There is normally one KaiwoQueueConfig, named kaiwo."""

    cluster_queues: list[ClusterQueue] | None = field(
        None,
        description="ClusterQueues Kaiwo creates and keeps in sync; unlisted ClusterQueues are deleted.",
        max_items=10,
        cel=[_unique("clusterQueues", "name")],
    )
    resource_flavors: list[ResourceFlavorSpec] | None = field(
        None,
        description=(
            "ResourceFlavors Kaiwo creates and keeps in sync. When empty, flavors are discovered from node pools."
        ),
        max_items=20,
        cel=[_unique("resourceFlavors", "name")],
    )
    workload_priority_classes: list[WorkloadPriorityClass] | None = field(
        None,
        description="Kueue WorkloadPriorityClasses Kaiwo creates and keeps in sync.",
        max_items=5,
        cel=[_unique("workloadPriorityClasses", "metadata.name")],
    )
    topologies: list[Topology] | None = field(
        None,
        description="Kueue Topologies Kaiwo creates and keeps in sync.",
        max_items=10,
        cel=[_unique("topologies", "metadata.name")],
    )

    @model_validator(mode="after")
    def _unique_names(self) -> KaiwoQueueConfigSpec:
        # Mirrors the CRD's uniqueness CEL rules.
        checks = (
            ("clusterQueues", "name", [q.name for q in self.cluster_queues or []]),
            ("resourceFlavors", "name", [f.name for f in self.resource_flavors or []]),
            ("workloadPriorityClasses", "metadata.name", [w.metadata.name for w in self.workload_priority_classes or []]),
            ("topologies", "metadata.name", [t.metadata.name for t in self.topologies or []]),
        )
        for path, key, names in checks:
            dups = _duplicates(names)
            if dups:
                raise ValueError(f"{path}: {key} must be unique (duplicated: {', '.join(dups)})")
        return self


class KaiwoQueueConfigStatus(ApiModel):
    """Observed state of the Kueue synchronisation."""

    conditions: list[Condition] | None = field(None, description="Standard conditions of the KaiwoQueueConfig.")
    status: str | None = field(None, description="Overall sync state, e.g. READY or FAILED.")


class KaiwoQueueConfig(KubeObject):
    """Cluster-wide Kueue setup (ClusterQueues, ResourceFlavors, WorkloadPriorityClasses, Topologies)
    managed by Kaiwo. Normally a single object named kaiwo."""

    GROUP: ClassVar[str] = GROUP
    VERSION: ClassVar[str] = VERSION
    KIND: ClassVar[str] = "KaiwoQueueConfig"
    PLURAL: ClassVar[str] = "kaiwoqueueconfigs"
    NAMESPACED: ClassVar[bool] = False

    spec: KaiwoQueueConfigSpec = field(
        default_factory=KaiwoQueueConfigSpec, description="Kueue objects Kaiwo should manage."
    )
    status: KaiwoQueueConfigStatus | None = field(None, description="Observed state of the Kueue synchronisation.")


# --------------------------------------------------------------------------
# List kinds (what a LIST call returns)
# --------------------------------------------------------------------------


class _ListBase(ApiModel):
    api_version: str = field(API_VERSION, description="APIVersion of the list.")
    kind: str = field("", description="Kind of the list.")
    metadata: dict[str, Any] | None = field(None, description="List metadata (resourceVersion, continue).")


class KaiwoJobList(_ListBase):
    """A list of KaiwoJobs."""

    kind: str = field("KaiwoJobList", description="Kind of the list.")
    items: list[KaiwoJob] = field(default_factory=list, description="The KaiwoJobs.")


class KaiwoServiceList(_ListBase):
    """A list of KaiwoServices."""

    kind: str = field("KaiwoServiceList", description="Kind of the list.")
    items: list[KaiwoService] = field(default_factory=list, description="The KaiwoServices.")


class KaiwoQueueConfigList(_ListBase):
    """A list of KaiwoQueueConfigs."""

    kind: str = field("KaiwoQueueConfigList", description="Kind of the list.")
    items: list[KaiwoQueueConfig] = field(default_factory=list, description="The KaiwoQueueConfigs.")


Workload = KaiwoJob | KaiwoService
WorkloadSpec = KaiwoJobSpec | KaiwoServiceSpec

__all__ = [
    "API_VERSION",
    "AzureBlobStorageDownloadItem",
    "CloudDownloadBucket",
    "CloudDownloadFile",
    "CloudDownloadFolder",
    "ClusterQueue",
    "CommonMetaSpec",
    "Condition",
    "DataStorageSpec",
    "DownloadTaskConfig",
    "EmbeddedObjectMeta",
    "GCSDownloadItem",
    "GROUP",
    "GitDownloadItem",
    "HfStorageSpec",
    "HuggingFaceDownloadItem",
    "KaiwoJob",
    "KaiwoJobList",
    "KaiwoJobSpec",
    "KaiwoJobStatus",
    "KaiwoQueueConfig",
    "KaiwoQueueConfigList",
    "KaiwoQueueConfigSpec",
    "KaiwoQueueConfigStatus",
    "KAIWO_QUEUE_CONFIG_NAME",
    "KaiwoService",
    "KaiwoServiceList",
    "KaiwoServiceSpec",
    "KaiwoServiceStatus",
    "ObjectMeta",
    "ObjectStorageDownloadSpec",
    "ResourceFlavorSpec",
    "S3DownloadItem",
    "SecretVolume",
    "Status",
    "StorageSpec",
    "Topology",
    "TopologyLevel",
    "TopologySpec",
    "VERSION",
    "ValueReference",
    "Workload",
    "WorkloadPriorityClass",
    "WorkloadSpec",
]
