"""Storage children (only when ``storage.storageEnabled``): data/HF PVCs, the
download ConfigMap and the download Job, plus ``StoragePlan``, the resolved
view of ``spec.storage``."""

from __future__ import annotations

import copy
import posixpath
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from api.kaiwo.download import HuggingFaceDownloadItem, ObjectStorageDownloadSpec
from kaiwo_ctrl.aim.credentials import download_env, env_names, fill_download_items
from kaiwo_ctrl.download.config import DownloadConfig
from kaiwo_ctrl.runtime.objects.fielderrors import FieldError

from ..base.kaiwoobject import KaiwoObject
from ..base.labels import LABEL_TYPE, TYPE_DOWNLOADER
from ..base.naming import name_with_suffix, volume_name
from ..base.world import World

OBJECT_DOWNLOAD_KINDS = ("s3", "gcs", "azureBlob", "git")
CONFIG_KEY = "config.yaml"
CONFIG_MOUNT_DIR = "/config"
DOWNLOADER_CONTAINER = "data-downloader"
DOWNLOADER_RESOURCES = {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "4Gi"}}
SECRETS_ROOT = "/app/secrets"
#: Pod security context of generated pods (and always of the download pod).
SECURITY_CONTEXT = {"runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000}
#: The download pod runs user-chosen URLs and paths: it gets no API token and
#: the most restrictive container settings (non-root, no privilege escalation,
#: no capabilities, RuntimeDefault seccomp, read-only root with /tmp writable).
DOWNLOADER_POD_SECURITY = {
    **SECURITY_CONTEXT,
    "runAsNonRoot": True,
    "seccompProfile": {"type": "RuntimeDefault"},
}
DOWNLOADER_CONTAINER_SECURITY = {
    "runAsNonRoot": True,
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}
@dataclass(frozen=True)
class StoragePlan:
    enabled: bool = False
    data_requested: bool = False
    hf_requested: bool = False
    data_pvc_name: str = ""
    hf_pvc_name: str = ""
    download_name: str = ""
    data_mount_path: str = ""
    hf_mount_path: str = ""
    data_size: str = ""
    hf_size: str = ""
    access_mode: str = "ReadWriteMany"
    storage_class: str = ""
    object_downloads: dict[str, Any] | None = None
    hf_repos: tuple[dict, ...] = ()

    @property
    def has_object_downloads(self) -> bool:
        return bool(self.object_downloads)

    @property
    def has_hf_downloads(self) -> bool:
        return bool(self.hf_repos)

    @property
    def downloads_configured(self) -> bool:
        return self.has_object_downloads or self.has_hf_downloads

    @classmethod
    def of(cls, obj: KaiwoObject, world: World) -> StoragePlan:
        storage = obj.storage()
        if storage is None:
            return cls()
        settings = world.settings
        data = storage.get("data") or {}
        hf = storage.get("huggingFace") or {}
        data_requested = bool(data.get("storageSize"))
        hf_requested = bool(hf.get("storageSize"))
        download = data.get("download") or {}
        objects = {k: download[k] for k in OBJECT_DOWNLOAD_KINDS if download.get(k)} if data_requested else {}
        # Items naming no Secret of their own use the namespace's AIMNamespaceConfig.
        objects = fill_download_items(world.aim_config(obj.namespace), objects) or {}
        # HF repos without an HF storageSize are ignored.
        repos = tuple(hf.get("preCacheRepos") or ()) if hf_requested else ()
        return cls(
            enabled=True,
            data_requested=data_requested,
            hf_requested=hf_requested,
            data_pvc_name=name_with_suffix(obj.name, "data"),
            hf_pvc_name=name_with_suffix(obj.name, "hf"),
            download_name=name_with_suffix(obj.name, "download"),
            data_mount_path=data.get("mountPath") or settings.default_data_mount_path,
            hf_mount_path=hf.get("mountPath") or settings.default_hf_mount_path,
            data_size=str(data.get("storageSize") or ""),
            hf_size=str(hf.get("storageSize") or ""),
            access_mode=storage.get("accessMode") or "ReadWriteMany",
            storage_class=storage.get("storageClassName") or settings.default_storage_class or "",
            object_downloads=objects or None,
            hf_repos=repos,
        )


def build_pvc(obj: KaiwoObject, plan: StoragePlan, name: str, size: str) -> dict[str, Any]:
    """PVCs carry only the controller owner reference (no labels)."""
    spec: dict[str, Any] = {
        "accessModes": [plan.access_mode],
        "resources": {"requests": {"storage": size}},
    }
    if plan.storage_class:
        spec["storageClassName"] = plan.storage_class
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": obj.child_metadata(name=name), "spec": spec}


def build_pvcs(obj: KaiwoObject, plan: StoragePlan) -> list[dict[str, Any]]:
    out = []
    if plan.data_requested:
        out.append(build_pvc(obj, plan, plan.data_pvc_name, plan.data_size))
    if plan.hf_requested:
        out.append(build_pvc(obj, plan, plan.hf_pvc_name, plan.hf_size))
    return out


def _check_download_secrets(config: DownloadConfig) -> None:
    """The download ConfigMap is readable by anyone who can read ConfigMaps:
    refuse credentials written into URLs (use a Secret reference instead), and
    ``file`` references outside the mounted secrets directory (the download
    program would send e.g. the pod's token to a user-chosen server)."""
    base = "spec.storage.data.download"
    for kind, items, attr in (("git", config.git, "repository"), ("s3", config.s3, "endpoint_url")):
        for i, item in enumerate(items or []):
            url = getattr(item, attr) or ""
            try:
                userinfo = "@" in (urlsplit(url.strip()).netloc or "")
            except ValueError:
                userinfo = False
            if userinfo:
                field = "repository" if kind == "git" else "endpointUrl"
                raise FieldError(
                    f"{base}.{kind}[{i}].{field}",
                    "must not contain credentials (user:password@); reference a Secret "
                    + ("with username/token" if kind == "git" else "with accessKeyId/secretKey"),
                )
    for label, ref in config.value_references():
        path = posixpath.normpath(ref.file or "/")
        if ref.file and not path.startswith(SECRETS_ROOT + "/"):
            raise FieldError(f"{base}.{label}.file", f"must be below {SECRETS_ROOT} (where the Secrets are mounted)")


def download_config(plan: StoragePlan) -> DownloadConfig:
    """The download program's config (format owned by ``kaiwo_ctrl.download.config``)."""
    config = _build_download_config(plan)
    _check_download_secrets(config)
    return config


def _build_download_config(plan: StoragePlan) -> DownloadConfig:
    return DownloadConfig.build(
        download_root=plan.data_mount_path if plan.data_requested else "",
        hf_home=plan.hf_mount_path if plan.hf_requested else "",
        data_download=ObjectStorageDownloadSpec.model_validate(plan.object_downloads or {}),
        hf_repos=[HuggingFaceDownloadItem.model_validate(r) for r in plan.hf_repos],
    )


def build_download_configmap(obj: KaiwoObject, plan: StoragePlan) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": obj.child_metadata(name=plan.download_name),
        "data": {CONFIG_KEY: download_config(plan).to_config_yaml()},
    }


