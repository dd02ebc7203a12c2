"""The desired server Pod of a Model (pure; no API access).

KubeAI-compatible shape: ``generateName: model-<name>-<hash>-``, labels
``app: model``, ``model: <name>``, ``app.kubernetes.io/{name,instance,managed-by}``
and ``pod-hash``, annotation ``model-pod-port: "8000"``, container ``server``
with port 8000 named ``http``. ``modelServerPods.jsonPatches`` are applied to
the whole Pod before the spec is hashed, so a patch that changes the spec
rolls the Pods.

Order matters where Kubernetes lets later duplicates win: server env is
engine vars, then ``spec.env`` sorted by key, then the credentials of the
URL scheme; volumes are dshm, files, adapters, cache, the URL scheme's
volume, then the credentials volume. Credentials follow one precedence rule
(:mod:`kaiwo_ctrl.aim.credentials`): a credential the Model's ``spec.env``
sets itself wins (KubeAI appends its Secret reference after it, which
silently overrides the user's value [quirk]), then the namespace's
AIMNamespaceConfig, then the system config's ``secretNames``.
"""

from __future__ import annotations

import copy
import hashlib
from dataclasses import dataclass
from typing import Any

import orjson

from kaiwo_ctrl.aim.credentials import Additions, for_model, pull_secrets
from kaiwo_ctrl.runtime.objects.fielderrors import FieldError

from kaiwo_ctrl.serving.model.admission import OPERATOR_GATE
from kaiwo_ctrl.serving.model.config import SystemConfig
from kaiwo_ctrl.serving.model.engines import ENGINES, MODEL_DIR, PORT, EngineInput
from kaiwo_ctrl.serving.model.files import files_volume
from kaiwo_ctrl.serving.model.jsonpatch import PatchError, apply_patch
from kaiwo_ctrl.serving.podcontract import ANNOTATION_PORT, APP_MODEL, LABEL_APP, LABEL_MODEL, LABEL_POD_HASH
from kaiwo_ctrl.serving.model.profiles import check_cache_profile, resolve_image, resolve_profile
from kaiwo_ctrl.serving.model.urls import ModelURL, parse_url

ADAPTER_DIR = "/adapters"
ADAPTER_LOADER_PORT = 8001
#: Schemes the adapter sidecar may download from (adapters change without a Pod restart).
ADAPTER_SCHEMES = ("hf", "gs", "oss", "s3")


@dataclass(frozen=True)
class DesiredPod:
    pod: dict[str, Any]
    hash: str


def cache_dir(name: str, uid: str) -> str:
    return f"/models/{name}-{uid}"


def model_credentials(model: dict[str, Any], config: SystemConfig, ns_config: Any = None, url: str | None = None) -> Additions:
    """Credentials for the Model's URL (or an adapter ``url``): the Model's own
    env wins, then the namespace's AIMNamespaceConfig, then ``secretNames``
    (the one precedence rule lives in :mod:`kaiwo_ctrl.aim.credentials`)."""
    return for_model(ns_config, model, url=url, system_secret_names=config.secret_names)


def user_env(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"name": k, "value": str(v)} for k, v in sorted((spec.get("env") or {}).items())]


def spec_hash(pod_spec: dict[str, Any]) -> str:
    return hashlib.sha256(orjson.dumps(pod_spec, option=orjson.OPT_SORT_KEYS)).hexdigest()[:10]


def pod_labels(name: str, engine: str) -> dict[str, str]:
    lower = engine.lower()
    return {
        LABEL_APP: APP_MODEL,
        LABEL_MODEL: name,
        "app.kubernetes.io/name": lower,
        "app.kubernetes.io/instance": f"{lower}-{name}",
        "app.kubernetes.io/managed-by": "kubeai",
    }


