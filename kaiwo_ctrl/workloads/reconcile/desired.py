"""Entry point of the builders: every child a Kaiwo workload should have,
built by the ``ChildSpec`` entries of its kind."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from ..base.kaiwoobject import KaiwoObject
from ..base.world import World
from ..builders.plan import WorkloadPlan
from ..builders.podtemplate import EntrypointError
from ..builders.validation import SpecError, spec_error_from_validation
from ..kinds import MAIN_KINDS, WORKLOAD_KINDS, ChildSpec, WorkloadKind

__all__ = ["MAIN_KINDS", "desired_children", "desired_pairs", "downloads_configured", "load", "main_workload", "plan_of"]


def load(obj: Any) -> KaiwoObject | SpecError:
    """The object as a :class:`KaiwoObject`, or the SpecError for a document
    that does not fit the API types."""
    try:
        return KaiwoObject.of(obj)
    except ValidationError as exc:
        return spec_error_from_validation(exc)


def plan_of(obj: Any, world: World, *, checked: bool = True) -> WorkloadPlan | SpecError:
    """The :class:`WorkloadPlan` of the object, or the SpecError for a
    document that does not fit the API types."""
    if isinstance(obj, WorkloadPlan):
        return obj
    try:
        return WorkloadPlan.of(obj, world, checked=checked)
    except ValidationError as exc:
        return spec_error_from_validation(exc)


def _build(spec: ChildSpec, p: WorkloadPlan) -> dict[str, Any] | SpecError | None:
    assert spec.build is not None
    try:
        return spec.build(p)
    except EntrypointError as exc:
        return SpecError("spec.entrypoint", "InvalidEntrypoint", str(exc))


def main_workload(obj: Any, world: World) -> dict[str, Any] | SpecError:
    """The underlying object: Job, RayJob, Deployment or AppWrapper(RayService),
    built without the spec checks."""
    p = plan_of(obj, world, checked=False)
    if isinstance(p, SpecError):
        return p
    out = _build(WORKLOAD_KINDS[p.o.kind].main_child(p.o.is_ray), p)
    assert out is not None
    return out


def downloads_configured(obj: Any, world: World) -> bool:
    p = plan_of(obj, world, checked=False)
    return not isinstance(p, SpecError) and p.storage.downloads_configured


def desired_pairs(
    p: WorkloadPlan, *, download_succeeded: bool = False, kind: WorkloadKind | None = None
) -> list[tuple[ChildSpec, dict[str, Any]]] | SpecError:
    """Every child the workload needs with its ``ChildSpec``, in declaration
    (creation) order. The main object is left out while downloads are
    configured and have not succeeded. A :class:`SpecError` instead when the
    spec cannot be built."""
    error = p.spec_error()
    if error is not None:
        return error
    wk = kind or WORKLOAD_KINDS[p.o.kind]
    gated = p.storage.downloads_configured and not download_succeeded
    out: list[tuple[ChildSpec, dict[str, Any]]] = []
    for spec in wk.applicable(p.o.is_ray):
        if spec.build is None or (spec.main and gated):
            continue
        child = _build(spec, p)
        if isinstance(child, SpecError):
            return child
        if child is not None:
            out.append((spec, child))
    return out


def desired_children(obj: Any, world: World, *, download_succeeded: bool = False) -> list[dict[str, Any]] | SpecError:
    """Every child in creation order: data PVC, HF PVC, download ConfigMap,
    download Job, then the main workload object (see :func:`desired_pairs`;
    the reconciler passes whether the download Job succeeded). ``obj`` may
    be the reconcile's :class:`WorkloadPlan`."""
    p = plan_of(obj, world)
    if isinstance(p, SpecError):
        return p
    pairs = desired_pairs(p, download_succeeded=download_succeeded)
    return pairs if isinstance(pairs, SpecError) else [child for _, child in pairs]
