"""Admission checks for our own kinds: what the CRD schema and CEL cannot say.

The checks are the reconcilers' own (``workloads.validation.validate``,
``queues.validate.validate``), called here so the webhook and the status can
never disagree; the webhook only refuses earlier. The few checks below that
have no home in a domain module yet are pure functions, ready to move there:

* :func:`gpus_per_replica_errors` -- ``gpusPerReplica`` larger than ``gpus``;
* :func:`entrypoint_size_errors` -- an entrypoint argument over the kernel's
  ``MAX_ARG_STRLEN``;
* :func:`model_profile_errors` -- a Model's ``resourceProfile`` /
  ``cacheProfile`` that names no profile of the model configuration (the
  configuration comes in through a ``profiles`` callable);
* :func:`aim_namespace_config_errors` -- half-filled Secret references.

Every refusal is a :class:`FieldError` naming the field path.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from kaiwo_ctrl.queues.validate import validate as validate_queue_config
from kaiwo_ctrl.runtime.fielderrors import FieldError
from kaiwo_ctrl.workloads.kaiwoobject import KaiwoObject
from kaiwo_ctrl.workloads.podtemplate import EntrypointError, normalize_entrypoint, parse_entrypoint
from kaiwo_ctrl.workloads.validation import spec_error_from_validation
from kaiwo_ctrl.workloads.validation import validate as validate_workload_spec
from kaiwo_ctrl.workloads.world import World

#: Linux MAX_ARG_STRLEN (32 pages of 4 KiB): the longest single argv string,
#: terminating NUL included. The entrypoint script is passed as one argument.
MAX_ARG_STRLEN = 32 * 4096
MAX_ENTRYPOINT_BYTES = MAX_ARG_STRLEN - 1


@dataclass(frozen=True)
class ModelProfiles:
    """Profile names of the current model (system) configuration."""

    resource_profiles: frozenset[str]
    cache_profiles: frozenset[str]


#: Returns the current profiles, or ``None`` when no model configuration is known
#: (then profile names are not checked at admission; the reconciler still is).
ProfilesLookup = Callable[[], "ModelProfiles | None"]


def profiles_of(source: Any) -> ProfilesLookup:
    """A lookup over a live model-config source: anything whose ``current``
    has ``resource_profiles`` and ``cache_profiles`` mappings (re-read on
    every call, so a reloaded configuration applies at once)."""

    def lookup() -> ModelProfiles:
        cfg = source.current
        return ModelProfiles(frozenset(cfg.resource_profiles), frozenset(cfg.cache_profiles))

    return lookup


def gpus_per_replica_errors(spec: Mapping[str, Any]) -> list[FieldError]:
    gpus, per = spec.get("gpus") or 0, spec.get("gpusPerReplica") or 0
    if isinstance(gpus, int) and isinstance(per, int) and gpus > 0 and per > gpus:
        return [FieldError("spec.gpusPerReplica", f"Invalid value: {per}: must not be greater than spec.gpus ({gpus})", per)]
    return []


def entrypoint_size_errors(text: str | None, ray: bool) -> list[FieldError]:
    """The longest argument the entrypoint becomes must fit in MAX_ARG_STRLEN."""
    if not text:
        return []
    try:
        args = [normalize_entrypoint(text)] if ray else parse_entrypoint(text)
    except EntrypointError:
        return []  # reported by the shared validation
    longest = max(len(a.encode()) for a in args)
    if longest > MAX_ENTRYPOINT_BYTES:
        return [
            FieldError(
                "spec.entrypoint",
                f"Too long: may have at most {MAX_ENTRYPOINT_BYTES} bytes in one argument "
                f"(the kernel's MAX_ARG_STRLEN), has {longest}",
            )
        ]
    return []


def _invalid(path: str, value: Any, detail: str) -> FieldError:
    shown = value if not isinstance(value, str) or len(value) <= 64 else value[:61] + "..."
    return FieldError(path, f"Invalid value: {json.dumps(shown)}: {detail}", value)


def workload_errors(doc: Mapping[str, Any], world: World) -> list[FieldError]:
    """KaiwoJob / KaiwoService: the reconciler's spec validation, plus two checks of ours.

    Problems with KaiwoConfig (paths outside the object) are left to the
    reconciler's status: they are not the submitter's to fix.
    """
    try:
        obj = KaiwoObject.of(doc)
    except ValidationError as exc:
        err = spec_error_from_validation(exc)
        return [FieldError(err.field, f"Invalid value: {err.message}")]
    out = [
        FieldError(e.field, f"{'Invalid value' if e.reason != 'Required' else 'Required value'}: {e.message}")
        for e in validate_workload_spec(obj, world)
        if e.field.startswith(("spec", "metadata"))
    ]
    out += gpus_per_replica_errors(obj.spec)
    out += entrypoint_size_errors(obj.entrypoint, obj.is_ray)
    return out


def queue_config_errors(doc: Mapping[str, Any]) -> list[FieldError]:
    return [FieldError(p.path, f"Invalid value: {p.message}") for p in validate_queue_config(doc.get("spec") or {})]


def model_profile_errors(spec: Mapping[str, Any], profiles: ModelProfiles | None) -> list[FieldError]:
    if profiles is None:
        return []
    out: list[FieldError] = []
    rp = spec.get("resourceProfile")
    if rp:
        name, sep, count = str(rp).partition(":")
        if not sep or ":" in count or not re.fullmatch(r"[0-9]+", count):
            out.append(_invalid("spec.resourceProfile", rp, "must be <profile>:<count>, e.g. nvidia-gpu-l4:1"))
        elif name not in profiles.resource_profiles:
            out.append(_invalid("spec.resourceProfile", rp, f"no resource profile {name!r} in the model configuration"
                                f" (known: {', '.join(sorted(profiles.resource_profiles)) or 'none'})"))
    cp = spec.get("cacheProfile")
    if cp and cp not in profiles.cache_profiles:
        out.append(_invalid("spec.cacheProfile", cp, f"no cache profile {cp!r} in the model configuration"
                            f" (known: {', '.join(sorted(profiles.cache_profiles)) or 'none'})"))
    return out


_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def _secret_ref_errors(path: str, ref: Any) -> list[FieldError]:
    if not isinstance(ref, Mapping):
        return []
    out = []
    name, key = ref.get("secretName"), ref.get("secretKey")
    if not name:
        out.append(FieldError(f"{path}.secretName", "Required value: a Secret reference needs secretName"))
    elif len(name) > 253 or not _SUBDOMAIN.match(name):
        out.append(_invalid(f"{path}.secretName", name, "not a valid Secret name (lower-case RFC 1123 subdomain)"))
    if not key:
        out.append(FieldError(f"{path}.secretKey", "Required value: a Secret reference needs secretKey"))
    return out


def _refs(creds: Mapping[str, Any]) -> Iterable[tuple[str, Any]]:
    base = "spec.credentials"
    yield f"{base}.huggingFaceToken", creds.get("huggingFaceToken")
    for list_name, keys in (("s3", ("accessKeyId", "secretAccessKey")), ("gcs", ("applicationCredentials",)),
                            ("azureBlob", ("connectionString",))):
        for i, item in enumerate(creds.get(list_name) or []):
            for key in keys:
                if isinstance(item, Mapping):
                    yield f"{base}.{list_name}[{i}].{key}", item.get(key)


def aim_namespace_config_errors(doc: Mapping[str, Any]) -> list[FieldError]:
    spec = doc.get("spec") or {}
    out: list[FieldError] = []
    for path, ref in _refs(spec.get("credentials") or {}):
        out += _secret_ref_errors(path, ref)
    for i, name in enumerate((spec.get("images") or {}).get("imagePullSecrets") or []):
        if not isinstance(name, str) or len(name) > 253 or not _SUBDOMAIN.match(name):
            out.append(_invalid(f"spec.images.imagePullSecrets[{i}]", name, "not a valid Secret name"))
    gw = spec.get("gateway") or {}
    if gw and bool(gw.get("name")) != bool(gw.get("namespace")):
        missing = "namespace" if gw.get("name") else "name"
        out.append(FieldError(f"spec.gateway.{missing}", "Required value: a gateway reference needs name and namespace"))
    return out


class OwnKindValidator:
    """Dispatch by kind; ``world`` and ``profiles`` give the live cluster view."""

    def __init__(self, world: Callable[[], World], profiles: ProfilesLookup | None = None) -> None:
        self.world = world
        self.profiles = profiles or (lambda: None)

    def errors(self, kind: str, doc: Mapping[str, Any]) -> list[FieldError]:
        if kind in ("KaiwoJob", "KaiwoService"):
            return workload_errors(doc, self.world())
        if kind == "KaiwoQueueConfig":
            return queue_config_errors(doc)
        if kind == "Model":
            return model_profile_errors(doc.get("spec") or {}, self.profiles())
        if kind == "AIMNamespaceConfig":
            return aim_namespace_config_errors(doc)
        return []
