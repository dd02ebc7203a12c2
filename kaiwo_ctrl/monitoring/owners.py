"""Which workload a GPU Pod belongs to, as pure functions: the root of its controller
owner chain, the GPUs it asks for, and the GpuWorkload record's name.

The reclaim runnable (:mod:`.reclaimer`) hands in a ``lookup`` that reads owners from
the API server (memoised per pass); nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

#: Owner kinds the operator may read and delete (RBAC in kaiwo_ctrl/rbac.py). An owner of any
#: other kind (a CronJob, a DaemonSet, a custom controller) leaves the Pod untracked: reclaiming
#: below such an owner would only be undone by it.
OWNER_KINDS: frozenset[tuple[str, str]] = frozenset({
    ("batch", "Job"),
    ("apps", "Deployment"),
    ("apps", "ReplicaSet"),
    ("apps", "StatefulSet"),
    ("ray.io", "RayCluster"),
    ("ray.io", "RayJob"),
    ("ray.io", "RayService"),
    ("kaiwo.silogen.ai", "KaiwoJob"),
    ("kaiwo.silogen.ai", "KaiwoService"),
    ("workload.codeflare.dev", "AppWrapper"),
    ("", "Pod"),
})
#: Device-plugin resource names counted as GPUs (AMD incl. partitions, NVIDIA incl. MIG).
GPU_RESOURCE_PREFIXES = ("amd.com/", "nvidia.com/")
MAX_OWNER_DEPTH = 10
#: the opt-in annotations (kaiwo.silogen.ai/gpu-preemption.*)
ANNOTATION_PREFIX = "kaiwo.silogen.ai/gpu-preemption."
NAME_MAX = 253

#: ``await lookup(api_version, kind, namespace, name)`` -> the object, or None when it does not exist.
Lookup = Callable[[str, str, str, str], Awaitable[Mapping[str, Any] | None]]


class OwnerUnresolvable(Exception):
    """The chain cannot be followed: an unsupported kind, a loop, or too deep."""


@dataclass(frozen=True)
class RootOwner:
    api_version: str
    kind: str
    name: str
    uid: str
    namespace: str
    chain: str  # "Pod/a -> ReplicaSet/b -> Deployment/c"
    obj: Mapping[str, Any]

    def ref(self) -> dict[str, str]:
        return {"apiVersion": self.api_version, "kind": self.kind, "name": self.name, "uid": self.uid}


def group_of(api_version: str) -> str:
    return api_version.rpartition("/")[0] if "/" in api_version else ""


def supported(api_version: str, kind: str) -> bool:
    return (group_of(api_version), kind) in OWNER_KINDS


def controller_ref(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or ():
        if isinstance(ref, Mapping) and ref.get("controller") is True:
            return ref
    return None


async def resolve_root(start: Mapping[str, Any], lookup: Lookup) -> RootOwner | None:
    """Walk the controller owner references from ``start`` (a Pod, or the object a Kueue
    Workload belongs to) to the object that has none.

    None when an owner on the way no longer exists (or is another object of that name: UID
    mismatch); :class:`OwnerUnresolvable` for an unsupported kind, a loop or a chain deeper
    than ``MAX_OWNER_DEPTH``. An object with no controller is its own root.
    """
    meta = start.get("metadata") or {}
    namespace = meta.get("namespace") or ""
    obj, api_version, kind = start, str(start.get("apiVersion") or "v1"), str(start.get("kind") or "Pod")
    chain = [f"{kind}/{meta.get('name')}"]
    seen = {meta.get("uid")}
    for _ in range(MAX_OWNER_DEPTH):
        ref = controller_ref(obj)
        if ref is None:
            m = obj.get("metadata") or {}
            return RootOwner(api_version, kind, m.get("name") or "", m.get("uid") or "", namespace, " -> ".join(chain), obj)
        api_version, kind, name, uid = (str(ref.get(k) or "") for k in ("apiVersion", "kind", "name", "uid"))
        if not supported(api_version, kind):
            raise OwnerUnresolvable(f"owner {kind}/{name} ({api_version}) is not a kind the operator reclaims")
        if uid in seen:
            raise OwnerUnresolvable(f"owner loop at {kind}/{name}")
        seen.add(uid)
        chain.append(f"{kind}/{name}")
        found = await lookup(api_version, kind, namespace, name)
        if found is None or ((found.get("metadata") or {}).get("uid") or "") != uid:
            return None
        obj = found
    raise OwnerUnresolvable(f"owner chain deeper than {MAX_OWNER_DEPTH}")


def _quantity(value: Any) -> int:
    try:
        return max(0, int(str(value)))
    except (TypeError, ValueError):
        return 0  # extended resources are whole numbers; anything else asks for none


def _container_gpus(container: Mapping[str, Any]) -> dict[str, int]:
    res = container.get("resources") or {}
    out: dict[str, int] = {}
    # an extended resource's request equals its limit; a container may write only the limit
    for section in (res.get("limits") or {}, res.get("requests") or {}):
        for name, qty in section.items():
            if isinstance(name, str) and name.startswith(GPU_RESOURCE_PREFIXES):
                out[name] = _quantity(qty)
    return {k: v for k, v in out.items() if v > 0}


def pod_gpus(pod_spec: Mapping[str, Any] | None) -> dict[str, int]:
    """GPUs a Pod spec asks for, per resource name: the sum over its containers, or the largest
    init container's when that is more (the scheduler's effective request)."""
    spec = pod_spec or {}
    total: dict[str, int] = {}
    for c in spec.get("containers") or ():
        for name, n in _container_gpus(c).items():
            total[name] = total.get(name, 0) + n
    for c in spec.get("initContainers") or ():
        for name, n in _container_gpus(c).items():
            total[name] = max(total.get(name, 0), n)
    return total


def add_gpus(into: dict[str, int], more: Mapping[str, int], times: int = 1) -> dict[str, int]:
    for name, n in more.items():
        into[name] = into.get(name, 0) + n * times
    return into


def template_gpus(obj: Mapping[str, Any]) -> dict[str, int]:
    """GPUs an owner's Pods will ask for when none exist yet (a Job Kueue holds suspended):
    ``replicas`` (Deployment, StatefulSet, ReplicaSet) or ``parallelism`` (Job) times the template."""
    spec = obj.get("spec") or {}
    template = ((spec.get("template") or {}).get("spec")) if isinstance(spec.get("template"), Mapping) else None
    if not isinstance(template, Mapping):
        return {}
    count = spec.get("parallelism") if obj.get("kind") == "Job" else spec.get("replicas")
    times = count if isinstance(count, int) and not isinstance(count, bool) and count >= 0 else 1
    return add_gpus({}, pod_gpus(template), times)


def record_name(kind: str, name: str, uid: str) -> str:
    """``<kind>-<name>-<uid[:8]>`` as upstream names it; the name part is shortened when the
    whole would pass the 253-character object-name limit (upstream would fail to create it)."""
    suffix = f"-{uid[:8]}"
    head = f"{kind.lower()}-{name}"[: NAME_MAX - len(suffix)].rstrip("-.")
    return head + suffix


def merge_annotations(prefix: str, *layers: Mapping[str, str] | None) -> dict[str, str]:
    """The ``prefix``-ed annotations of each layer, later layers winning (namespace, then workload)."""
    merged: dict[str, str] = {}
    for layer in layers:
        for k, v in (layer or {}).items():
            if isinstance(k, str) and k.startswith(prefix) and isinstance(v, str):
                merged[k] = v
    return merged


def trim_gpu_pod(obj: dict) -> dict:
    """Cached Pods: identity and owners; spec and status only for Pods that ask for GPUs."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    gpus = pod_gpus(spec)
    keep = ("name", "namespace", "uid", "resourceVersion") + (("ownerReferences", "deletionTimestamp") if gpus else ())
    out: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "metadata": {k: meta[k] for k in keep if k in meta}}
    if gpus:
        ann = merge_annotations(ANNOTATION_PREFIX, meta.get("annotations"))  # a bare Pod is its own root
        if ann:
            out["metadata"]["annotations"] = ann
        status = obj.get("status") or {}
        conds = [c for c in status.get("conditions") or () if c.get("type") == "PodScheduled"]
        out["spec"] = {"containers": [{"name": "gpus", "resources": {"limits": {k: str(v) for k, v in gpus.items()}}}]}
        out["status"] = {"phase": status.get("phase"), "conditions": conds}
    return out



__all__ = [
    "trim_gpu_pod",
    "GPU_RESOURCE_PREFIXES",
    "OWNER_KINDS",
    "Lookup",
    "OwnerUnresolvable",
    "RootOwner",
    "add_gpus",
    "controller_ref",
    "merge_annotations",
    "pod_gpus",
    "record_name",
    "resolve_root",
    "group_of",
    "supported",
    "template_gpus",
]
