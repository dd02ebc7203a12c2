"""Entry point of the builders: every child a Kaiwo workload should have."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from .batchjob import build_batch_job
from .deployment import build_deployment
from .gpu import check_gpus, check_queue
from .kaiwoobject import KaiwoObject
from .kinds import MAIN_KINDS
from .podtemplate import EntrypointError
from .rayjob import build_ray_job
from .rayservice import build_appwrapper
from .storage import StoragePlan, storage_children
from .validation import SpecError, gpu_plan, gpu_stats, spec_error_from_validation, validate
from .world import World

def load(obj: Any) -> KaiwoObject | SpecError:
    """The object as a :class:`KaiwoObject`, or the SpecError for a document
    that does not fit the API types."""
    try:
        return KaiwoObject.of(obj)
    except ValidationError as exc:
        return spec_error_from_validation(exc)


def check(obj: Any, world: World) -> SpecError | None:
    """All reasons not to build anything: static spec errors, then the queue
    (when the queue config is known) and the GPU capacity (when nodes are known)."""
    o = load(obj)
    if isinstance(o, SpecError):
        return o
    errors = validate(o, world)
    if errors:
        return errors[0]
    if world.queue_config is not None:
        failure = check_queue(o.queue_name(world.settings), o.namespace, world.queue_config)
        if failure is not None:
            return SpecError(failure.field, failure.reason, failure.message)
    stats = gpu_stats(o, world)
    if stats is not None:
        result = check_gpus(gpu_plan(o, world), stats)
        if not result.status:
            return SpecError(result.field, result.reason, result.message)
    return None


def main_workload(obj: Any, world: World) -> dict[str, Any] | SpecError:
    """The underlying object: Job, RayJob, Deployment or AppWrapper(RayService)."""
    o = load(obj)
    if isinstance(o, SpecError):
        return o
    plan = gpu_plan(o, world)
    storage = StoragePlan.of(o, world)
    try:
        if o.is_job:
            return (build_ray_job if o.is_ray else build_batch_job)(o, world, plan, storage)
        return (build_appwrapper if o.is_ray else build_deployment)(o, world, plan, storage)
    except EntrypointError as exc:
        return SpecError("spec.entrypoint", "InvalidEntrypoint", str(exc))


def downloads_configured(obj: Any, world: World) -> bool:
    o = load(obj)
    return not isinstance(o, SpecError) and StoragePlan.of(o, world).downloads_configured


def desired_children(obj: Any, world: World, *, download_succeeded: bool = False) -> list[dict[str, Any]] | SpecError:
    """Every child in creation order: data PVC, HF PVC, download ConfigMap,
    download Job, then the main workload object.

    The main workload is only included when no downloads are configured or
    ``download_succeeded`` (the reconciler passes whether the download Job
    succeeded; see :func:`kaiwo_ctrl.workloads.status.download_succeeded`).
    Returns a :class:`SpecError` instead when the spec cannot be built.
    """
    o = load(obj)
    if isinstance(o, SpecError):
        return o
    error = check(o, world)
    if error is not None:
        return error
    storage = StoragePlan.of(o, world)
    children = storage_children(o, storage, world)
    if storage.downloads_configured and not download_succeeded:
        return children
    main = main_workload(o, world)
    if isinstance(main, SpecError):
        return main
    children.append(main)
    return children
