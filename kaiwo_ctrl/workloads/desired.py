"""Entry point of the builders: every child a Kaiwo workload should have,
built by the ``ChildSpec`` entries of its kind."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from .gpu import check_gpus, check_queue
from .kaiwoobject import KaiwoObject
from .kinds import MAIN_KINDS, WORKLOAD_KINDS, Build, ChildSpec, WorkloadKind
from .podtemplate import EntrypointError
from .validation import SpecError, gpu_plan, gpu_stats, spec_error_from_validation, validate
from .world import World

__all__ = ["MAIN_KINDS", "check", "desired_children", "desired_pairs", "downloads_configured", "load", "main_workload"]


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


def _build(spec: ChildSpec, b: Build) -> dict[str, Any] | SpecError | None:
    assert spec.build is not None
    try:
        return spec.build(b)
    except EntrypointError as exc:
        return SpecError("spec.entrypoint", "InvalidEntrypoint", str(exc))


def main_workload(obj: Any, world: World) -> dict[str, Any] | SpecError:
    """The underlying object: Job, RayJob, Deployment or AppWrapper(RayService)."""
    o = load(obj)
    if isinstance(o, SpecError):
        return o
    out = _build(WORKLOAD_KINDS[o.kind].main_child(o.is_ray), Build.of(o, world))
    assert out is not None
    return out


def downloads_configured(obj: Any, world: World) -> bool:
    o = load(obj)
    return not isinstance(o, SpecError) and Build.of(o, world).storage.downloads_configured


def desired_pairs(
    o: KaiwoObject, world: World, *, download_succeeded: bool = False, kind: WorkloadKind | None = None
) -> list[tuple[ChildSpec, dict[str, Any]]] | SpecError:
    """Every child the workload needs with its ``ChildSpec``, in declaration
    (creation) order. The main object is left out while downloads are
    configured and have not succeeded. A :class:`SpecError` instead when the
    spec cannot be built."""
    error = check(o, world)
    if error is not None:
        return error
    wk = kind or WORKLOAD_KINDS[o.kind]
    b = Build.of(o, world)
    gated = b.storage.downloads_configured and not download_succeeded
    out: list[tuple[ChildSpec, dict[str, Any]]] = []
    for spec in wk.applicable(o.is_ray):
        if spec.build is None or (spec.main and gated):
            continue
        child = _build(spec, b)
        if isinstance(child, SpecError):
            return child
        if child is not None:
            out.append((spec, child))
    return out


def desired_children(obj: Any, world: World, *, download_succeeded: bool = False) -> list[dict[str, Any]] | SpecError:
    """Every child in creation order: data PVC, HF PVC, download ConfigMap,
    download Job, then the main workload object (see :func:`desired_pairs`;
    the reconciler passes whether the download Job succeeded)."""
    o = load(obj)
    if isinstance(o, SpecError):
        return o
    pairs = desired_pairs(o, world, download_succeeded=download_succeeded)
    return pairs if isinstance(pairs, SpecError) else [child for _, child in pairs]
