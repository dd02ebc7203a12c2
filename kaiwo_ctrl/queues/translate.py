"""v1beta1 -> v1beta2 translation of the ClusterQueue specs a KaiwoQueueConfig
embeds, and the name of a queue-config list entry.

The translations (mirroring Kueue's own v1beta1 -> v1beta2 conversion) are
listed in :mod:`kaiwo_ctrl.queues.kueue`. Both the builders there and the
validation in :mod:`kaiwo_ctrl.queues.validate` use this module, which imports
neither of them.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

# ---------------------------------------------------------------------------
# v1beta1 -> v1beta2 ClusterQueue spec translation
# ---------------------------------------------------------------------------

#: Known v1beta2 ClusterQueue spec fields (from the Kueue v0.19.2 CRD schema) and
#: their types: a dict = object with these keys, a one-element list = list whose
#: items have that shape, and leaf tags ``str``, ``int``, ``quantity`` (int or
#: string), ``strs`` (list of strings) and ``map`` (string -> string).
CLUSTER_QUEUE_V1BETA2_FIELDS: dict[str, Any] = {
    "admissionChecksStrategy": {"admissionChecks": [{"name": "str", "onFlavors": "strs"}]},
    "admissionScope": {"admissionMode": "str"},
    "cohortName": "str",
    "concurrentAdmissionPolicy": {"migration": {"constraints": {"lastAcceptableFlavorName": "str"}, "mode": "str"}},
    "fairSharing": {"weight": "quantity"},
    "flavorFungibility": {"preference": "str", "whenCanBorrow": "str", "whenCanPreempt": "str"},
    "namespaceSelector": {
        "matchExpressions": [{"key": "str", "operator": "str", "values": "strs"}],
        "matchLabels": "map",
    },
    "preemption": {
        "borrowWithinCohort": {"maxPriorityThreshold": "int", "policy": "str"},
        "reclaimWithinCohort": "str",
        "withinClusterQueue": "str",
    },
    "queueingStrategy": "str",
    "resourceGroups": [
        {
            "coveredResources": "strs",
            "flavors": [
                {
                    "name": "str",
                    "resources": [
                        {
                            "name": "str",
                            "nominalQuota": "quantity",
                            "borrowingLimit": "quantity",
                            "lendingLimit": "quantity",
                        }
                    ],
                }
            ],
        }
    ],
    "stopPolicy": "str",
}

_FUNGIBILITY_VALUES = {("whenCanBorrow", "Borrow"): "MayStopSearch", ("whenCanPreempt", "Preempt"): "MayStopSearch"}


def _is_str_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


_LEAF_CHECKS = {
    "str": (lambda v: isinstance(v, str), "must be a string"),
    "int": (_is_int, "must be an integer"),
    "quantity": (lambda v: _is_int(v) or isinstance(v, str), "must be a quantity (integer or string)"),
    "strs": (_is_str_list, "must be a list of strings"),
    "map": (lambda v: isinstance(v, Mapping) and all(isinstance(x, str) for x in v.values()), "must be a map of strings"),
}


def shape_problems(value: Any, shape: Any, path: str = "") -> list[str]:
    """``"<path>: <reason>"`` for every field of ``value`` that the v1beta2 schema
    ``shape`` does not declare (the apiserver would prune it) or whose type is wrong."""
    where = path or "spec"
    if isinstance(shape, str):
        check, reason = _LEAF_CHECKS[shape]
        return [] if check(value) else [f"{where}: {reason}"]
    if isinstance(shape, list):
        if not isinstance(value, list):
            return [f"{where}: must be a list"]
        out: list[str] = []
        for i, item in enumerate(value):
            out.extend(shape_problems(item, shape[0], f"{path}[{i}]"))
        return out
    if not isinstance(value, Mapping):
        return [f"{where}: must be an object"]
    out = []
    for key, sub in value.items():
        sub_path = f"{path}.{key}" if path else str(key)
        if key not in shape:
            out.append(f"{sub_path}: unknown field, not part of the Kueue v1beta2 ClusterQueue spec")
        elif sub is not None:
            out.extend(shape_problems(sub, shape[key], sub_path))
    return out


def drop_nulls(value: Any) -> Any:
    """Deep copy without ``None`` map values (the apiserver drops nulls of non-nullable fields)."""
    if isinstance(value, Mapping):
        return {k: drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [drop_nulls(v) for v in value]
    return copy.deepcopy(value)


def translate_cluster_queue_spec(spec: Mapping[str, Any] | None) -> tuple[dict[str, Any], list[str]]:
    """Translate a ClusterQueue spec written with v1beta1 names into a v1beta2 spec.

    Returns ``(v1beta2_spec, problems)``; each problem is ``"<field path>: <reason>"``
    relative to the spec. The input is not modified. ``None`` values are dropped, and
    so are top-level empty strings (they mean "unset"; an empty cohort name would
    fail the schema pattern).
    """
    if not isinstance(spec, Mapping):
        return {}, [] if spec is None else ["spec: must be an object"]
    src = {k: drop_nulls(v) for k, v in spec.items() if v is not None and v != ""}
    problems: list[str] = []

    cohort = src.pop("cohort", None)
    if cohort is not None and not isinstance(cohort, str):
        problems.append("cohort: must be a string")
    elif cohort is not None:
        existing = src.get("cohortName")
        if existing is not None and existing != cohort:
            problems.append(f"cohort: {cohort!r} conflicts with cohortName {existing!r}; set only one")
        else:
            src["cohortName"] = cohort

    checks = src.pop("admissionChecks", None)
    if checks is not None and not _is_str_list(checks):
        problems.append("admissionChecks: must be a list of strings")
    elif checks:
        if src.get("admissionChecksStrategy"):
            problems.append("admissionChecks: cannot be used together with admissionChecksStrategy")
        else:
            src["admissionChecksStrategy"] = {"admissionChecks": [{"name": name} for name in checks]}

    fungibility = src.get("flavorFungibility")
    if isinstance(fungibility, Mapping):
        fungibility = dict(fungibility)
        for (key, old), new in _FUNGIBILITY_VALUES.items():
            if fungibility.get(key) == old:
                fungibility[key] = new
        src["flavorFungibility"] = fungibility

    problems.extend(shape_problems(src, CLUSTER_QUEUE_V1BETA2_FIELDS))
    return src, problems


def entry_name(entry: Mapping[str, Any]) -> str | None:
    """Name of a queue-config list entry (``name`` or ``metadata.name``; ``None`` unless a non-empty string)."""
    if not isinstance(entry, Mapping):
        return None
    name = entry.get("name")
    if not name:
        meta = entry.get("metadata")
        name = meta.get("name") if isinstance(meta, Mapping) else None
    return name if isinstance(name, str) and name else None