def _adapter_sidecar(model: dict[str, Any], config: SystemConfig, ns_config: Any, pod_spec: dict[str, Any]) -> dict[str, Any]:
    """The ``loader`` sidecar: kaiwo-ctrl serving adapter files over HTTP on
    port 8001 (the controller asks it to download, then tells vLLM to load).
    It gets the credentials of every adapter scheme; a credentials volume is
    shared with the server instead of being declared twice, which makes
    KubeAI's gs:// + adapters Pods invalid [quirk]."""
    spec = model.get("spec") or {}
    sidecar: dict[str, Any] = {
        "name": "loader",
        "image": config.loader_image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["kaiwo-ctrl", "adapter-loader", f"--dir={ADAPTER_DIR}", f"--port={ADAPTER_LOADER_PORT}"],
        "ports": [{"containerPort": ADAPTER_LOADER_PORT, "name": "loader", "protocol": "TCP"}],
        "readinessProbe": {"httpGet": {"path": "/healthz", "port": "loader"}, "periodSeconds": 5},
        "env": user_env(spec),
        "envFrom": copy.deepcopy(spec.get("envFrom") or []),
        "volumeMounts": [{"name": "adapters", "mountPath": ADAPTER_DIR}],
    }
    for scheme in ADAPTER_SCHEMES:
        model_credentials(model, config, ns_config, url=f"{scheme}://").apply(sidecar, pod_spec)
    return sidecar


def _url_volume(url: ModelURL, mounts: list[dict], volumes: list[dict]) -> None:
    if url.scheme == "pvc":
        volumes.append({"name": "model", "persistentVolumeClaim": {"claimName": url.name}})
        mount = {"name": "model", "mountPath": MODEL_DIR}
        sub = url.path.lstrip("/")
        if sub:
            mount["subPath"] = sub
        mounts.append(mount)


def _storage(
    model: dict[str, Any], url: ModelURL, cdir: str | None, config: SystemConfig, ns_config: Any
) -> tuple[list[dict], list[dict], list[dict]]:
    """(volumes, server mounts, sidecars) in the documented order."""
    name, spec = model["metadata"]["name"], model.get("spec") or {}
    volumes: list[dict[str, Any]] = [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]
    mounts: list[dict[str, Any]] = [{"name": "dshm", "mountPath": "/dev/shm"}]
    fv, fm = files_volume(name, spec.get("files") or [])
    volumes += fv
    mounts += fm
    sidecars: list[dict[str, Any]] = []
    if spec.get("adapters") is not None and spec.get("engine") == "VLLM":
        volumes.append({"name": "adapters", "emptyDir": {}})
        mounts.append({"name": "adapters", "mountPath": ADAPTER_DIR, "readOnly": True})
        # the sidecar's credential volumes are appended to ``volumes`` here, in order
        sidecars.append(_adapter_sidecar(model, config, ns_config, {"volumes": volumes}))
    if cdir:
        claim = f"shared-model-cache-{spec['cacheProfile']}"
        volumes.append({"name": "models", "persistentVolumeClaim": {"claimName": claim}})
        mounts.append({"name": "models", "mountPath": cdir, "subPath": cdir.lstrip("/"), "readOnly": True})
    _url_volume(url, mounts, volumes)
    return volumes, mounts, sidecars


def _pod_settings(
    pod_spec: dict[str, Any], spec: dict[str, Any], pod_fields: dict[str, Any], pods_cfg: dict[str, Any], ns_config: Any
) -> None:
    pod_spec.update(copy.deepcopy(pod_fields))
    if spec.get("priorityClassName"):
        pod_spec["priorityClassName"] = spec["priorityClassName"]
    if pods_cfg.get("serviceAccountName"):
        pod_spec["serviceAccountName"] = pods_cfg["serviceAccountName"]
    if pods_cfg.get("podSecurityContext"):
        pod_spec["securityContext"] = copy.deepcopy(pods_cfg["podSecurityContext"])
    # the system config's pull secrets, then the namespace config's, de-duplicated
    secrets = pull_secrets(ns_config, pods_cfg.get("imagePullSecrets"))
    if secrets:
        pod_spec["imagePullSecrets"] = secrets


