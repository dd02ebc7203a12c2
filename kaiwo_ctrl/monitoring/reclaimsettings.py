"""Idle-GPU reclaim settings: the operator's GPU_PREEMPTION_* environment, the
``kaiwo.silogen.ai/gpu-preemption.*`` annotations, and the precedence between them.

Each setting resolves, first set wins: workload annotation > namespace annotation >
``KaiwoConfig.spec.gpuPreemption`` > environment > built-in default. The two annotation
layers are merged into the GpuWorkload's spec when the record is made (as upstream does),
so at decision time the chain is spec > KaiwoConfig > environment > default.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from api.meta import parse_duration

from .envsettings import endpoint_and_interval
from .owners import ANNOTATION_PREFIX

PREFIX = ANNOTATION_PREFIX  # one home: owners.py
ANN_ENABLED = PREFIX + "enabled"
#: annotation suffix -> GpuWorkload spec field
ANNOTATION_FIELDS = {
    "threshold": "utilizationThreshold",
    "grace-period": "gracePeriod",
    "policy": "preemptionPolicy",
    "aggregation": "aggregationPolicy",
    "ttl": "ttlAfterFinished",
}
#: GpuWorkload spec field -> KaiwoConfig.spec.gpuPreemption field -> environment variable
LAYERS = {
    "utilizationThreshold": ("defaultThreshold", "GPU_PREEMPTION_DEFAULT_THRESHOLD"),
    "gracePeriod": ("defaultGracePeriod", "GPU_PREEMPTION_DEFAULT_GRACE_PERIOD"),
    "preemptionPolicy": ("defaultPolicy", "GPU_PREEMPTION_DEFAULT_POLICY"),
    "aggregationPolicy": ("defaultAggregation", "GPU_PREEMPTION_DEFAULT_AGGREGATION"),
    "ttlAfterFinished": ("defaultTTL", "GPU_PREEMPTION_DEFAULT_TTL"),
}
DEFAULTS = {
    "utilizationThreshold": "5",
    "gracePeriod": "10m",
    "preemptionPolicy": "OnPressure",
    "aggregationPolicy": "Max",
    "ttlAfterFinished": "24h",
}
POLICIES = ("OnPressure", "Always")
AGGREGATIONS = ("Min", "Max", "Avg")

ENV_ENABLED = "GPU_PREEMPTION_ENABLED"
ENV_ENDPOINT = "GPU_PREEMPTION_METRICS_ENDPOINT"
ENV_INTERVAL = "GPU_PREEMPTION_POLLING_INTERVAL"
DEFAULT_INTERVAL = "15s"


class ReclaimConfigError(ValueError):
    """The GPU_PREEMPTION_* environment is unusable (start-up fails)."""


@dataclass(frozen=True)
class Settings:
    threshold: float
    grace_period: timedelta
    policy: str
    aggregation: str
    ttl: timedelta  # 0: keep forever


def parse_value(spec_field: str, raw: Any) -> Any:
    """One setting's value from text (annotation, environment) or JSON; ValueError when invalid."""
    if spec_field == "utilizationThreshold":
        value = float(raw)
        if not 0 <= value <= 100:
            raise ValueError(f"{raw!r} is not a percentage between 0 and 100")
        return value
    if spec_field in ("gracePeriod", "ttlAfterFinished"):
        return parse_duration(str(raw))
    allowed = POLICIES if spec_field == "preemptionPolicy" else AGGREGATIONS
    if raw not in allowed:
        raise ValueError(f"{raw!r} is not one of {', '.join(allowed)}")
    return raw


def spec_from_annotations(annotations: Mapping[str, str]) -> tuple[dict[str, Any], list[str]]:
    """GpuWorkload spec overrides from merged annotations, and one message per invalid one
    (upstream drops an invalid value silently; we drop it too but say so in an event)."""
    spec: dict[str, Any] = {}
    errors: list[str] = []
    for suffix, spec_field in ANNOTATION_FIELDS.items():
        raw = annotations.get(PREFIX + suffix)
        if raw is None:
            continue
        try:
            parse_value(spec_field, raw)
        except (TypeError, ValueError) as e:
            errors.append(f"annotation {PREFIX}{suffix}: {e}"[:300])
            continue
        spec[spec_field] = float(raw) if spec_field == "utilizationThreshold" else raw
    return spec, errors


def opted_in(annotations: Mapping[str, str]) -> bool:
    """Any gpu-preemption annotation opts in (``enabled: "false"`` on the workload opts out)."""
    if annotations.get(ANN_ENABLED, "").strip().lower() == "false":
        return False
    return any(k.startswith(PREFIX) for k in annotations)


def resolve(spec: Mapping[str, Any] | None, config: Mapping[str, Any] | None, env: Mapping[str, str]) -> Settings:
    """The effective settings of one GpuWorkload: its spec, then KaiwoConfig.spec.gpuPreemption,
    then the environment, then the built-in default; an invalid layer is skipped."""
    values: dict[str, Any] = {}
    for spec_field, (config_field, env_name) in LAYERS.items():
        for raw in ((spec or {}).get(spec_field), (config or {}).get(config_field), env.get(env_name) or None, DEFAULTS[spec_field]):
            if raw is None:
                continue
            try:
                values[spec_field] = parse_value(spec_field, raw)
                break
            except (TypeError, ValueError):
                continue
    return Settings(
        threshold=values["utilizationThreshold"],
        grace_period=values["gracePeriod"],
        policy=values["preemptionPolicy"],
        aggregation=values["aggregationPolicy"],
        ttl=values["ttlAfterFinished"],
    )


@dataclass(frozen=True)
class ReclaimEnv:
    endpoint: str
    interval: float  # seconds
    env: Mapping[str, str]


def read_env(environ: Mapping[str, str] | None = None) -> ReclaimEnv | None:
    """None unless GPU_PREEMPTION_ENABLED=true. Then the endpoint must be an http(s) URL,
    the interval a positive duration, and every GPU_PREEMPTION_DEFAULT_* that is set valid:
    a typo fails start-up instead of silently falling back (as upstream does)."""
    env = dict(os.environ if environ is None else environ)
    if env.get(ENV_ENABLED, "").strip().lower() != "true":
        return None
    endpoint, interval = endpoint_and_interval(env, ENV_ENABLED, ENV_ENDPOINT, ENV_INTERVAL, DEFAULT_INTERVAL, ReclaimConfigError)
    for spec_field, (_, name) in LAYERS.items():
        if env.get(name):
            try:
                parse_value(spec_field, env[name])
            except (TypeError, ValueError) as e:
                raise ReclaimConfigError(f"{name}={env[name]!r}: {e}") from e
    return ReclaimEnv(endpoint, interval, env)


__all__ = [
    "ANN_ENABLED",
    "PREFIX",
    "ReclaimConfigError",
    "ReclaimEnv",
    "Settings",
    "opted_in",
    "parse_value",
    "read_env",
    "resolve",
    "spec_from_annotations",
]
