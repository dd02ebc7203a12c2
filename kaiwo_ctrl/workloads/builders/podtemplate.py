"""Pod template generation and decoration and entrypoint parsing."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from kaiwo_ctrl.aim.credentials import pull_secrets
from kaiwo_ctrl.runtime.objects.fielderrors import FieldError

from ..base.gpu import GpuPlan, gpu_resource_key
from ..base.kaiwoobject import KaiwoObject
from ..base.labels import (
    ANNOTATION_PREFERRED_TOPOLOGY,
    ANNOTATION_REQUIRED_TOPOLOGY,
    LABEL_QUEUE_NAME,
    NODE_LABEL_GPU_MODEL,
    NOT_COPIED_ANNOTATIONS,
)
from ..base.resources import apply_to_container, apply_to_init_container, container_requests_gpu, resource_template
from ..base.world import World
from .storage import SECURITY_CONTEXT, StoragePlan

DSHM_VOLUME = "dshm"
DSHM_MOUNT = {"name": DSHM_VOLUME, "mountPath": "/dev/shm"}
DSHM_SIZE_DEFAULT = "1Gi"
DSHM_SIZE_RAY_WORKER = "200Gi"
DEFAULT_SHELL = "/bin/sh"

_CONTINUATION = re.compile(r"\\[ \t]*\r?\n")


class EntrypointError(ValueError):
    pass


# ---------------------------------------------------------------------------
# Shape checks of user-supplied embedded objects. The CRD keeps embedded
# Job/Deployment/RayJob/RayService manifests as free-form objects, so a
# schema-valid object can hold ``containers: ["x"]``; these checks turn that
# into a FieldError naming the field before any builder touches it.
# ---------------------------------------------------------------------------


def _kind_of(value: Any) -> str:
    kinds = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}
    return kinds.get(type(value), type(value).__name__)


def expect_mapping(value: Any, path: str) -> dict[str, Any]:
    """``value`` when it is an object (``{}`` for a missing one), else FieldError."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise FieldError(path, f"must be an object, not {_kind_of(value)}")
    return value


