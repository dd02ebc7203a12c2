"""Spec errors: contradictions and invalid values found before anything is
built, each naming the offending field so the status can point at it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from api.kaiwo.download import HuggingFaceDownloadItem, ObjectStorageDownloadSpec
from kaiwo_ctrl.runtime.objects.quantity import QuantityError, parse_quantity

from ..base.gpu import KNOWN_VENDORS
from ..base.kaiwoobject import KaiwoObject
from ..base.timing import parse_duration
from ..base.world import World
from .podtemplate import EntrypointError, normalize_entrypoint, parse_entrypoint
from .storage import OBJECT_DOWNLOAD_KINDS

#: Linux MAX_ARG_STRLEN (32 pages of 4 KiB): the longest single argv string,
#: terminating NUL included. The entrypoint script is passed as one argument.
MAX_ARG_STRLEN = 32 * 4096
MAX_ENTRYPOINT_BYTES = MAX_ARG_STRLEN - 1


@dataclass(frozen=True)
class SpecError:
    """Why the workload's children cannot be built. ``field`` is a dotted path
    into the object (``spec.gpusPerReplica``) or into KaiwoConfig."""

    field: str
    reason: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


def spec_error_from_validation(exc: ValidationError, prefix: str = "") -> SpecError:
    err = exc.errors(include_url=False)[0]
    loc = ".".join(str(p) if not isinstance(p, int) else f"[{p}]" for p in err["loc"]).replace(".[", "[")
    path = f"{prefix}.{loc}" if prefix and loc else (prefix or loc)
    return SpecError(path, "InvalidValue", err["msg"])


def _quantity_errors(values: Any, path: str, positive: bool = False) -> list[SpecError]:
    out = []
    for key, value in (values or {}).items():
        try:
            q = parse_quantity(value)
        except QuantityError:
            out.append(SpecError(f"{path}.{key}", "InvalidQuantity", f"{value!r} is not a valid quantity"))
            continue
        if q < 0 or (positive and q == 0):
            out.append(SpecError(f"{path}.{key}", "InvalidQuantity", f"{value!r} must be greater than zero"))
    return out


def _pod_containers(doc: dict | None, *path: str) -> list | None:
    cur: Any = doc
    for p in path:
        if not isinstance(cur, dict):
            return None
        cur = cur.get(p)
    return cur


def _gpu_errors(obj: KaiwoObject, world: World) -> list[SpecError]:
    """GPU and replica counts: signs, consistency, and a vendor some node offers."""
    errors: list[SpecError] = []
    if obj.gpus < 0:
        errors.append(SpecError("spec.gpus", "InvalidValue", "must not be negative"))
    if obj.gpus_per_replica < 0:
        errors.append(SpecError("spec.gpusPerReplica", "InvalidValue", "must not be negative"))
    if obj.replicas is not None and obj.replicas < 0:
        errors.append(SpecError("spec.replicas", "InvalidValue", "must not be negative"))
    if obj.gpus_per_replica > 0 and (not obj.replicas_given or not obj.replicas):
        errors.append(
            SpecError(
                "spec.gpusPerReplica",
                "ReplicasRequired",
                "gpusPerReplica is set but replicas is not: set replicas as well",
            )
        )
    if obj.gpus > 0 and obj.gpus_per_replica > obj.gpus:
        errors.append(
            SpecError(
                "spec.gpusPerReplica",
                "InvalidValue",
                f"{obj.gpus_per_replica}: must not be greater than spec.gpus ({obj.gpus})",
            )
        )
    total_requested = max(obj.gpus, (obj.replicas or 0) * obj.gpus_per_replica)
    vendor = obj.gpu_vendor.lower()
    if total_requested > 0 and vendor not in KNOWN_VENDORS:
        pools = [
            ((n.get("metadata") or {}).get("labels") or {}).get("kaiwo/nodepool", "") for n in world.nodes or ()
        ]
        if not any(p.split("-")[0].lower() == vendor for p in pools if p):
            errors.append(
                SpecError(
                    "spec.gpuVendor",
                    "UnknownGpuVendor",
                    f"unknown GPU vendor {obj.gpu_vendor!r}: use amd or nvidia (no node pool offers this vendor)",
                )
            )
    return errors


def validate(obj: KaiwoObject, world: World) -> list[SpecError]:
    """Static checks of the spec against itself and KaiwoConfig (no capacity).
    A reconcile runs them once, into its :class:`~.plan.WorkloadPlan`."""
    spec = obj.spec
    errors = _gpu_errors(obj, world)

    for part in ("limits", "requests"):
        errors += _quantity_errors((spec.get("resources") or {}).get(part), f"spec.resources.{part}")

    if spec.get("duration"):
        try:
            parse_duration(spec["duration"])
        except ValueError as exc:
            errors.append(SpecError("spec.duration", "InvalidDuration", str(exc)))

    for i, sv in enumerate(spec.get("secretVolumes") or []):
        for key in ("name", "secretName", "mountPath"):
            if not sv.get(key):
                errors.append(SpecError(f"spec.secretVolumes[{i}].{key}", "Required", f"{key} is required"))

    if refused := world.priority.check(obj.doc):
        errors.append(SpecError(refused[0], "PriorityClassNotAllowed", refused[1]))  # the admin's allow-list
    errors += _entrypoint_errors(obj)
    errors += _underlying_spec_errors(obj)
    errors += _storage_errors(obj)

    if obj.is_ray:
        try:
            if parse_quantity(world.settings.head_pod_memory) <= 0:
                raise QuantityError("not positive")
        except QuantityError:
            errors.append(
                SpecError(
                    "KaiwoConfig.spec.ray.headPodMemory",
                    "InvalidQuantity",
                    f"{world.settings.head_pod_memory!r} is not a positive quantity",
                )
            )
    return errors


def _entrypoint_errors(obj: KaiwoObject) -> list[SpecError]:
    text = obj.entrypoint
    if obj.is_ray:
        if not obj.is_job:
            return []  # a Ray service ignores entrypoint (serveConfigV2 instead)
        user = obj.user_spec or {}
        script = normalize_entrypoint(text)
        if not script and not (user.get("spec") or {}).get("entrypoint"):
            return [SpecError("spec.entrypoint", "EntrypointRequired", "a Ray job needs an entrypoint")]
        return _entrypoint_size_errors([script] if script else [])
    if not text:
        return []
    try:
        args = parse_entrypoint(text)
    except EntrypointError as exc:
        return [SpecError("spec.entrypoint", "InvalidEntrypoint", str(exc))]
    return _entrypoint_size_errors(args)


def _entrypoint_size_errors(args: list[str]) -> list[SpecError]:
    """The longest argument the entrypoint becomes must fit in MAX_ARG_STRLEN."""
    longest = max((len(a.encode()) for a in args), default=0)
    if longest > MAX_ENTRYPOINT_BYTES:
        return [
            SpecError(
                "spec.entrypoint",
                "EntrypointTooLong",
                f"may have at most {MAX_ENTRYPOINT_BYTES} bytes in one argument "
                f"(the kernel's MAX_ARG_STRLEN), has {longest}",
            )
        ]
    return []


def _underlying_spec_errors(obj: KaiwoObject) -> list[SpecError]:
    user = obj.user_spec
    if user is None:
        return []
    if obj.is_ray:
        return []
    key = "job" if obj.is_job else "deployment"
    containers = _pod_containers(user, "spec", "template", "spec", "containers")
    if not containers:
        return [
            SpecError(
                f"spec.{key}.spec.template.spec.containers",
                "Required",
                f"the supplied {key} has no containers",
            )
        ]
    return []


def _storage_errors(obj: KaiwoObject) -> list[SpecError]:
    storage = obj.storage()
    if storage is None:
        return []
    out: list[SpecError] = []
    data = storage.get("data") or {}
    hf = storage.get("huggingFace") or {}
    for section, doc in (("data", data), ("huggingFace", hf)):
        size = doc.get("storageSize")
        if size:
            out += _quantity_errors({"storageSize": size}, f"spec.storage.{section}", positive=True)
    download = {k: v for k, v in (data.get("download") or {}).items() if k in OBJECT_DOWNLOAD_KINDS}
    if download:
        try:
            ObjectStorageDownloadSpec.model_validate(download)
        except ValidationError as exc:
            out.append(spec_error_from_validation(exc, "spec.storage.data.download"))
    for i, repo in enumerate(hf.get("preCacheRepos") or []):
        try:
            HuggingFaceDownloadItem.model_validate(repo)
        except ValidationError as exc:
            out.append(spec_error_from_validation(exc, f"spec.storage.huggingFace.preCacheRepos[{i}]"))
    return out
