"""What the caches hold for one workload, sorted into the slots its
:class:`~kaiwo_ctrl.workloads.kinds.WorkloadKind` declares (:meth:`~kaiwo_ctrl.workloads.kinds.WorkloadKind.observed`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: The slot of the main child (the underlying object) of every workload kind.
MAIN = "main"


class ObservedChildren:
    """The observed children of one workload by slot (absent: ``None``).

    ``main`` is the underlying object (Job, RayJob, Deployment or AppWrapper);
    ``unapplied_fields`` what :func:`kaiwo_ctrl.workloads.observe.drift.immutable_drift`
    found; ``gpu_demand`` whether another workload is waiting for GPUs (see
    :func:`kaiwo_ctrl.workloads.observe.status.has_gpu_demand`).
    """

    __slots__ = ("objects", "unapplied_fields", "gpu_demand")

    def __init__(
        self, *, unapplied_fields: tuple[str, ...] = (), gpu_demand: bool = False, **objects: Mapping[str, Any] | None
    ) -> None:
        self.objects: dict[str, dict[str, Any]] = {k: dict(v) for k, v in objects.items() if v is not None}
        self.unapplied_fields = tuple(unapplied_fields)
        self.gpu_demand = gpu_demand

    def get(self, slot: str) -> dict[str, Any] | None:
        return self.objects.get(slot)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ObservedChildren):
            return NotImplemented
        return (self.objects, self.unapplied_fields, self.gpu_demand) == (
            other.objects, other.unapplied_fields, other.gpu_demand,
        )

    def __repr__(self) -> str:
        return f"ObservedChildren(slots={sorted(self.objects)}, unapplied={self.unapplied_fields}, gpu_demand={self.gpu_demand})"

    @property
    def main(self) -> dict[str, Any] | None:
        """The underlying object (every kind's main child has this slot)."""
        return self.objects.get(MAIN)
