"""The shape of a workload kind: :class:`WorkloadKind` and its
:class:`ChildSpec` entries (compare Kueue's ``jobframework.GenericJob``).

A child is declared once, as data: the resource it lives in, its name, the
builder that makes its desired form, how its state maps onto the workload's
status, which paths cannot be changed once it exists, which fields other
controllers own, and how its events reach the workload. The generic
reconciler, the cache wiring and the status machine read only these tables.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kaiwo_ctrl.runtime.api.client import Resource
from kaiwo_ctrl.runtime.control.handler import Request

from ..base.kaiwoobject import KaiwoObject
from ..base.naming import name_with_suffix
from ..base.observed import MAIN, ObservedChildren
from ..builders.plan import WorkloadPlan

GROUP = "kaiwo.silogen.ai"

#: How a child's events reach its workload (``ChildSpec.watch``).
OWNS = "owns"  # controller owner reference; status, generation or deletion changes
OWNS_ANY = "owns-any"  # controller owner reference; every event, its creation included

#: A condition a child contributes to the workload's status: (type, status, reason, message).
Condition = tuple[str, str, str, str]
MapFn = Callable[[Mapping[str, Any]], Iterable[Request]]


Builder = Callable[[WorkloadPlan], dict[str, Any] | None]
StatusMapper = Callable[[ObservedChildren, str], str]
ConditionMapper = Callable[[Mapping[str, Any] | None], Condition | None]

#: A Job's pod template and selector cannot change once it exists.
JOB_IMMUTABLE = ("spec.template", "spec.selector", "spec.completionMode", "spec.completions")
#: Kueue unsuspends admitted workloads: ``spec.suspend`` is theirs once the object exists.
SUSPEND = ("spec.suspend",)


@dataclass(frozen=True)
class Paths:
    """What the apply must not send for a child that exists.

    * ``immutable``: paths that cannot change on the existing object (reported
      as ``SpecChangeNotApplied``, never sent); ``growable``: the subset where
      a larger quantity can be applied (volume expansion);
    * ``foreign``: fields other controllers own once it exists (never sent).
    """

    immutable: tuple[str, ...] = ()
    growable: tuple[str, ...] = ()
    foreign: tuple[str, ...] = ()


@dataclass(frozen=True)
class ChildSpec:
    """One child a workload may have: its table entry (``kinds/<kind>/``).

    * ``resource``: what it is and where it lives (its ``kind`` too).
    * ``build``: its desired form from the reconcile's plan, ``None`` when this
      workload does not need it; no builder means another controller makes it
      and we only read it.
    * ``status``: for the main child, the workload status from the observed
      children and the previous status.
    * ``condition``: a condition it adds to the workload's status (or ``None``).
    * ``suffix``: its name is ``<workload>-<suffix>`` (``None``: the workload's own name).
    * ``paths``: what the apply leaves alone on an existing object (:class:`Paths`).
    * ``ray``: only for Ray (True) or non-Ray (False) workloads; ``None``: both.
    * ``main``: the underlying workload object (built only after the downloads
      succeeded); ``terminate``: early termination deletes it.
    * ``watch``: :data:`OWNS`, :data:`OWNS_ANY`, a map function (events of an
      object with no owner reference of ours -> its workload) or ``None``
      (never watched); ``adopted``: map function for a managed child no
      workload controls (it still follows the workload of its name).
    * ``slot`` (derived): where :class:`~kaiwo_ctrl.workloads.base.observed.ObservedChildren` holds
      it; readers name it through the entry (``DOWNLOAD_JOB.slot``), never
      as a string. :data:`MAIN` for the main child, else ``key`` when given,
      else ``<kind>`` or ``<kind>-<suffix>``.
    """

    resource: Resource
    build: Builder | None = None
    status: StatusMapper | None = None
    condition: ConditionMapper | None = None
    suffix: str | None = None
    paths: Paths = Paths()
    ray: bool | None = None
    main: bool = False
    terminate: bool = False
    watch: str | MapFn | None = OWNS
    adopted: MapFn | None = None
    key: str | None = None

    @property
    def kind(self) -> str:
        return self.resource.kind

    @property
    def slot(self) -> str:
        if self.main:
            return MAIN
        return self.key or (self.kind if self.suffix is None else f"{self.kind}-{self.suffix}")

    def name(self, workload: str) -> str:
        return workload if self.suffix is None else name_with_suffix(workload, self.suffix)

    def applies(self, is_ray: bool) -> bool:
        return self.ray is None or self.ray == is_ray


@dataclass(frozen=True)
class WorkloadKind:
    """One Kaiwo workload kind and the children it declares (in creation order)."""

    kind: str
    resource: Resource
    component: str
    children: tuple[ChildSpec, ...]
    #: the Kueue Workloads of its Deployment are per pod: watch the pods too
    pod_workloads: bool = False

    @property
    def controller_name(self) -> str:
        return self.kind.lower()

    def applicable(self, is_ray: bool) -> tuple[ChildSpec, ...]:
        return tuple(c for c in self.children if c.applies(is_ray))

    def main_child(self, is_ray: bool) -> ChildSpec:
        return next(c for c in self.children if c.main and c.applies(is_ray))

    def main_kind(self, is_ray: bool) -> tuple[str, str]:
        """(apiVersion, kind) of the underlying object."""
        c = self.main_child(is_ray)
        return (c.resource.api_version, c.kind)

    def observed(self, obj: Any, objects: Iterable[Mapping[str, Any]], **extra: Any) -> ObservedChildren:
        """Sort the objects into the slots of the children ``obj`` (a workload of
        this kind) declares, by kind and name (others are ignored)."""
        o = KaiwoObject.of(obj)
        slots: dict[tuple[str | None, str | None], str] = {(c.kind, c.name(o.name)): c.slot for c in self.applicable(o.is_ray)}
        found: dict[str, Any] = {}
        for item in objects:
            slot = slots.get((item.get("kind"), (item.get("metadata") or {}).get("name")))
            if slot:
                found[slot] = item
        return ObservedChildren(**found, **extra)

    def termination_order(self) -> tuple[ChildSpec, ...]:
        """Children early termination deletes: the main objects (and what they
        made) first, so nothing re-creates what is deleted next."""
        first = [c for c in self.children if c.terminate and (c.main or c.build is None)]
        return tuple(first + [c for c in self.children if c.terminate and c not in first])
