"""A read-only view over a KaiwoJob / KaiwoService (model or dict) with the
spec defaults of the API reference applied."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from api.kaiwo.v1alpha1 import KaiwoJob, KaiwoService
from kaiwo_ctrl.runtime.objects.ownership import owner_reference

from .labels import object_labels, system_labels
from .world import Settings, as_dict

API_VERSION = "kaiwo.silogen.ai/v1alpha1"
KINDS = ("KaiwoJob", "KaiwoService")


_MODELS: dict[str, type[KaiwoJob] | type[KaiwoService]] = {"KaiwoJob": KaiwoJob, "KaiwoService": KaiwoService}


@dataclass(frozen=True)
class KaiwoObject:
    """``doc`` is the object as a camelCase dict with the CRD defaults applied
    (it went through the typed model). ``replicas_given`` records whether the
    user wrote ``spec.replicas`` (the default hides that otherwise)."""

    doc: dict[str, Any]
    replicas_given: bool = True

    @classmethod
    def of(cls, obj: Any, kind: str | None = None) -> KaiwoObject:
        """Accept a KaiwoJob/KaiwoService model or dict. Raises
        ``pydantic.ValidationError`` for a dict that does not fit the API."""
        if isinstance(obj, KaiwoObject):
            return obj
        if isinstance(obj, (KaiwoJob, KaiwoService)):
            return cls(copy.deepcopy(obj.to_k8s()), "replicas" in obj.spec.model_fields_set)
        # a shallow copy is enough: model_validate + to_k8s() build fresh
        # containers, so nothing below can reach (and mutate) a cached object
        raw = dict(as_dict(obj))
        if kind and not raw.get("kind"):
            raw["kind"] = kind
        model = _MODELS.get(str(raw.get("kind")))
        if model is None:
            raise ValueError(f"not a Kaiwo workload: kind={raw.get('kind')!r}")
        given = (raw.get("spec") or {}).get("replicas") is not None
        typed = model.model_validate(raw)
        doc = typed.to_k8s()
        # Keep fields the model does not know about (newer CRD fields) as given.
        for key, value in (raw.get("spec") or {}).items():
            if key not in doc["spec"]:
                doc["spec"][key] = copy.deepcopy(value)
        # Mount paths the user left empty fall back to the KaiwoConfig defaults
        # (mountPath defaults are configuration), not to the model's own default.
        raw_storage = (raw.get("spec") or {}).get("storage") or {}
        storage = doc["spec"].get("storage") or {}
        for section in ("data", "huggingFace"):
            if section in storage and not (raw_storage.get(section) or {}).get("mountPath"):
                storage[section].pop("mountPath", None)
        return cls(doc, given)

    def with_object(self, obj: Any) -> KaiwoObject:
        """The same parsed spec with ``obj``'s metadata and status (after our own
        status write: nothing but the status changed)."""
        raw = as_dict(obj)
        doc = {**self.doc, "metadata": raw.get("metadata") or self.doc.get("metadata"), "status": raw.get("status")}
        return KaiwoObject(doc, self.replicas_given)

    # -- metadata -------------------------------------------------------------
    @property
    def kind(self) -> str:
        return self.doc["kind"]

    @property
    def is_job(self) -> bool:
        return self.kind == "KaiwoJob"

    @property
    def meta(self) -> dict[str, Any]:
        return self.doc["metadata"]

    @property
    def name(self) -> str:
        return self.meta.get("name") or ""

    @property
    def namespace(self) -> str:
        return self.meta.get("namespace") or "default"

    @property
    def uid(self) -> str:
        return self.meta.get("uid") or ""

    @property
    def generation(self) -> int | None:
        return self.meta.get("generation")

    @property
    def labels(self) -> dict[str, str]:
        return dict(self.meta.get("labels") or {})

    @property
    def annotations(self) -> dict[str, str]:
        return dict(self.meta.get("annotations") or {})

    @property
    def status(self) -> dict[str, Any]:
        return dict(self.doc.get("status") or {})

    @property
    def spec(self) -> dict[str, Any]:
        return self.doc["spec"]

    def owner_reference(self) -> dict[str, Any]:
        """The controller owner reference children carry (the one helper in
        :mod:`kaiwo_ctrl.runtime.objects.ownership` builds it)."""
        owner = {"apiVersion": self.doc.get("apiVersion") or API_VERSION, "kind": self.kind,
                 "metadata": {"name": self.name, "uid": self.uid}}
        return owner_reference(owner)

    def child_metadata(self, labels: dict[str, str] | None = None, name: str | None = None) -> dict[str, Any]:
        """Metadata of a child: name/namespace, labels, controller owner reference."""
        meta: dict[str, Any] = {"name": name or self.name, "namespace": self.namespace}
        if labels:
            meta["labels"] = dict(labels)
        meta["ownerReferences"] = [self.owner_reference()]
        return meta

    def system_labels(self) -> dict[str, str]:
        return system_labels(self.kind, self.name, self.spec.get("user"), self.uid)

    def object_labels(self) -> dict[str, str]:
        return object_labels(self.kind, self.meta, self.spec)

    # -- spec with defaults -----------------------------------------------------
    @property
    def gpus(self) -> int:
        return int(self.spec.get("gpus") or 0)

    @property
    def gpu_vendor(self) -> str:
        return self.spec.get("gpuVendor") or "amd"

    @property
    def replicas(self) -> int | None:
        """``spec.replicas`` as given; ``None`` when unset (the CRD defaults it to 1)."""
        value = self.spec.get("replicas")
        return None if value is None else int(value)

    @property
    def gpus_per_replica(self) -> int:
        return int(self.spec.get("gpusPerReplica") or 0)

    @property
    def gpu_models(self) -> list[str]:
        return list(self.spec.get("gpuModels") or [])

    @property
    def priority_class(self) -> str:
        return self.spec.get("priorityClass") or ""

    @property
    def entrypoint(self) -> str:
        return self.spec.get("entrypoint") or ""

    @property
    def dangerous(self) -> bool:
        return bool(self.spec.get("dangerous"))

    @cached_property
    def is_ray(self) -> bool:
        if self.is_job:
            return bool(self.spec.get("rayJob")) or bool(self.spec.get("ray"))
        return bool(self.spec.get("rayService")) or bool(self.spec.get("ray"))

    @property
    def user_spec(self) -> dict[str, Any] | None:
        """The user-supplied underlying object for the chosen workload type, if any."""
        if self.is_job:
            key = "rayJob" if self.is_ray else "job"
        else:
            key = "rayService" if self.is_ray else "deployment"
        value = self.spec.get(key)
        return copy.deepcopy(value) if value else None

    @property
    def user_supplied(self) -> bool:
        """True when the user gave any underlying spec (job, deployment, rayJob,
        rayService): the GPU-derived cpu/memory then only fill gaps the user left."""
        return any(self.spec.get(k) for k in ("job", "deployment", "rayJob", "rayService"))

    def queue_name(self, settings: Settings) -> str:
        return self.spec.get("clusterQueue") or settings.default_cluster_queue_name

    def storage(self) -> dict[str, Any] | None:
        storage = self.spec.get("storage")
        if not storage or not storage.get("storageEnabled"):
            return None
        return storage
