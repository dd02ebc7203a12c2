"""The Kaiwo workload kinds as data: one :class:`WorkloadKind` per kind
(:mod:`.job`, :mod:`.service`), its children declared as :class:`ChildSpec`
entries.

The generic reconciler, the cache wiring and the status machine read these
tables instead of branching on the kind. Adding a child kind is one
``ChildSpec`` entry with its builder and status/condition mapper; adding a
whole kind is one ``WorkloadKind`` here.
"""

from __future__ import annotations

from collections.abc import Iterable

from kaiwo_ctrl.kinds import LOCALQUEUES
from kaiwo_ctrl.runtime.api.client import Resource

from .job import KAIWOJOB
from .service import KAIWOSERVICE
from .spec import GROUP, MAPPED, OWNS, OWNS_ANY, ChildSpec, Condition, WorkloadKind

WORKLOAD_KINDS: dict[str, WorkloadKind] = {k.kind: k for k in (KAIWOJOB, KAIWOSERVICE)}


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
    "CHILD_RESOURCES",
    "GROUP",
    "KAIWOJOB",
    "KAIWOSERVICE",
    "MAIN_KINDS",
    "MAPPED",
    "OWNS",
    "OWNS_ANY",
    "OWN_RESOURCES",
    "TERMINATION_KINDS",
    "WORKLOAD_KINDS",
    "ChildSpec",
    "Condition",
    "WorkloadKind",
    "child_resources",
    "child_spec_for",
]
