"""KaiwoJob / KaiwoService: pure builders (desired children) and status observation.

Nothing in this package talks to the API server. The reconciler reads its caches,
builds a :class:`World`, calls :func:`desired_children` and :func:`observe`, and
applies the results (see each function's documentation for what it expects).
"""

from .reconcile.desired import desired_children, main_workload
from .observe.drift import OWNED_BY_OTHERS, immutable_drift
from .reconcile.render import RenderError, render
from .observe.status import (
    ObservedChildren,
    download_succeeded,
    has_gpu_demand,
    observe,
    requeue_after,
    status_events,
    sweep_expired,
)
from .builders.validation import SpecError
from .base.world import World

__all__ = [
    "OWNED_BY_OTHERS",
    "ObservedChildren",
    "RenderError",
    "SpecError",
    "World",
    "desired_children",
    "download_succeeded",
    "has_gpu_demand",
    "immutable_drift",
    "main_workload",
    "observe",
    "render",
    "requeue_after",
    "status_events",
    "sweep_expired",
]
