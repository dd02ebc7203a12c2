"""Which differences between an existing child and its desired form cannot be
applied, so the reconciler can report them (condition ``SpecChangeNotApplied``)
instead of silently dropping them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kaiwo_ctrl.runtime.objects.diff import differences
from kaiwo_ctrl.runtime.objects.objpath import get_path
from kaiwo_ctrl.runtime.objects.quantity import QuantityError, parse_quantity

from ..kinds import WORKLOAD_KINDS, ChildSpec, child_spec_for

#: Paths (dotted, under the object) the API server or the owning controller will
#: not change on an existing object, by kind (declared on each ``ChildSpec``).
IMMUTABLE_PATHS: dict[str, tuple[str, ...]] = {
    c.kind: c.paths.immutable for k in WORKLOAD_KINDS.values() for c in k.children if c.paths.immutable
}

#: Fields other controllers own once the child exists, by kind (``ChildSpec.paths.foreign``);
#: the reconciler leaves them out of its apply (Kueue unsuspends admitted workloads).
OWNED_BY_OTHERS: dict[str, tuple[str, ...]] = {
    c.kind: c.paths.foreign for k in WORKLOAD_KINDS.values() for c in k.children if c.paths.foreign
}


def growing(path: str, want: Any, have: Any, growable: tuple[str, ...]) -> bool:
    """A larger quantity on a growable path (a PVC's storage request: volume
    expansion) can be applied."""
    if path not in growable or want is None or have is None:
        return False
    try:
        return parse_quantity(want) >= parse_quantity(have)
    except QuantityError:
        return False


def is_controlled_by(child: Mapping[str, Any], owner_uid: str) -> bool:
    """Whether ``child`` has a controller owner reference to ``owner_uid``. A Job
    the Job webhook adopted for a KaiwoJob is not controlled by it: the
    reconciler must read its status but never apply to it."""
    for ref in (child.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller") and ref.get("uid") == owner_uid:
            return True
    return False


def immutable_drift(
    kind: str | ChildSpec, existing_child: Mapping[str, Any], desired_child: Mapping[str, Any]
) -> list[str]:
    """Dotted paths of fields that differ between ``desired_child`` and
    ``existing_child`` and cannot be changed on the existing object
    (``kind``: the child's ``ChildSpec``, or its kind name).

    Comparison is the one object diff (:mod:`kaiwo_ctrl.runtime.objects.diff`): what
    the desired object sets must be present with the same value. A larger
    request on a growable path is applicable and not reported; a smaller one is.
    """
    spec = kind if isinstance(kind, ChildSpec) else child_spec_for(kind)
    if spec is None:
        return []
    out: list[str] = []
    for path in spec.paths.immutable:
        want = get_path(desired_child, path)
        have = get_path(existing_child, path)
        if want is None or growing(path, want, have, spec.paths.growable):
            continue
        out += differences(have, want, path)
    return out
