"""kubeai.org/v1: Model."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import field_validator, model_validator

from api.base import ApiModel
from api.fields import field
from api.meta import Condition, KubeObject, embedded_object

GROUP = "kubeai.org"
VERSION = "v1"
API_VERSION = f"{GROUP}/{VERSION}"

Engine = Literal["OLlama", "VLLM", "FasterWhisper", "Infinity"]
ModelFeature = Literal["TextGeneration", "TextEmbedding", "Reranking", "SpeechToText"]  # Reranking: KubeAI 0.22, /v1/rerank
LoadBalancingStrategy = Literal["LeastLoad", "PrefixHash"]

MODEL_URL_SCHEMES = ("hf://", "pvc://", "ollama://", "s3://", "gs://", "oss://")
ADAPTER_URL_SCHEMES = ("hf://", "s3://", "gs://", "oss://")
CACHEABLE_URL_SCHEMES = ("hf://", "s3://", "gs://", "oss://")
MODEL_NAME_MAX = 40
#: Most LoRA adapters one Model may list: each is loaded on every server Pod by the
#: operator (bounded work per reconcile); KubeAI sets no bound.
MAX_ADAPTERS = 256


def _starts_with_any(expr: str, prefixes: tuple[str, ...]) -> str:
    return " || ".join(f"{expr}.startsWith('{p}')" for p in prefixes)


class Adapter(ApiModel):
    """A LoRA adapter loaded next to the model (VLLM only)."""

    name: str = field(
        description="Adapter name: lower-case letters, digits and dashes.",
        max_length=63,
        pattern=r"^[a-z0-9-]+$",
    )
    url: str | None = field(
        None,
        description="Where the adapter comes from: hf://, s3://, gs:// or oss://.",
        cel=[(_starts_with_any("self", ADAPTER_URL_SCHEMES), "adapters[].url must start with hf://, s3://, gs:// or oss://")],
    )

    @field_validator("url")
    @classmethod
    def _url_scheme(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(ADAPTER_URL_SCHEMES):
            raise ValueError("adapters[].url must start with hf://, s3://, gs:// or oss://")
        return value


class File(ApiModel):
    """A file mounted into the model server pods."""

    path: str = field(
        description="Absolute path of the file in the pod (no ':').",
        max_length=1024,
        cel=[("self.startsWith('/') && !self.contains(':')", "files[].path must be absolute and must not contain ':'")],
    )

    @field_validator("path")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not value.startswith("/") or ":" in value:
            raise ValueError("files[].path must be absolute and must not contain ':'")
        return value
    content: str = field(
        description="File content; stored in a ConfigMap mounted into the model pods.",
        max_length=100000,
    )


class PrefixHash(ApiModel):
    """Settings of the PrefixHash (consistent hashing with bounded loads) strategy."""

    mean_load_factor: int = field(
        125,
        description="Percentage of the mean load any endpoint may carry on the hash ring.",
        minimum=100,
    )
    replication: int = field(
        256,
        description="Virtual nodes per endpoint on the hash ring. Cannot be changed once set.",
        cel=[("self == oldSelf", "loadBalancing.prefixHash.replication is immutable")],
    )
    prefix_char_length: int = field(100, description="Number of prompt characters used as the hash key.")


class LoadBalancing(ApiModel):
    """How requests are spread over the model's endpoints."""

    strategy: LoadBalancingStrategy = field("LeastLoad", description="LeastLoad or PrefixHash.")
    prefix_hash: PrefixHash = field(default_factory=PrefixHash, description="PrefixHash strategy settings.")


