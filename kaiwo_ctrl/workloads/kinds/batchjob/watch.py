"""Map function: a Kaiwo-managed Job no KaiwoJob controls -> its KaiwoJob."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kaiwo_ctrl.runtime.control.handler import Request
from kaiwo_ctrl.runtime.objects.objpath import meta as _meta

from ...base.labels import LABEL_MANAGED, LABEL_NAME


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
