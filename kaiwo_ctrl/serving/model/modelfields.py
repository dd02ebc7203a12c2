"""The Model's own fields the controller keeps: its ``features.kubeai.org/<Feature>``
labels (from ``spec.features``) and, unless ``autoscalingDisabled``, its replicas
within ``minReplicas``..``maxReplicas``."""

from __future__ import annotations

FEATURE_PREFIX = "features.kubeai.org/"


def feature_labels(model: dict) -> dict[str, str | None]:
    """The label patch (``None`` removes) that makes feature labels match ``spec.features``."""
    labels = model["metadata"].get("labels") or {}
    want = {f"{FEATURE_PREFIX}{f}" for f in (model.get("spec") or {}).get("features") or []}
    patch: dict[str, str | None] = {k: "true" for k in want if labels.get(k) != "true"}
    patch.update({k: None for k in labels if k.startswith(FEATURE_PREFIX) and k not in want})
    return patch


def bounded_replicas(spec: dict) -> int | None:
    """The replicas to write when autoscaling owns them and they are out of bounds."""
    if spec.get("autoscalingDisabled"):
        return None
    cur, lo, hi = spec.get("replicas"), spec.get("minReplicas") or 0, spec.get("maxReplicas")
    if cur is None or cur < lo:
        return lo if cur != lo else None
    if hi is not None and cur > hi:
        return hi
    return None
