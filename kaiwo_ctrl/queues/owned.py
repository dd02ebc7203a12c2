"""The fields kaiwo-ctrl owns on a Kueue object: how to compare them, and how to write them.

Only these fields are compared, after applying the CRD defaults the apiserver
fills in and comparing quantities by value, so an unchanged cluster plans nothing:

* ResourceFlavor: ``spec`` (nodeLabels, nodeTaints, tolerations, topologyName);
* ClusterQueue: ``spec`` (defaults: queueingStrategy, stopPolicy, flavorFungibility,
  preemption, fairSharing.weight);
* LocalQueue: ``spec.clusterQueue``;
* WorkloadPriorityClass: ``value`` and ``description``;
* Topology: ``spec.levels``;
* on every kind: our two labels (plus labels/annotations an entry's own metadata
  asks for; others on the object are left alone) and our owner reference.

:func:`immutable_change` names a change Kueue refuses in place (see
:mod:`kaiwo_ctrl.queues.plan` for what the plan does about it).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from kaiwo_ctrl.runtime.objects.quantity import QuantityError, parse_quantity

from .constants import (
    CLUSTER_QUEUE,
    CLUSTER_QUEUE_SPEC_DEFAULTS,
    LOCAL_QUEUE,
    QUOTA_FIELDS,
    RESOURCE_FLAVOR,
    TOPOLOGY,
    WORKLOAD_PRIORITY_CLASS,
)
from .kueue import translate_cluster_queue_spec
from .translate import drop_nulls


def _quantity(value: Any) -> Any:
    if value is None:
        return None
    try:
        return parse_quantity(value).normalize()
    except (QuantityError, ArithmeticError):
        return value


def normalize_cluster_queue_spec(spec: Mapping[str, Any] | None) -> dict[str, Any]:
    """A v1beta2 ClusterQueue spec with CRD defaults applied and quantities as Decimals.

    A spec still in v1beta1 shape (read through the v1beta1 endpoint) is translated first.
    """
    out, _ = translate_cluster_queue_spec(dict(spec or {}))  # (which drops None values)
    for key, value in CLUSTER_QUEUE_SPEC_DEFAULTS.items():
        out.setdefault(key, value)
    fung = out.setdefault("flavorFungibility", {})
    fung.setdefault("whenCanBorrow", "MayStopSearch")
    fung.setdefault("whenCanPreempt", "TryNextFlavor")
    pre = out.setdefault("preemption", {})
    pre.setdefault("reclaimWithinCohort", "Never")
    pre.setdefault("withinClusterQueue", "Never")
    pre.setdefault("borrowWithinCohort", {}).setdefault("policy", "Never")
    if "fairSharing" in out:
        out["fairSharing"]["weight"] = _quantity(out["fairSharing"].get("weight", 1))
    if not out.get("resourceGroups"):
        out.pop("resourceGroups", None)
    for group in out.get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            for res in flavor.get("resources") or []:
                for qkey in QUOTA_FIELDS:
                    if qkey in res:
                        res[qkey] = _quantity(res[qkey])
    if out.get("cohortName") == "":
        out.pop("cohortName")
    return out


def _drop_empty(spec: Mapping[str, Any] | None) -> dict[str, Any]:
    return {k: v for k, v in drop_nulls(dict(spec or {})).items() if v not in ({}, [], "")}


def owned_fields(obj: Mapping[str, Any]) -> Any:
    """The comparable projection of the fields kaiwo-ctrl owns on ``obj``."""
    kind = obj.get("kind")
    if kind == CLUSTER_QUEUE:
        return normalize_cluster_queue_spec(obj.get("spec"))
    if kind == RESOURCE_FLAVOR:
        return _drop_empty(obj.get("spec"))
    if kind == LOCAL_QUEUE:
        return (obj.get("spec") or {}).get("clusterQueue")
    if kind == WORKLOAD_PRIORITY_CLASS:
        return (obj.get("value"), obj.get("description") or "")
    if kind == TOPOLOGY:
        return drop_nulls((obj.get("spec") or {}).get("levels") or [])
    return drop_nulls(obj.get("spec"))


def immutable_change(desired: Mapping[str, Any], existing: Mapping[str, Any]) -> str | None:
    kind = desired.get("kind")
    if kind == TOPOLOGY and owned_fields(desired) != owned_fields(existing):
        return "levels changed (immutable)"
    if kind == LOCAL_QUEUE and owned_fields(desired) != owned_fields(existing):
        return "clusterQueue changed (immutable)"
    if kind == RESOURCE_FLAVOR:
        old = _drop_empty(existing.get("spec"))
        new = _drop_empty(desired.get("spec"))
        if old.get("topologyName"):
            for key in ("topologyName", "nodeLabels", "tolerations"):
                if old.get(key) != new.get(key):
                    return f"{key} changed (immutable once topologyName is set)"
    return None



def metadata_changes(desired: Mapping[str, Any], existing: Mapping[str, Any]) -> list[str]:
    want = desired.get("metadata") or {}
    have = existing.get("metadata") or {}
    changes = []
    have_labels = have.get("labels") or {}
    if any(have_labels.get(k) != v for k, v in (want.get("labels") or {}).items()):
        changes.append("labels")
    have_annotations = have.get("annotations") or {}
    if any(have_annotations.get(k) != v for k, v in (want.get("annotations") or {}).items()):
        changes.append("annotations")
    have_uids = {ref.get("uid") for ref in have.get("ownerReferences") or []}
    if any(ref.get("uid") not in have_uids for ref in want.get("ownerReferences") or []):
        changes.append("owner reference")
    return changes


def merged_update(desired: Mapping[str, Any], existing: Mapping[str, Any]) -> dict[str, Any]:
    """The existing object with our labels, owner references and owned fields applied."""
    obj = copy.deepcopy(dict(existing))
    obj["apiVersion"] = desired.get("apiVersion", obj.get("apiVersion"))
    obj["kind"] = desired["kind"]
    meta = obj.setdefault("metadata", {})
    want = desired.get("metadata") or {}
    meta["labels"] = {**(meta.get("labels") or {}), **(want.get("labels") or {})}
    if want.get("annotations"):
        meta["annotations"] = {**(meta.get("annotations") or {}), **want["annotations"]}
    refs = [dict(r) for r in meta.get("ownerReferences") or []]
    for ref in want.get("ownerReferences") or []:
        refs = [r for r in refs if r.get("uid") != ref.get("uid")]
        ref = dict(ref)
        if ref.get("controller") and any(r.get("controller") for r in refs):
            ref["controller"] = False  # only one controller reference is allowed
        refs.append(ref)
    if refs:
        meta["ownerReferences"] = refs
    kind = desired["kind"]
    if kind == WORKLOAD_PRIORITY_CLASS:
        obj["value"] = desired.get("value")
        if desired.get("description"):
            obj["description"] = desired["description"]
        else:
            obj.pop("description", None)
    elif kind == LOCAL_QUEUE:
        obj.setdefault("spec", {})["clusterQueue"] = desired["spec"]["clusterQueue"]
    else:
        obj["spec"] = copy.deepcopy(desired.get("spec") or {})
    return obj
