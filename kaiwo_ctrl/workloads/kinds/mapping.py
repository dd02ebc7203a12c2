"""Map functions: events of objects a workload does not control -> the workload."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kaiwo_ctrl.runtime.handler import Request
from kaiwo_ctrl.runtime.objpath import meta as _meta

from ..labels import LABEL_MANAGED, LABEL_NAME, LABEL_TYPE, TYPE_SERVICE


def adopted_job_owner(obj: Mapping[str, Any]) -> Iterable[Request]:
    """A Kaiwo-managed Job no KaiwoJob controls (adopted through the Job
    webhook) -> the KaiwoJob of the same name, which follows its status."""
    meta = _meta(obj)
    labels = meta.get("labels") or {}
    if labels.get(LABEL_MANAGED) != "true" and not labels.get(LABEL_NAME):
        return []
    if any(ref.get("controller") and ref.get("kind") == "KaiwoJob" for ref in meta.get("ownerReferences") or ()):
        return []  # owned: the owner-reference watch handles it
    return [Request(meta.get("namespace") or "", meta.get("name") or "")]


def ray_service_owner(obj: Mapping[str, Any]) -> Iterable[Request]:
    """A RayService -> the KaiwoService of its AppWrapper (same name)."""
    meta = _meta(obj)
    for ref in meta.get("ownerReferences") or ():
        if ref.get("kind") == "AppWrapper":
            return [Request(meta.get("namespace") or "", ref.get("name"))]
    return []


def service_pod_owner(obj: Mapping[str, Any]) -> Iterable[Request]:
    """A KaiwoService pod -> its KaiwoService (by the name label)."""
    labels = _meta(obj).get("labels") or {}
    if labels.get(LABEL_TYPE) == TYPE_SERVICE and labels.get(LABEL_NAME):
        return [Request(_meta(obj).get("namespace") or "", labels[LABEL_NAME])]
    return []
