"""Status mapper: an AppWrapper by the RayService it wraps."""

from __future__ import annotations

from ...base.observed import ObservedChildren
from ..rayservice import CHILD as RAYSERVICE
from ..rayservice.status import ray_service_status


def status(children: ObservedChildren, previous: str) -> str:
    return ray_service_status(children.main, children.get(RAYSERVICE.slot))
