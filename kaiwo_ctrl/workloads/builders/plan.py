"""One reconcile's plan of a KaiwoJob / KaiwoService: the object parsed once,
its spec validated once, its queue and GPU capacity checked once, its GPU and
storage plans derived once.

The desired builders (:mod:`kaiwo_ctrl.workloads.reconcile.desired`) and the status machine
(:func:`~kaiwo_ctrl.workloads.observe.status.observe`) both read one :class:`WorkloadPlan`, built at the
start of the reconcile; nothing below it parses or validates again, and the
child builders and the LocalQueue check take the queue from ``WorkloadPlan.queue``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ..base.gpu import GpuPlan, SchedulableResult, check_gpus, check_queue, derive_gpu_plan
from ..base.kaiwoobject import KaiwoObject
from ..base.world import World
from .storage import StoragePlan
from .validation import SpecError, validate

__all__ = ["WorkloadPlan"]


@dataclass(frozen=True, slots=True)
class WorkloadPlan:
    """Everything derived from one workload and one :class:`World`.

    * ``o``: the typed view; ``world``: what it was planned against;
    * ``errors``: the static spec errors (:func:`~.validation.validate`);
    * ``queue``: the ClusterQueue it uses;
    * ``gpu``: replicas and GPUs per replica; ``storage``: its PVCs and downloads;
    * ``queue_failure``/``capacity``: the queue check and the GPU capacity check
      (``None`` while the spec has errors: nothing is checked further then).
    """

    o: KaiwoObject
    world: World
    errors: tuple[SpecError, ...]
    queue: str
    gpu: GpuPlan
    storage: StoragePlan
    queue_failure: SchedulableResult | None = None
    capacity: SchedulableResult | None = None

    @classmethod
    def of(cls, obj: Any, world: World, *, checked: bool = True) -> WorkloadPlan:
        """Parse (a model, a dict or a :class:`KaiwoObject`; raises
        ``pydantic.ValidationError`` for a dict that does not fit the API),
        validate and derive. ``checked=False`` skips the spec and capacity
        checks (build regardless, as :func:`~kaiwo_ctrl.workloads.reconcile.desired.main_workload` does)."""
        o = KaiwoObject.of(obj)
        errors = tuple(validate(o, world)) if checked else ()
        cluster = world.gpu_capacity.stats(o.gpu_vendor)
        # an unknown cluster (no nodes given) does not split GPUs by node size
        gpu = derive_gpu_plan(o.gpus, o.replicas, o.gpus_per_replica, cluster if world.nodes_known else None)
        queue = o.queue_name(world.settings)
        if errors:
            # the storage plan reads the spec the errors are about: not derived
            return cls(o, world, errors, queue, gpu, StoragePlan())
        storage = StoragePlan.of(o, world)
        if not checked:
            return cls(o, world, errors, queue, gpu, storage)
        return cls(
            o, world, errors, queue, gpu, storage,
            queue_failure=check_queue(queue, o.namespace, world.queue_config),
            capacity=check_gpus(gpu, cluster),
        )

    def with_object(self, obj: Any) -> WorkloadPlan:
        """The same plan with ``obj``'s metadata and status (after our own
        status write: nothing but the status changed)."""
        return replace(self, o=self.o.with_object(obj))

    def schedulable(self) -> SchedulableResult:
        """The queue check, then the GPU capacity check (``.status`` False: not schedulable)."""
        assert self.capacity is not None, "a plan with spec errors is not checked"
        return self.queue_failure or self.capacity

    def spec_error(self) -> SpecError | None:
        """Why no child can be built: the first spec error, then the queue
        (when the queue config is known), then the GPU capacity (when the
        nodes are known)."""
        if self.errors:
            return self.errors[0]
        failure = self.queue_failure if self.world.queue_config is not None else None
        if failure is None and self.world.nodes_known and self.capacity is not None and not self.capacity.status:
            failure = self.capacity
        return None if failure is None else SpecError(failure.field, failure.reason, failure.message)
