"""``spec.files``: one ConfigMap ``model-<name>-files`` mounted with subPaths.

The data key of a file is its path with every ``/`` replaced by ``_``. Each
file is mounted read-only at its path from volume ``model-files``. Because
the mounts use subPath, content edits do not reach running Pods and do not
roll them (content is not in the Pod spec); adding, removing or renaming
files does.

KubeAI creates an empty ConfigMap when ``files`` is empty and deletes it on
the next pass, forever [quirk]; here no ConfigMap exists without files.
"""

from __future__ import annotations

from typing import Any

from kaiwo_ctrl.runtime.api.client import ApiError, Client
from kaiwo_ctrl.runtime.api.resources import CONFIGMAPS
from kaiwo_ctrl.runtime.cache.informer import Informer
from kaiwo_ctrl.runtime.objects.ownership import set_controller_reference

VOLUME = "model-files"


def configmap_name(model_name: str) -> str:
    return f"model-{model_name}-files"


def file_key(path: str) -> str:
    return path.replace("/", "_")


def files_data(files: list[dict[str, Any]]) -> dict[str, str]:
    return {file_key(f["path"]): f.get("content", "") for f in files}


def files_volume(model_name: str, files: list[dict[str, Any]]) -> tuple[list[dict], list[dict]]:
    """(volumes, mounts) for the server container; empty without files."""
    if not files:
        return [], []
    volume = {"name": VOLUME, "configMap": {"name": configmap_name(model_name)}}
    mounts = [{"name": VOLUME, "mountPath": f["path"], "subPath": file_key(f["path"]), "readOnly": True} for f in files]
    return [volume], mounts


def desired_configmap(model: dict[str, Any]) -> dict[str, Any] | None:
    meta = model["metadata"]
    files = (model.get("spec") or {}).get("files") or []
    if not files:
        return None
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": configmap_name(meta["name"]),
            "namespace": meta.get("namespace"),
            "labels": {"app": "model", "model": meta["name"]},
        },
        "data": files_data(files),
    }


async def sync_files(client: Client, configmaps: Informer, model: dict[str, Any]) -> None:
    """The Model's files ConfigMap as :func:`desired_configmap` says (made, updated, or deleted when the
    Model has no files); one found without our owner (KubeAI's, before a migration) is taken over."""
    meta = model["metadata"]
    ns, name = meta.get("namespace"), configmap_name(meta["name"])
    want = desired_configmap(model)
    have = configmaps.get(name, ns)
    if want is None:
        if have is not None:
            await client.delete(CONFIGMAPS, name, ns, uid=have["metadata"].get("uid"))
        return
    set_controller_reference(want, model, owner_namespaced=True)
    if have is None:
        try:
            await client.create(CONFIGMAPS, want)
            return
        except ApiError as e:
            if not e.already_exists:
                raise
            have = await client.get(CONFIGMAPS, name, ns)  # e.g. made by KubeAI before migration
    if (have.get("data") or {}) != want["data"] or (have["metadata"].get("labels") or {}) != want["metadata"]["labels"]:
        body = {**have, "data": want["data"]}
        body["metadata"] = {**have["metadata"], "labels": want["metadata"]["labels"],
                            "ownerReferences": want["metadata"]["ownerReferences"]}
        await client.replace(CONFIGMAPS, body)
