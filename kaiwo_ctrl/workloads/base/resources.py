"""Container resource requirements: the per-role template and its
merge into main and init containers."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kaiwo_ctrl.runtime.objects.quantity import QuantityError, format_gi, parse_quantity

from .gpu import GPU_RESOURCE_KEYS

CPU_PER_GPU = 4
MEMORY_GI_PER_GPU = 32
DEFAULT_CPU = "2"
DEFAULT_MEMORY = "16Gi"
#: The only keys ``spec.resources`` hands to init containers.
INIT_CONTAINER_KEYS = ("cpu", "memory", "ephemeral-storage")


def _is_gpu_key(key: str, gpu_key: str) -> bool:
    return key == gpu_key or key in GPU_RESOURCE_KEYS


def resource_template(
    spec_resources: Mapping[str, Any] | None,
    *,
    gpu_key: str,
    gpus_per_replica: int,
    generated: bool,
    head_memory: str | None = None,
) -> dict[str, dict[str, str]]:
    """Build the template ``T`` for one pod role.

    ``head_memory`` marks the Ray head role: no GPUs, memory request and limit
    forced to that value. ``generated`` means the operator generated the
    underlying spec (no user job/deployment/rayJob/rayService).
    """
    src = spec_resources or {}
    t: dict[str, dict[str, str]] = {}
    for part in ("limits", "requests"):
        t[part] = {k: str(v) for k, v in (src.get(part) or {}).items() if not _is_gpu_key(k, gpu_key)}
    g = gpus_per_replica
    if head_memory is not None:
        g = 0
        t["limits"]["memory"] = head_memory
        t["requests"]["memory"] = head_memory
    if g > 0:
        t["limits"][gpu_key] = str(g)
        t["requests"][gpu_key] = str(g)
    if g > 0 and generated:
        for part in ("limits", "requests"):
            t[part]["cpu"] = str(CPU_PER_GPU * g)
            t[part]["memory"] = format_gi(MEMORY_GI_PER_GPU * g)
    else:
        for part in ("limits", "requests"):
            t[part].setdefault("cpu", str(CPU_PER_GPU * g) if g > 0 else DEFAULT_CPU)
            t[part].setdefault("memory", format_gi(MEMORY_GI_PER_GPU * g) if g > 0 else DEFAULT_MEMORY)
    return t


def _quantity(value: Any):
    try:
        return parse_quantity(value)
    except QuantityError:
        return None


def _fill(section: dict[str, Any], defaults: Mapping[str, str], gpu_key: str) -> set[str]:
    """Set each of ``defaults`` that ``section`` (limits or requests) leaves unset, and always the GPU key;
    return the keys that were unset."""
    defaulted = set()
    for key, value in defaults.items():
        if key not in section:
            defaulted.add(key)
            section[key] = value
        elif key == gpu_key:
            section[key] = value
    return defaulted


def apply_to_container(container: dict[str, Any], template: Mapping[str, Mapping[str, str]], gpu_key: str) -> None:
    """Fill the container's requests/limits from ``template`` where it leaves a
    key unset; the GPU key is always written.

    Difference from the reference: when a defaulted value would leave a
    request above its limit (the reference produced e.g. ``limits.cpu: 150m``
    with a defaulted ``requests.cpu: 2``, which the API server rejects), the
    defaulted side is aligned to the value the user wrote: a defaulted request
    is lowered to the limit, a defaulted limit is raised to the request. Values
    the user wrote are never changed.
    """
    resources = container.setdefault("resources", {})
    limits = resources.setdefault("limits", {})
    requests = resources.setdefault("requests", {})
    defaulted_limits = _fill(limits, template.get("limits", {}), gpu_key)
    defaulted_requests = _fill(requests, template.get("requests", {}), gpu_key)
    for key in set(requests) & set(limits):
        req, lim = _quantity(requests[key]), _quantity(limits[key])
        if req is None or lim is None or req <= lim:
            continue
        if key in defaulted_requests:
            requests[key] = limits[key]
        elif key in defaulted_limits:
            limits[key] = requests[key]
    if not limits:
        resources.pop("limits")
    if not requests:
        resources.pop("requests")


def apply_to_init_container(container: dict[str, Any], spec_resources: Mapping[str, Any] | None) -> None:
    """Init containers get only cpu/memory/ephemeral-storage of ``spec.resources``
    itself, where they leave them unset (no GPU keys, no derived defaults)."""
    src = spec_resources or {}
    for part in ("limits", "requests"):
        values = {k: str(v) for k, v in (src.get(part) or {}).items() if k in INIT_CONTAINER_KEYS}
        if not values:
            continue
        target = container.setdefault("resources", {}).setdefault(part, {})
        for key, value in values.items():
            target.setdefault(key, value)


def container_requests_gpu(container: Mapping[str, Any], gpu_key: str) -> bool:
    res = container.get("resources") or {}
    for part in ("limits", "requests"):
        for key, value in (res.get(part) or {}).items():
            if _is_gpu_key(key, gpu_key):
                q = _quantity(value)
                if q is None or q > 0:
                    return True
    return False
