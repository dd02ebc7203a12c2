"""Which differences between an existing child and its desired form cannot be
applied, so the reconciler can report them (condition ``SpecChangeNotApplied``)
instead of silently dropping them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kaiwo_ctrl.quantity import QuantityError, parse_quantity

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


def _get(doc: Any, path: str) -> Any:
    cur = doc
    for part in path.split("."):
        if not isinstance(cur, Mapping):
            return None
        cur = cur.get(part)
    return cur


def _same_scalar(a: Any, b: Any) -> bool:
    if a == b:
        return True
    if isinstance(a, (str, int, float)) and isinstance(b, (str, int, float)) and not isinstance(a, bool):
        try:
            return parse_quantity(a) == parse_quantity(b)
        except QuantityError:
            return False
    return False


def _differences(desired: Any, existing: Any, path: str, out: list[str]) -> None:
    """Paths where ``desired`` is not contained in ``existing``. Fields only the
    existing object has (server defaults, other controllers' additions) are
    ignored; lists of named items are matched by name."""
    if isinstance(desired, Mapping):
        if not isinstance(existing, Mapping):
            out.append(path)
            return
        for key, value in desired.items():
            _differences(value, existing.get(key), f"{path}.{key}" if path else key, out)
        return
    if isinstance(desired, list):
        if not isinstance(existing, list):
            if desired:
                out.append(path)
            return
        named = all(isinstance(i, Mapping) and "name" in i for i in desired)
        if named and all(isinstance(i, Mapping) for i in existing):
            index = {i.get("name"): i for i in existing}
            for item in desired:
                other = index.get(item["name"])
                if other is None:
                    out.append(f"{path}[{item['name']}]")
                else:
                    _differences(item, other, f"{path}[{item['name']}]", out)
            return
        if all(isinstance(i, Mapping) for i in desired):
            # Unnamed objects (tolerations, ...): each desired item must be
            # contained in some existing item; others may have added their own.
            for i, item in enumerate(desired):
                if not any(not _differences_of(item, other) for other in existing):
                    out.append(f"{path}[{i}]")
            return
        if len(desired) != len(existing) or any(not _same_scalar(a, b) for a, b in zip(desired, existing)):
            out.append(path)
        return
    if desired is None:
        return
    if not _same_scalar(desired, existing):
        out.append(path)


def _differences_of(desired: Any, existing: Any) -> list[str]:
    out: list[str] = []
    _differences(desired, existing, "", out)
    return out


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

    Comparison is by containment: what the desired object sets must be present
    with the same value (quantities compared by value, ``"1Gi" == "1024Mi"``).
    For a PVC, a larger storage request is applicable (volume expansion) and
    not reported; a smaller one is.
    """
    out: list[str] = []
    for path in IMMUTABLE_PATHS.get(kind, ()):
        want = _get(desired_child, path)
        have = _get(existing_child, path)
        if want is None:
            continue
        if kind == "PersistentVolumeClaim" and path.endswith("requests.storage"):
            try:
                if parse_quantity(want) >= parse_quantity(have):
                    continue
            except QuantityError:
                pass
        _differences(want, have, path, out)
    return out