def build_download_job(obj: KaiwoObject, plan: StoragePlan, world: World) -> dict[str, Any]:
    """The download Job, running the operator's own ``kaiwo-ctrl download`` program."""
    config = download_config(plan)
    command = ["kaiwo-ctrl", "download", "--config", f"{CONFIG_MOUNT_DIR}/{CONFIG_KEY}"]
    volumes: list[dict[str, Any]] = [
        {"name": "config", "configMap": {"name": plan.download_name}},
        {"name": "tmp", "emptyDir": {}},
    ]
    mounts: list[dict[str, Any]] = [{"name": "config", "mountPath": CONFIG_MOUNT_DIR}]
    env: list[dict[str, Any]] = []
    if plan.has_object_downloads:
        command += ["--data-dir", plan.data_mount_path]
        volumes.append({"name": "data", "persistentVolumeClaim": {"claimName": plan.data_pvc_name}})
        mounts.append({"name": "data", "mountPath": plan.data_mount_path})
    if plan.has_hf_downloads:
        command += ["--hf-dir", plan.hf_mount_path]
        volumes.append({"name": "hf", "persistentVolumeClaim": {"claimName": plan.hf_pvc_name}})
        mounts.append({"name": "hf", "mountPath": plan.hf_mount_path})
        env.append({"name": "HF_HOME", "value": plan.hf_mount_path})
    _add_secret_volumes(config.secret_refs(), volumes, mounts)
    # HF_TOKEN from the namespace's AIMNamespaceConfig unless spec.env sets one.
    env += download_env(world.aim_config(obj.namespace), hf=plan.has_hf_downloads, own_env=env_names(obj.spec.get("env")))
    env += [dict(e) for e in obj.spec.get("env") or []]
    container: dict[str, Any] = {
        "name": DOWNLOADER_CONTAINER,
        "image": world.downloader_image,
        "imagePullPolicy": "Always",
        "command": command,
        "resources": {k: dict(v) for k, v in DOWNLOADER_RESOURCES.items()},
        "securityContext": copy.deepcopy(DOWNLOADER_CONTAINER_SECURITY),
        "volumeMounts": mounts + [{"name": "tmp", "mountPath": "/tmp"}],
    }
    if env:
        container["env"] = env
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": obj.child_metadata({LABEL_TYPE: TYPE_DOWNLOADER}, name=plan.download_name),
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": world.download_deadline_seconds,
            "template": {
                "metadata": {"labels": {LABEL_TYPE: TYPE_DOWNLOADER}},
                "spec": {
                    "restartPolicy": "Never",
                    "automountServiceAccountToken": False,
                    "securityContext": copy.deepcopy(DOWNLOADER_POD_SECURITY),
                    "containers": [container],
                    "volumes": volumes,
                },
            },
        },
    }


def _add_secret_volumes(refs: Iterable[tuple[str, str]], volumes: list[dict], mounts: list[dict]) -> None:
    """One volume per Secret, restricted to the referenced keys (de-duplicated),
    mounted at ``SECRETS_ROOT/<secret name>``."""
    by_secret: dict[str, list[str]] = {}
    for secret_name, secret_key in refs:
        keys = by_secret.setdefault(secret_name, [])
        if secret_key not in keys:
            keys.append(secret_key)
    for secret_name, keys in by_secret.items():
        volume = volume_name("secret", secret_name)
        volumes.append(
            {"name": volume, "secret": {"secretName": secret_name, "items": [{"key": k, "path": k} for k in keys]}}
        )
        mounts.append({"name": volume, "mountPath": f"{SECRETS_ROOT}/{secret_name}"})


def storage_children(obj: KaiwoObject, plan: StoragePlan, world: World) -> list[dict[str, Any]]:
    """Data PVC, HF PVC, download ConfigMap, download Job (in that order)."""
    out = build_pvcs(obj, plan)
    if plan.downloads_configured:
        out.append(build_download_configmap(obj, plan))
        out.append(build_download_job(obj, plan, world))
    return out
