"""The Kaiwo workload kinds as data: one :class:`WorkloadKind` per kind, its
children declared as :class:`ChildSpec` entries.

The generic reconciler (:mod:`.reconciler`), the cache wiring
(:mod:`.controller`) and the status observation read these tables instead of
branching on the kind: which children a workload can have, under which name,
which resource they live in, how their events reach the workload, and which
are deleted when the workload is terminated early. Adding a child kind is one
``ChildSpec`` entry (plus its builder in ``desired.py`` and, when it has a
status of its own, its mapper in ``childstatus.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

from kaiwo_ctrl.kinds import APPWRAPPERS, KAIWOJOBS, KAIWOSERVICES, LOCALQUEUES, RAYJOBS, RAYSERVICES
from kaiwo_ctrl.runtime.client import Resource
from kaiwo_ctrl.runtime.resources import CONFIGMAPS, DEPLOYMENTS, JOBS, PVCS

from .naming import name_with_suffix

GROUP = "kaiwo.silogen.ai"

#: How a child's events reach its workload.
OWNS = "owns"  # controller owner reference (status changes only)
MAPPED = "mapped"  # a map function in controller.py (no owner reference of ours)


@dataclass(frozen=True)
class ChildSpec:
    """One child a workload may have.

    ``suffix`` names it (``<workload>-<suffix>``; ``None``: the workload's own
    name); ``slot`` is its field in :class:`~.status.ObservedChildren`;
    ``ray`` limits it to Ray (True) or non-Ray (False) workloads (``None``:
    both); ``main`` marks the underlying workload object; ``terminate`` says
    early termination deletes it; ``watch`` how its events are delivered.
    """

    kind: str
    resource: Resource
    slot: str
    suffix: str | None = None
    ray: bool | None = None
    main: bool = False
    terminate: bool = False
    watch: str | None = OWNS

    def name(self, workload: str) -> str:
        return workload if self.suffix is None else name_with_suffix(workload, self.suffix)


#: Children every workload kind shares: storage and the download step.
STORAGE_CHILDREN = (
    ChildSpec("PersistentVolumeClaim", PVCS, "data_pvc", suffix="data", terminate=True),
    ChildSpec("PersistentVolumeClaim", PVCS, "hf_pvc", suffix="hf", terminate=True),
    ChildSpec("ConfigMap", CONFIGMAPS, "download_configmap", suffix="download", watch=None),
    ChildSpec("Job", JOBS, "download_job", suffix="download", terminate=True),
)


@dataclass(frozen=True)
class WorkloadKind:
    """One Kaiwo workload kind and the children it declares."""

    kind: str
    resource: Resource
    component: str
    children: tuple[ChildSpec, ...]
    #: (apiVersion, kind) of the underlying object, by Ray-ness
    main_kinds: tuple[tuple[str, str], tuple[str, str]]

    @property
    def controller_name(self) -> str:
        return self.kind.lower()

    def main_kind(self, is_ray: bool) -> tuple[str, str]:
        return self.main_kinds[1 if is_ray else 0]

    def child_names(self, name: str) -> list[tuple[ChildSpec, str]]:
        return [(c, c.name(name)) for c in self.children]


KAIWOJOB = WorkloadKind(
    "KaiwoJob",
    KAIWOJOBS,
    "kaiwojob-controller",
    STORAGE_CHILDREN
    + (
        ChildSpec("Job", JOBS, "main", ray=False, main=True, terminate=True),
        ChildSpec("RayJob", RAYJOBS, "main", ray=True, main=True, terminate=True),
    ),
    (("batch/v1", "Job"), ("ray.io/v1", "RayJob")),
)

KAIWOSERVICE = WorkloadKind(
    "KaiwoService",
    KAIWOSERVICES,
    "kaiwoservice-controller",
    STORAGE_CHILDREN
    + (
        ChildSpec("Deployment", DEPLOYMENTS, "main", ray=False, main=True, terminate=True),
        ChildSpec("AppWrapper", APPWRAPPERS, "main", ray=True, main=True, terminate=True),
        # made by the AppWrapper controller, owned by the AppWrapper
        ChildSpec("RayService", RAYSERVICES, "ray_service", ray=True, terminate=True, watch=MAPPED),
    ),
    (("apps/v1", "Deployment"), ("workload.codeflare.dev/v1beta2", "AppWrapper")),
)

WORKLOAD_KINDS: dict[str, WorkloadKind] = {k.kind: k for k in (KAIWOJOB, KAIWOSERVICE)}

#: Resource of every child kind a workload creates or reads (LocalQueue: the
#: queue a workload needs, created when missing).
CHILD_RESOURCES: dict[str, Resource] = {
    c.kind: c.resource for k in WORKLOAD_KINDS.values() for c in k.children
} | {"LocalQueue": LOCALQUEUES}
OWN_RESOURCES: dict[str, Resource] = {k.kind: k.resource for k in WORKLOAD_KINDS.values()}
COMPONENTS: dict[str, str] = {k.kind: k.component for k in WORKLOAD_KINDS.values()}
#: Kinds early termination deletes (controller-owned by the workload), main objects first.
TERMINATION_KINDS: tuple[str, ...] = tuple(
    dict.fromkeys(
        [c.kind for k in WORKLOAD_KINDS.values() for c in k.children if c.terminate and (c.main or c.kind == "RayService")]
        + [c.kind for k in WORKLOAD_KINDS.values() for c in k.children if c.terminate]
    )
)
MAIN_KINDS = {(k.kind, ray): k.main_kind(ray) for k in WORKLOAD_KINDS.values() for ray in (False, True)}
