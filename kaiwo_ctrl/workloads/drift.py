"""Which differences between an existing child and its desired form cannot be
applied, so the reconciler can report them (condition ``SpecChangeNotApplied``)
instead of silently dropping them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kaiwo_ctrl.quantity import QuantityError, parse_quantity
from kaiwo_ctrl.runtime.diff import differences
from kaiwo_ctrl.runtime.objpath import get_path

#: Paths (dotted, under the object) the API server or the owning controller will
#: not change on an existing object, by kind.
IMMUTABLE_PATHS: dict[str, tuple[str, ...]] = {
    "Job": ("spec.template", "spec.selector", "spec.completionMode", "spec.completions"),
    "Deployment": ("spec.selector",),
    "PersistentVolumeClaim": (
        "spec.accessModes",
        "spec.storageClassName",
        "spec.volumeMode",
        "spec.volumeName",
        "spec.resources.requests.storage",
    ),
    # KubeRay does not act on changes to a submitted RayJob's entrypoint or cluster.
    "RayJob": ("spec.entrypoint", "spec.rayClusterSpec", "spec.runtimeEnvYAML", "spec.submitterPodTemplate"),
    # The AppWrapper webhook refuses changes to its components.
    "AppWrapper": ("spec.components",),
}

#: Fields other controllers own once the child exists; the reconciler must
#: leave them out of its apply (Kueue unsuspends admitted workloads).
OWNED_BY_OTHERS: dict[str, tuple[str, ...]] = {
    "Job": ("spec.suspend",),
    "RayJob": ("spec.suspend",),
    "AppWrapper": ("spec.suspend",),
}


def is_controlled_by(child: Mapping[str, Any], owner_uid: str) -> bool:
    """Whether ``child`` has a controller owner reference to ``owner_uid``. A Job
    the Job webhook adopted for a KaiwoJob (§16) is not controlled by it: the
    reconciler must read its status but never apply to it."""
    for ref in (child.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller") and ref.get("uid") == owner_uid:
            return True
    return False


def immutable_drift(kind: str, existing_child: Mapping[str, Any], desired_child: Mapping[str, Any]) -> list[str]:
    """Dotted paths of fields that differ between ``desired_child`` and
    ``existing_child`` and cannot be changed on the existing object.

    Comparison is the one object diff (:mod:`kaiwo_ctrl.runtime.diff`): what
    the desired object sets must be present with the same value.
    For a PVC, a larger storage request is applicable (volume expansion) and
    not reported; a smaller one is.
    """
    out: list[str] = []
    for path in IMMUTABLE_PATHS.get(kind, ()):
        want = get_path(desired_child, path)
        have = get_path(existing_child, path)
        if want is None:
            continue
        if kind == "PersistentVolumeClaim" and path.endswith("requests.storage"):
            try:
                if parse_quantity(want) >= parse_quantity(have):
                    continue
            except QuantityError:
                pass
        out += differences(have, want, path)
    return out
