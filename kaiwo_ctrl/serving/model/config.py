"""The model system config (``kaiwo-ctrl run --model-config FILE``).

The file uses KubeAI's keys, so a KubeAI system config works unchanged:
``resourceProfiles``, ``cacheProfiles``, ``modelServers.<Engine>.images``,
``modelLoading.image``, ``modelServerPods``, ``modelRollouts.surge``,
``modelAutoscaling``, ``secretNames`` and ``proxy.mode`` (KubeAI 0.23: ``internal``,
the default, or ``external``: no proxy and no autoscaler in this process and a
headless Service per Model; read at start-up only, see :mod:`.external`). KubeAI
keys this operator does not
use (``metricsAddr``, ``leaderElection``, ``messaging`` ...) are accepted and
ignored.

Without a file the built-in defaults apply (the profiles and images of
KubeAI's published chart). A file is merged over them: a profile or an
engine image named in the file replaces the built-in one of that name, other
keys replace the default value of that key.

An invalid file raises :class:`ConfigError` naming the key. Unlike KubeAI,
:class:`ConfigSource` re-reads the file when it changes (a mounted ConfigMap
is swapped in place), so edits apply without a restart; an invalid edit is
reported and the last good config stays in force.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from api.meta import parse_duration
from kaiwo_ctrl.settings.environment import DEFAULT_IMAGE, operator_image

log = logging.getLogger("kaiwo_ctrl.serving.model.config")

ENGINES = ("OLlama", "VLLM", "FasterWhisper", "Infinity")
DEFAULT_LOADER_IMAGE = DEFAULT_IMAGE

_GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"}


def _nvidia(requests: Mapping[str, str] | None = None, image: str = "nvidia-gpu") -> dict:
    prof: dict[str, Any] = {"imageName": image, "limits": {"nvidia.com/gpu": "1"}, "tolerations": [dict(_GPU_TOLERATION)]}
    if requests:
        prof["requests"] = dict(requests)
    return prof


# Facts from KubeAI's chart values (charts/kubeai/values.yaml): profile shapes and images.
DEFAULTS: dict[str, Any] = {
    "secretNames": {
        "huggingface": "kubeai-huggingface",
        "aws": "kubeai-aws",
        "gcp": "kubeai-gcp",
        "alibaba": "kubeai-alibaba",
    },
    "modelServers": {
        "VLLM": {
            "images": {
                "default": "vllm/vllm-openai:v0.10.2",
                "nvidia-gpu": "vllm/vllm-openai:v0.10.2",
                "cpu": "public.ecr.aws/q9t5s3a7/vllm-cpu-release-repo:v0.10.2",
                "google-tpu": "vllm/vllm-tpu:23194d83e8f2a6783b0d8c275f5f8a22faab9aec",
                "gh200": "vllm/vllm-openai:v0.10.2",
                "amd-gpu": "rocm/vllm/rocm6.4.1_vllm_0.10.1_20250909",
            }
        },
        "OLlama": {
            "images": {
                "default": "ollama/ollama:0.11.11",
                "nvidia-gpu": "ollama/ollama:0.11.11",
                "amd-gpu": "ollama/ollama:0.11.11-rocm",
            }
        },
        "FasterWhisper": {
            "images": {
                "default": "fedirz/faster-whisper-server:latest-cpu",
                "nvidia-gpu": "fedirz/faster-whisper-server:latest-cuda",
            }
        },
        "Infinity": {
            "images": {
                "default": "michaelf34/infinity:0.0.77",
                "cpu": "michaelf34/infinity:0.0.77-cpu",
                "amd-gpu": "michaelf34/infinity:0.0.77-rocm",
                "nvidia-gpu": "michaelf34/infinity:0.0.77",
            }
        },
    },
    "modelLoading": {"image": None},  # our own image: kaiwo-ctrl download
    "modelServerPods": {
        "securityContext": {
            "readOnlyRootFilesystem": False,
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
        },
    },
    "modelRollouts": {"surge": 1},
    "modelAutoscaling": {"interval": "10s", "timeWindow": "10m", "stateConfigMapName": "kaiwo-autoscaler-state"},
    "resourceProfiles": {
        "cpu": {"imageName": "cpu", "requests": {"cpu": "1", "memory": "2Gi"}},
        "nvidia-gpu-t4": {"imageName": "nvidia-gpu", "limits": {"nvidia.com/gpu": "1"}, "requests": {"nvidia.com/gpu": "1"}},
        "nvidia-gpu-l4": _nvidia({"nvidia.com/gpu": "1", "cpu": "6", "memory": "24Gi"}),
        "nvidia-gpu-l40s": _nvidia({"nvidia.com/gpu": "1", "cpu": "6", "memory": "24Gi"}),
        "nvidia-gpu-h100": _nvidia(),
        "nvidia-gpu-gh200": _nvidia({"nvidia.com/gpu": "1"}, image="gh200"),
        "nvidia-gpu-a100-80gb": _nvidia(),
        "nvidia-gpu-a100-40gb": _nvidia(),
        "nvidia-gpu-a16": _nvidia(),
        "nvidia-gpu-rtx4070-8gb": _nvidia(),
        "amd-gpu-mi300x": {
            "imageName": "amd-gpu",
            "limits": {"amd.com/gpu": "1"},
            "tolerations": [{"key": "amd.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"}],
        },
    },
    "cacheProfiles": {},
}

_PROFILE_KEYS = ("imageName", "requests", "limits", "nodeSelector", "affinity", "tolerations", "schedulerName", "runtimeClassName")


class ConfigError(ValueError):
    """The system config is invalid at ``key``."""

    def __init__(self, key: str, detail: str) -> None:
        self.key = key
        super().__init__(f"model config: {key}: {detail}")


@dataclass(frozen=True)
class SystemConfig:
    """The parsed, validated config. ``raw`` keeps the merged mapping."""

    resource_profiles: dict[str, dict[str, Any]]
    cache_profiles: dict[str, dict[str, Any]]
    images: dict[str, dict[str, str]]
    loader_image: str
    server_pods: dict[str, Any]
    surge: int
    autoscaling_interval: float
    autoscaling_time_window: float
    autoscaling_state_configmap: str
    secret_names: dict[str, str]
    proxy_mode: str = "internal"
    raw: dict[str, Any] = field(repr=False, default_factory=dict)
    digest: str = ""


def _merge(defaults: dict[str, Any], data: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(defaults)
    for key, value in data.items():
        if key in ("resourceProfiles", "cacheProfiles") and isinstance(value, Mapping):
            out[key] = {**out.get(key, {}), **copy.deepcopy(dict(value))}
        elif key == "modelServers" and isinstance(value, Mapping):
            for engine, spec in value.items():
                images = (spec or {}).get("images") if isinstance(spec, Mapping) else None
                base = out[key].setdefault(engine, {"images": {}})
                if isinstance(images, Mapping):
                    base["images"] = {**base.get("images", {}), **dict(images)}
                else:
                    base["images"] = images  # validated below
        elif key in ("secretNames", "modelLoading", "modelServerPods", "modelRollouts", "modelAutoscaling", "proxy") and isinstance(
            value, Mapping
        ):
            out[key] = {**out.get(key, {}), **copy.deepcopy(dict(value))}
        else:
            out[key] = copy.deepcopy(value)
    return out


def _mapping(value: Any, key: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(key, f"must be a mapping, got {type(value).__name__}")
    return dict(value)


def _string(value: Any, key: str, *, required: bool = False) -> str | None:
    if value is None or value == "":
        if required:
            raise ConfigError(key, "is required")
        return None
    if not isinstance(value, str):
        raise ConfigError(key, f"must be a string, got {type(value).__name__}")
    return value


def _seconds(value: Any, key: str) -> float:
    if not isinstance(value, str):
        raise ConfigError(key, f"must be a Go duration string such as 10s, got {value!r}")
    try:
        seconds = parse_duration(value).total_seconds()
    except ValueError:
        raise ConfigError(key, f"must be a Go duration string such as 10s or 1m30s, got {value!r}") from None
    if seconds <= 0:
        raise ConfigError(key, "must be greater than 0")
    return seconds


def _profiles(raw: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for name, prof in _mapping(raw.get("resourceProfiles"), "resourceProfiles").items():
        key = f"resourceProfiles.{name}"
        prof = _mapping(prof, key)
        for k in prof:
            if k not in _PROFILE_KEYS:
                raise ConfigError(f"{key}.{k}", f"unknown field (known: {', '.join(_PROFILE_KEYS)})")
        _string(prof.get("imageName"), f"{key}.imageName")
        for part in ("requests", "limits", "nodeSelector"):
            for rk, rv in _mapping(prof.get(part), f"{key}.{part}").items():
                if not isinstance(rv, (str, int, float)) or isinstance(rv, bool):
                    raise ConfigError(f"{key}.{part}.{rk}", f"must be a quantity or string, got {rv!r}")
        if part_list := prof.get("tolerations"):
            if not isinstance(part_list, list):
                raise ConfigError(f"{key}.tolerations", "must be a list")
        _mapping(prof.get("affinity"), f"{key}.affinity")
        out[str(name)] = prof
    return out


def _cache_profiles(raw: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for name, prof in _mapping(raw.get("cacheProfiles"), "cacheProfiles").items():
        key = f"cacheProfiles.{name}"
        shared = _mapping(_mapping(prof, key).get("sharedFilesystem"), f"{key}.sharedFilesystem")
        if not shared:
            raise ConfigError(f"{key}.sharedFilesystem", "is required (the only supported cache kind)")
        sc = _string(shared.get("storageClassName"), f"{key}.sharedFilesystem.storageClassName")
        pv = _string(shared.get("persistentVolumeName"), f"{key}.sharedFilesystem.persistentVolumeName")
        if not sc and not pv:
            raise ConfigError(f"{key}.sharedFilesystem", "needs storageClassName or persistentVolumeName")
        out[str(name)] = {"storageClassName": sc, "persistentVolumeName": pv}
    return out


def _images(raw: Mapping[str, Any]) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for engine, spec in _mapping(raw.get("modelServers"), "modelServers").items():
        if engine not in ENGINES:
            raise ConfigError(f"modelServers.{engine}", f"unknown engine (known: {', '.join(ENGINES)})")
        images = _mapping(_mapping(spec, f"modelServers.{engine}").get("images"), f"modelServers.{engine}.images")
        for k, v in images.items():
            _string(v, f"modelServers.{engine}.images.{k}", required=True)
        out[engine] = {str(k): v for k, v in images.items()}
    return out


def _server_pods(raw: Mapping[str, Any]) -> dict[str, Any]:
    pods = _mapping(raw.get("modelServerPods"), "modelServerPods")
    _string(pods.get("serviceAccountName"), "modelServerPods.serviceAccountName")
    _mapping(pods.get("podSecurityContext"), "modelServerPods.podSecurityContext")
    _mapping(pods.get("securityContext"), "modelServerPods.securityContext")
    for k in ("imagePullSecrets", "jsonPatches"):
        if pods.get(k) is not None and not isinstance(pods[k], list):
            raise ConfigError(f"modelServerPods.{k}", "must be a list")
    for i, p in enumerate(pods.get("jsonPatches") or []):
        if not isinstance(p, Mapping) or p.get("op") not in ("add", "remove", "replace", "move", "copy", "test"):
            raise ConfigError(f"modelServerPods.jsonPatches[{i}].op", "must be add, remove, replace, move, copy or test")
        if not isinstance(p.get("path"), str):
            raise ConfigError(f"modelServerPods.jsonPatches[{i}].path", "is required")
    return pods


PROXY_MODES = ("internal", "external")


def _proxy_mode(raw: Mapping[str, Any]) -> str:
    mode = _string(_mapping(raw.get("proxy"), "proxy").get("mode"), "proxy.mode") or "internal"
    if mode not in PROXY_MODES:
        raise ConfigError("proxy.mode", f"must be internal or external, got {mode!r}")
    return mode


def parse_config(data: Mapping[str, Any] | None) -> SystemConfig:
    """Validate ``data`` (a file's YAML) merged over the built-in defaults."""
    if data is not None and not isinstance(data, Mapping):
        raise ConfigError("(root)", "must be a mapping of keys")
    raw = _merge(DEFAULTS, data or {})
    surge = _mapping(raw.get("modelRollouts"), "modelRollouts").get("surge", 0)
    if not isinstance(surge, int) or isinstance(surge, bool) or surge < 0:
        raise ConfigError("modelRollouts.surge", f"must be an integer >= 0, got {surge!r}")
    auto = _mapping(raw.get("modelAutoscaling"), "modelAutoscaling")
    secrets = _mapping(raw.get("secretNames"), "secretNames")
    for k, v in secrets.items():
        _string(v, f"secretNames.{k}")
    loading = _mapping(raw.get("modelLoading"), "modelLoading")
    loader = _string(loading.get("image"), "modelLoading.image") or operator_image()
    return SystemConfig(
        resource_profiles=_profiles(raw),
        cache_profiles=_cache_profiles(raw),
        images=_images(raw),
        loader_image=loader,
        server_pods=_server_pods(raw),
        surge=surge,
        autoscaling_interval=_seconds(auto.get("interval", "10s"), "modelAutoscaling.interval"),
        autoscaling_time_window=_seconds(auto.get("timeWindow", "10m"), "modelAutoscaling.timeWindow"),
        autoscaling_state_configmap=_string(auto.get("stateConfigMapName"), "modelAutoscaling.stateConfigMapName") or "",
        secret_names={k: v for k, v in secrets.items() if v},
        proxy_mode=_proxy_mode(raw),
        raw=raw,
        digest=hashlib.sha256(repr(sorted(raw.items(), key=lambda kv: kv[0])).encode()).hexdigest()[:16],
    )


def load_config(path: str | Path | None) -> SystemConfig:
    """Read and validate a config file; ``None`` gives the built-in defaults."""
    if path is None:
        return parse_config(None)
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise ConfigError("(file)", f"cannot read {path}: {e.strerror or e}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError("(file)", f"{path} is not valid YAML: {str(e).splitlines()[0]}") from None
    return parse_config(data)


class ConfigSource:
    """The current config, re-read when its file changes.

    ``watch()`` polls the file every ``interval`` seconds (a ConfigMap volume
    swaps a symlink, which inotify on the file itself would miss) and calls
    each listener after a valid change. An invalid edit is logged with the
    key it names and ignored; ``error`` holds it until the file is fixed.
    """

    def __init__(self, path: str | Path | None, interval: float = 2.0) -> None:
        self.path = Path(path) if path else None
        self.interval = interval
        self.current = load_config(self.path)  # an invalid file stops start-up
        self._seen = self._read_bytes()
        self.error: str | None = None
        self.listeners: list[Callable[[SystemConfig], None]] = []

    @classmethod
    def fixed(cls, config: SystemConfig) -> "ConfigSource":
        src = cls(None)
        src.current = config
        return src

    def _read_bytes(self) -> bytes | None:
        if self.path is None:
            return None
        try:
            return self.path.read_bytes()
        except OSError:
            return None

    def check(self) -> bool:
        """Re-read the file now; True if a new valid config took effect."""
        data = self._read_bytes()
        if self.path is None or data is None or data == self._seen:
            return False
        self._seen = data
        try:
            new = load_config(self.path)
        except ConfigError as e:
            self.error = str(e)
            log.error("model config change rejected; keeping the previous config", extra={"error": str(e)})
            return False
        self.error = None
        if new.digest == self.current.digest:
            return False
        self.current = new
        log.info("model config reloaded", extra={"path": str(self.path)})
        for fn in self.listeners:
            fn(new)
        return True

    async def watch(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            self.check()
