"""KaiwoJob / KaiwoService: their children built from one plan per pass, their
status read back from those children, and the controller that applies both.

Five subpackages in layers, top first; each imports only the layers below it
(import-linter contract ``workloads-layers``):

    reconcile  the controller: desired children, caches, applying, status write
    observe    status from the observed children, preemption, drift
    kinds      one folder per child kind (entry, builder, status mapper)
    builders   validation, the one plan of a pass, pod template, storage, Ray
    base       names, labels, conditions, GPUs, the world, the object's view

``reconcile`` talks to the API server; the layers below build and read
objects, except ``observe/undecodable.py``, which patches the status of an
object that cannot be decoded. This
module hands on the names other packages use.
"""

from .base.world import World
from .builders.validation import SpecError
from .observe.drift import OWNED_BY_OTHERS, immutable_drift
from .observe.status import (
    ObservedChildren,
    download_succeeded,
    has_gpu_demand,
    observe,
    requeue_after,
    status_events,
    sweep_expired,
)
from .reconcile.desired import desired_children, main_workload
from .reconcile.render import RenderError, render

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