class ModelSpec(ApiModel):
    """Desired state of a Model."""

    url: str = field(
        description=(
            "Where the weights come from: hf://<repo>/<model>, pvc://<pvc>[/<path>], ollama://<model>, "
            "s3://<bucket>/<path>, gs://<bucket>/<path> or oss://<bucket>/<path> (gs:// and oss:// need a cacheProfile)."
        ),
        cel=[(_starts_with_any("self", MODEL_URL_SCHEMES), "url must start with hf://, pvc://, ollama://, s3://, gs:// or oss://")],
    )
    adapters: list[Adapter] | None = field(
        None, max_items=MAX_ADAPTERS,
        description=f"LoRA adapters (engine VLLM only), at most {MAX_ADAPTERS} (KubeAI sets no bound).",
    )
    features: list[ModelFeature] = field(
        description=(
            "APIs the model supports: TextGeneration, TextEmbedding, Reranking, SpeechToText. Required; may be empty."
        )
    )
    engine: Engine = field(description="Inference engine: OLlama, VLLM, FasterWhisper or Infinity.")
    resource_profile: str | None = field(
        None, description='Resource profile and count, "<profile>:<count>", e.g. nvidia-gpu-l4:2.'
    )
    cache_profile: str | None = field(
        None,
        description="Cache profile used to cache the model files. Cannot be changed once set.",
        cel=[("self == oldSelf", "cacheProfile is immutable")],
    )
    image: str | None = field(None, description="Server image; derived from resource profile and engine when empty.")
    args: list[str] | None = field(None, description="Extra arguments for the server process.")
    env: dict[str, str] | None = field(None, description="Extra environment variables for the server process.")
    env_from: list[dict[str, Any]] | None = field(
        None,
        description="Environment sources (Secrets, ConfigMaps) for the server process.",
        items=embedded_object("An EnvFromSource."),
    )
    replicas: int | None = field(
        None, description="Desired pod replicas; managed by KubeAI unless autoscalingDisabled.", fmt="int32"
    )
    min_replicas: int | None = field(
        None, description="Lowest replica count autoscaling may use; 0 allows scale to zero.", minimum=0, fmt="int32"
    )
    max_replicas: int | None = field(
        None, description="Highest replica count autoscaling may use; unbounded when empty.", minimum=1, fmt="int32"
    )
    autoscaling_disabled: bool | None = field(
        None, description="Stop KubeAI from managing replicas (no metrics collection either)."
    )
    target_requests: int = field(
        100, description="Average active requests per replica the autoscaler aims for.", minimum=1, fmt="int32"
    )
    scale_down_delay_seconds: int = field(
        30, description="Minimum delay before acting on a scale-down decision.", fmt="int64"
    )
    owner: str | None = field(None, description="Deprecated; shown as owned_by in /v1/models.")
    load_balancing: LoadBalancing = field(
        default_factory=LoadBalancing, description="Load balancing settings; defaults apply when empty."
    )
    files: list[File] | None = field(
        None,
        description="Files mounted into the model pods (at most 10, unique paths).",
        max_items=10,
        cel=[("self.all(x, self.exists_one(y, y.path == x.path))", "files[].path must be unique")],
    )
    priority_class_name: str | None = field(
        None, description="PriorityClass for every pod of the model; must exist beforehand."
    )

    @model_validator(mode="after")
    def _admission_rules(self) -> ModelSpec:
        # The non-transition CEL rules of the CRD, checked in Python too.
        url = self.url
        if not url.startswith(MODEL_URL_SCHEMES):
            raise ValueError("url must start with hf://, pvc://, ollama://, s3://, gs:// or oss://")
        if self.cache_profile is not None and not url.startswith(CACHEABLE_URL_SCHEMES):
            raise ValueError("cacheProfile is only supported with hf://, s3://, gs:// or oss:// urls")
        if self.cache_profile is None and url.startswith(("gs://", "oss://")):
            raise ValueError(f"{url.split('://')[0]}:// urls require a cacheProfile")
        if self.max_replicas is not None and self.min_replicas is not None and self.min_replicas > self.max_replicas:
            raise ValueError("minReplicas must be less than or equal to maxReplicas")
        if self.adapters is not None and self.engine != "VLLM":
            raise ValueError("adapters are only supported with engine VLLM")
        paths = [f.path for f in self.files or []]
        if len(paths) != len(set(paths)):
            raise ValueError("files[].path must be unique")
        return self

    #: Object-level CEL rules on spec, enforced at admission.
    CRD_VALIDATIONS: ClassVar[tuple[tuple[str, str], ...]] = (
        (
            "!has(self.cacheProfile) || " + _starts_with_any("self.url", CACHEABLE_URL_SCHEMES),
            "cacheProfile is only supported with hf://, s3://, gs:// or oss:// urls",
        ),
        ("!self.url.startsWith('gs://') || has(self.cacheProfile)", "gs:// urls require a cacheProfile"),
        ("!self.url.startsWith('oss://') || has(self.cacheProfile)", "oss:// urls require a cacheProfile"),
        (
            "!has(self.maxReplicas) || !has(self.minReplicas) || self.minReplicas <= self.maxReplicas",
            "minReplicas must be less than or equal to maxReplicas",
        ),
        ("!has(self.adapters) || self.engine == 'VLLM'", "adapters are only supported with engine VLLM"),
        (
            "!has(oldSelf.cacheProfile) || self.url == oldSelf.url",
            "url cannot be changed while a cacheProfile is set",
        ),
    )


class ModelStatusReplicas(ApiModel):
    """Pod counts of the model."""

    all: int | None = field(None, description="Pods of the model, ready or not.", fmt="int32")
    ready: int | None = field(None, description="Pods of the model that are Ready.", fmt="int32")


class ModelStatusCache(ApiModel):
    """Cache state of the model."""

    loaded: bool | None = field(None, description="True once the shared cache holds the model files.")


class ModelStatus(ApiModel):
    """Observed state of a Model."""

    replicas: ModelStatusReplicas | None = field(None, description="Pod counts.")
    cache: ModelStatusCache | None = field(None, description="Cache state (only with a cacheProfile).")
    conditions: list[Condition] | None = field(
        None, description="Ready, ConfigValid (names the bad field) and CacheLoaded (with a cacheProfile)."
    )


class Model(KubeObject):
    """An ML model served by KubeAI."""

    GROUP: ClassVar[str] = GROUP
    VERSION: ClassVar[str] = VERSION
    KIND: ClassVar[str] = "Model"
    PLURAL: ClassVar[str] = "models"
    NAMESPACED: ClassVar[bool] = True

    spec: ModelSpec | None = field(None, description="Desired state of the model.")
    status: ModelStatus | None = field(None, description="Observed state of the model.")


class ModelList(ApiModel):
    """A list of Models."""

    api_version: str = field(API_VERSION, description="APIVersion of the list.")
    kind: str = field("ModelList", description="Kind of the list.")
    metadata: dict[str, Any] | None = field(None, description="List metadata.")
    items: list[Model] = field(default_factory=list, description="The Models.")


__all__ = [
    "API_VERSION",
    "Adapter",
    "Engine",
    "File",
    "GROUP",
    "LoadBalancing",
    "LoadBalancingStrategy",
    "MODEL_NAME_MAX",
    "Model",
    "ModelFeature",
    "ModelList",
    "ModelSpec",
    "ModelStatus",
    "ModelStatusCache",
    "ModelStatusReplicas",
    "PrefixHash",
    "VERSION",
]