def expect_objects(value: Any, path: str) -> list[dict[str, Any]]:
    """``value`` when it is a list of objects (``[]`` for a missing one), else FieldError."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise FieldError(path, f"must be a list, not {_kind_of(value)}")
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            raise FieldError(f"{path}[{i}]", f"must be an object, not {_kind_of(item)}")
    return value


def _expect_strings(value: Any, path: str) -> None:
    for key, item in expect_mapping(value, path).items():
        if not isinstance(item, str):
            raise FieldError(f"{path}[{key}]", f"must be a string, not {_kind_of(item)}")


def mapping_at(parent: dict[str, Any], key: str, path: str) -> dict[str, Any]:
    """``parent[key]`` checked to be an object; a missing or null one is set to ``{}``."""
    value = expect_mapping(parent.get(key), path)
    if parent.get(key) is None:
        parent[key] = value
    return value


def _optional_mapping(parent: dict[str, Any], key: str, path: str) -> dict[str, Any]:
    """``parent[key]`` checked to be an object; an explicit null is dropped."""
    if key in parent and parent[key] is None:
        del parent[key]
    return expect_mapping(parent.get(key), path)


def check_pod_template(template: Any, path: str) -> dict[str, Any]:
    """Check the shape of a pod template the builders will decorate (null
    objects the decorators fill in become ``{}``)."""
    template = expect_mapping(template, path)
    meta = mapping_at(template, "metadata", f"{path}.metadata")
    for key in ("labels", "annotations"):
        _expect_strings(meta.get(key), f"{path}.metadata.{key}")
    pod = mapping_at(template, "spec", f"{path}.spec")
    for key in ("containers", "initContainers"):
        for i, container in enumerate(expect_objects(pod.get(key), f"{path}.spec.{key}")):
            cpath = f"{path}.spec.{key}[{i}]"
            resources = _optional_mapping(container, "resources", f"{cpath}.resources")
            for part in ("limits", "requests"):
                _optional_mapping(resources, part, f"{cpath}.resources.{part}")
            for list_key in ("env", "volumeMounts"):
                expect_objects(container.get(list_key), f"{cpath}.{list_key}")
    for key in ("volumes", "imagePullSecrets", "tolerations"):
        expect_objects(pod.get(key), f"{path}.spec.{key}")
    expect_mapping(pod.get("affinity"), f"{path}.spec.affinity")
    return template


def normalize_entrypoint(text: str) -> str:
    """Trim, then join backslash line continuations with a space."""
    return _CONTINUATION.sub(" ", text.strip())


def parse_entrypoint(text: str) -> list[str]:
    """The first container's ``command`` for a non-Ray entrypoint.

    ``sleep 1`` -> ``["/bin/sh", "-c", "sleep 1"]``; a first line ``#!<interp>``
    selects the interpreter and the rest of the lines are the script.

    Difference from the reference: the interpreter line is split on
    whitespace, so ``#!/usr/bin/env bash`` gives ``["/usr/bin/env", "bash",
    "-c", ...]``. The reference passed ``"/usr/bin/env bash"`` as one argv
    element, which no kernel can exec.
    """
    body = normalize_entrypoint(text)
    if not body:
        raise EntrypointError("entrypoint is empty")
    first, _, rest = body.partition("\n")
    if first.startswith("#!"):
        interpreter = first[2:].split()
        if not interpreter:
            raise EntrypointError("entrypoint starts with '#!' but names no interpreter")
        if not rest.strip():
            raise EntrypointError("entrypoint has an interpreter line but no script")
        return [*interpreter, "-c", rest]
    return [DEFAULT_SHELL, "-c", body]


def default_pod_template(
    container_name: str, *, scheduler_name: str, dshm_size: str, dangerous: bool, restart_policy: str = "Never"
) -> dict[str, Any]:
    """The template used when the user supplied no underlying spec."""
    spec: dict[str, Any] = {
        "schedulerName": scheduler_name,
        "restartPolicy": restart_policy,
        "containers": [{"name": container_name, "imagePullPolicy": "Always", "volumeMounts": [dict(DSHM_MOUNT)]}],
        "volumes": [{"name": DSHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": dshm_size}}],
    }
    if not dangerous:
        spec["securityContext"] = dict(SECURITY_CONTEXT)
    return {"metadata": {}, "spec": spec}


@dataclass(frozen=True)
class PodRole:
    """How one pod template is decorated."""

    plan: GpuPlan
    #: GPUs per pod of this role (0 for the Ray head).
    gpus_per_pod: int
    #: Ray head: memory forced to ``ray.headPodMemory``.
    head_memory: str | None = None
    #: Extra labels written after the system labels (queue labels on Deployment / Ray head).
    extra_labels: dict[str, str] | None = None


def _append_unique(items: list[dict], new: list[dict], key: str = "name") -> None:
    present = {i.get(key) for i in items}
    for item in new:
        if item.get(key) not in present:
            items.append(item)
            present.add(item.get(key))


def decorate_pod_template(
    template: dict[str, Any], obj: KaiwoObject, world: World, storage: StoragePlan, role: PodRole
) -> dict[str, Any]:
    """Apply metadata, pod-level additions, container settings and resources,
    GPU model affinity and tolerations in place and return the template."""
    settings = world.settings
    gpu_key = gpu_resource_key(obj.gpu_vendor, settings.default_gpu_resource_key)
    _decorate_metadata(template.setdefault("metadata", {}), obj, role)
    pod = template.setdefault("spec", {})
    # Priority: a scheduling.k8s.io PriorityClass of that name -> pod priority.
    if obj.priority_class and obj.priority_class in world.priority_classes:
        pod["priorityClassName"] = obj.priority_class
    _add_pull_secrets(pod, obj, world)
    _add_volumes(pod, obj.spec, storage)
    _decorate_containers(pod, obj, storage, role, gpu_key, settings.default_ray_image)

    # GPU model affinity
    if obj.gpu_models and role.plan.gpus_per_replica > 0:
        affinity = dict(pod.get("affinity") or {})
        affinity["nodeAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": NODE_LABEL_GPU_MODEL, "operator": "In", "values": obj.gpu_models}]}
                ]
            }
        }
        pod["affinity"] = affinity

    # tolerations
    containers = pod.get("containers") or []
    if settings.add_taints_to_gpu_nodes and any(container_requests_gpu(c, gpu_key) for c in containers):
        toleration = {"key": settings.default_gpu_taint_key, "operator": "Exists", "effect": "NoSchedule"}
        tolerations = list(pod.get("tolerations") or [])
        if toleration not in tolerations:
            tolerations.append(toleration)
        pod["tolerations"] = tolerations
    return template


def _decorate_metadata(meta: dict[str, Any], obj: KaiwoObject, role: PodRole) -> None:
    """Pod labels (template, object, system, role; in that order of precedence
    from lowest) and annotations (the object's, plus the topology request)."""
    spec_ = obj.spec
    labels = dict(meta.get("labels") or {})
    for key, value in (spec_.get("podTemplateSpecLabels") or {}).items():
        labels[key] = value
    for key, value in obj.labels.items():
        if key != LABEL_QUEUE_NAME:
            labels.setdefault(key, value)
    labels.update(obj.system_labels())
    labels.update(role.extra_labels or {})
    meta["labels"] = labels
    annotations = dict(meta.get("annotations") or {})
    for key, value in obj.annotations.items():
        if key not in NOT_COPIED_ANNOTATIONS:
            annotations[key] = value
    # Topology-aware scheduling is opt-in (as upstream Kaiwo since #432): a Pod gets a
    # Kueue topology request only when the spec names a level; required wins over preferred.
    if spec_.get("requiredTopologyLabel"):
        annotations[ANNOTATION_REQUIRED_TOPOLOGY] = spec_["requiredTopologyLabel"]
    elif spec_.get("preferredTopologyLabel"):
        annotations[ANNOTATION_PREFERRED_TOPOLOGY] = spec_["preferredTopologyLabel"]
    if annotations:
        meta["annotations"] = annotations
    else:
        meta.pop("annotations", None)  # the API server stores no empty map either


def _add_pull_secrets(pod: dict[str, Any], obj: KaiwoObject, world: World) -> None:
    if obj.spec.get("imagePullSecrets"):
        pod["imagePullSecrets"] = list(pod.get("imagePullSecrets") or [])
        _append_unique(pod["imagePullSecrets"], [dict(s) for s in obj.spec["imagePullSecrets"]])
    # The namespace's AIMNamespaceConfig adds its pull secrets after the object's own. The
    # list is always set, empty included, so a secret removed from the config (or a deleted
    # config) is removed from an updatable template too instead of being kept by the merge.
    pod["imagePullSecrets"] = pull_secrets(world.aim_config(obj.namespace), pod.get("imagePullSecrets"))


def _add_volumes(pod: dict[str, Any], spec_: dict[str, Any], storage: StoragePlan) -> None:
    """The storage PVCs and the secret volumes, after the template's own (same names kept)."""
    volumes: list[dict] = list(pod.get("volumes") or [])
    new_volumes: list[dict] = []
    if storage.data_requested:
        new_volumes.append({"name": "data", "persistentVolumeClaim": {"claimName": storage.data_pvc_name}})
    if storage.hf_requested:
        new_volumes.append({"name": "hf", "persistentVolumeClaim": {"claimName": storage.hf_pvc_name}})
    for sv in spec_.get("secretVolumes") or []:
        secret: dict[str, Any] = {"secretName": sv.get("secretName")}
        if sv.get("key"):
            # Difference from the reference (which mounted the whole secret and
            # ignored ``key``): project the chosen key to the file name the
            # mount expects, so ``key: token, subPath: token.txt`` works.
            secret["items"] = [{"key": sv["key"], "path": sv.get("subPath") or sv["key"]}]
        new_volumes.append({"name": sv.get("name"), "secret": secret})
    _append_unique(volumes, new_volumes)
    if volumes:
        pod["volumes"] = volumes


def _decorate_containers(
    pod: dict[str, Any], obj: KaiwoObject, storage: StoragePlan, role: PodRole, gpu_key: str, default_image: str
) -> None:
    """Storage env and mounts on every container; image, GPU env and resources on
    the main containers; the init containers' resources."""
    spec_ = obj.spec
    env_extra = [dict(e) for e in spec_.get("env") or []]
    if storage.hf_requested:
        env_extra.append({"name": "HF_HOME", "value": storage.hf_mount_path})
    mounts: list[dict] = []
    if storage.data_requested:
        mounts.append({"name": "data", "mountPath": storage.data_mount_path})
    if storage.hf_requested:
        mounts.append({"name": "hf", "mountPath": storage.hf_mount_path})
    for sv in spec_.get("secretVolumes") or []:
        m = {"name": sv.get("name"), "mountPath": sv.get("mountPath")}
        if sv.get("subPath"):
            m["subPath"] = sv["subPath"]
        mounts.append(m)

    template_res = resource_template(
        spec_.get("resources"),
        gpu_key=gpu_key,
        gpus_per_replica=role.gpus_per_pod,
        generated=not obj.user_supplied,
        head_memory=role.head_memory,
    )
    image = spec_.get("image") or default_image
    for c in pod.get("containers") or []:
        _add_storage_env_mounts(c, mounts, env_extra)
        if not c.get("image"):
            c["image"] = image
        c["env"] = list(c.get("env") or []) + role.plan.env()
        apply_to_container(c, template_res, gpu_key)
    for c in pod.get("initContainers") or []:
        _add_storage_env_mounts(c, mounts, env_extra)
        apply_to_init_container(c, spec_.get("resources"))


def _add_storage_env_mounts(container: dict[str, Any], mounts: list[dict], env: list[dict]) -> None:
    if mounts:
        container["volumeMounts"] = list(container.get("volumeMounts") or []) + [dict(m) for m in mounts]
    if env:
        container["env"] = list(container.get("env") or []) + [dict(e) for e in env]


def apply_entrypoint(template: dict[str, Any], entrypoint: str) -> None:
    """Set the first container's command from the entrypoint (``args`` untouched)."""
    containers = (template.get("spec") or {}).get("containers") or []
    if not containers:
        raise EntrypointError("the pod template has no container to run the entrypoint in")
    containers[0]["command"] = parse_entrypoint(entrypoint)


__all__ = [
    "EntrypointError",
    "PodRole",
    "apply_entrypoint",
    "check_pod_template",
    "expect_mapping",
    "mapping_at",
    "expect_objects",
    "decorate_pod_template",
    "default_pod_template",
    "normalize_entrypoint",
    "parse_entrypoint",
]
