"""The Kaiwo workload kinds as data: one :class:`WorkloadKind` per kind, its
children declared as :class:`ChildSpec` entries.

One folder per child kind (``batchjob/``, ``rayjob/``, ``deployment/``,
``appwrapper/``, ``rayservice/``) holds its entry (``CHILD``), builder and
status mapper; :mod:`.registry` lists them, one line each; :mod:`.storage`
holds the storage children every kind shares. The generic reconciler, the
cache wiring and the status machine read these tables instead of branching
on the kind.
"""

from __future__ import annotations

from collections.abc import Iterable

from kaiwo_ctrl.kinds import LOCALQUEUES
from kaiwo_ctrl.runtime.api.client import Resource

from .registry import CHILD_KINDS, workload_kinds
from .spec import GROUP, MAIN, OWNS, OWNS_ANY, ChildSpec, Condition, Paths, WorkloadKind

WORKLOAD_KINDS: dict[str, WorkloadKind] = workload_kinds()
KAIWOJOB = WORKLOAD_KINDS["KaiwoJob"]
KAIWOSERVICE = WORKLOAD_KINDS["KaiwoService"]


def child_resources(kinds: Iterable[WorkloadKind] | None = None) -> dict[str, Resource]:
    """Resource of every child kind the workloads create or read (LocalQueue:
    the queue a workload needs, created when missing)."""
    ks = WORKLOAD_KINDS.values() if kinds is None else kinds
    return {c.kind: c.resource for k in ks for c in k.children} | {"LocalQueue": LOCALQUEUES}


def child_spec_for(kind: str) -> ChildSpec | None:
    """The first declared child of this kind (its paths rules are per kind)."""
    return next((c for k in WORKLOAD_KINDS.values() for c in k.children if c.kind == kind), None)


CHILD_RESOURCES = child_resources()
OWN_RESOURCES: dict[str, Resource] = {k.kind: k.resource for k in WORKLOAD_KINDS.values()}
#: Child kinds early termination deletes, in order: every kind's main objects
#: (and what they made) first, so nothing re-creates what is deleted next.
TERMINATION_KINDS: tuple[str, ...] = tuple(
    dict.fromkeys(
        [c.kind for k in WORKLOAD_KINDS.values() for c in k.termination_order() if c.main or c.build is None]
        + [c.kind for k in WORKLOAD_KINDS.values() for c in k.termination_order()]
    )
)
MAIN_KINDS = {(k.kind, ray): k.main_kind(ray) for k in WORKLOAD_KINDS.values() for ray in (False, True)}

__all__ = [
    "CHILD_KINDS",
    "CHILD_RESOURCES",
    "GROUP",
    "KAIWOJOB",
    "KAIWOSERVICE",
    "MAIN",
    "MAIN_KINDS",
    "OWNS",
    "OWNS_ANY",
    "OWN_RESOURCES",
    "TERMINATION_KINDS",
    "WORKLOAD_KINDS",
    "ChildSpec",
    "Condition",
    "Paths",
    "WorkloadKind",
    "child_resources",
    "child_spec_for",
    "workload_kinds",
]