def _finish(pod: dict[str, Any], name: str, ns: str, pods_cfg: dict[str, Any], kueue: dict[str, str] | None) -> DesiredPod:
    """Apply the JSON patches, then hash the spec and name the Pod after it.
    Kueue's labels are part of the hash when set (Kueue refuses to change a Pod's
    queue, so a Model moved to another queue rolls its Pods); a Model outside
    Kueue keeps the hash of the spec alone."""
    if pods_cfg.get("jsonPatches"):
        try:
            pod = apply_patch(pod, pods_cfg["jsonPatches"])
        except PatchError as e:
            raise FieldError("modelServerPods.jsonPatches", str(e)) from None
        if not isinstance(pod, dict) or not isinstance(pod.get("spec"), dict):
            raise FieldError("modelServerPods.jsonPatches", "the patched Pod has no spec")
    md = pod.setdefault("metadata", {})
    if kueue:
        md.setdefault("labels", {}).update(kueue)
    h = spec_hash({"spec": pod["spec"], "kueue": kueue} if kueue else pod["spec"])
    md["namespace"] = ns
    md["generateName"] = f"model-{name}-{h}-"
    md.setdefault("labels", {})[LABEL_POD_HASH] = h
    if kueue:  # the operator's own gate, after the hash (Pods made before it existed do not roll)
        gates = pod["spec"].setdefault("schedulingGates", [])
        if not any(g.get("name") == OPERATOR_GATE for g in gates):
            gates.append({"name": OPERATOR_GATE})
    return DesiredPod(pod, h)


def build_pod(model: dict[str, Any], config: SystemConfig, ns_config: Any = None, kueue: dict[str, str] | None = None) -> DesiredPod:
    """The server Pod for ``model`` (a Model dict as read from the API).
    ``kueue``: the Kueue labels of a Model under Kueue (:mod:`.admission`).
    ``ns_config``: the effective AIMNamespaceConfig of its namespace, if any;
    its credentials and pull secrets are part of the spec, so of the hash, and
    a change to them rolls the Pods."""
    meta, spec = model["metadata"], model.get("spec") or {}
    name, ns, uid = meta["name"], meta.get("namespace", "default"), meta.get("uid", "")
    engine = spec.get("engine", "")
    if engine not in ENGINES:
        raise FieldError("spec.engine", f"unknown engine {engine!r}", engine)
    url = parse_url(spec.get("url", ""))
    profile = resolve_profile(spec.get("resourceProfile"), config)
    image = resolve_image(engine, spec.get("image"), profile, config)
    cache_profile = spec.get("cacheProfile")
    check_cache_profile(cache_profile, config)
    cdir = cache_dir(name, uid) if cache_profile else None
    parts = ENGINES[engine](
        EngineInput(name, url, list(spec.get("args") or []), list(spec.get("features") or []), cdir, spec.get("adapters") is not None)
    )
    volumes, mounts, sidecars = _storage(model, url, cdir, config, ns_config)
    server: dict[str, Any] = {"name": "server", "image": image}
    if parts.command:
        server["command"] = parts.command
    server["args"] = parts.args
    server["env"] = parts.env + user_env(spec)
    if spec.get("envFrom"):
        server["envFrom"] = copy.deepcopy(spec["envFrom"])
    server["ports"] = [{"containerPort": PORT, "name": "http", "protocol": "TCP"}]
    resources = {k: v for k, v in (("requests", profile.requests), ("limits", profile.limits)) if v}
    if resources:
        server["resources"] = resources
    server.update(startupProbe=parts.startup, readinessProbe=parts.readiness, livenessProbe=parts.liveness, volumeMounts=mounts)
    pods_cfg = config.server_pods
    if parts.security_context and pods_cfg.get("securityContext"):
        server["securityContext"] = copy.deepcopy(pods_cfg["securityContext"])
    pod_spec: dict[str, Any] = {"containers": [server, *sidecars], "volumes": volumes}
    model_credentials(model, config, ns_config).apply(server, pod_spec)
    _pod_settings(pod_spec, spec, profile.pod_fields, pods_cfg, ns_config)
    annotations = {ANNOTATION_PORT: str(PORT)}
    if sidecars:
        annotations["adapter-loader-port"] = str(ADAPTER_LOADER_PORT)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"namespace": ns, "labels": pod_labels(name, engine), "annotations": annotations},
        "spec": pod_spec,
    }
    return _finish(pod, name, ns, pods_cfg, kueue)
