"""Map function: a RayService (owned by its AppWrapper, not by us) -> its KaiwoService."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kaiwo_ctrl.runtime.control.handler import Request
from kaiwo_ctrl.runtime.objects.objpath import meta as _meta


def ray_service_owner(obj: Mapping[str, Any]) -> Iterable[Request]:
    """A RayService -> the KaiwoService of its AppWrapper (same name)."""
    meta = _meta(obj)
    for ref in meta.get("ownerReferences") or ():
        if ref.get("kind") == "AppWrapper":
            return [Request(meta.get("namespace") or "", ref.get("name"))]
    return []
