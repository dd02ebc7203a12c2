"""Admission checks for our own kinds: what the CRD schema and CEL cannot say.

Every check is the reconciler's own, called here so the webhook and the
status can never disagree; the webhook only refuses earlier:

* KaiwoJob / KaiwoService: ``workloads.builders.validation.validate`` (quantities, GPU
  vendor, ``gpusPerReplica`` against ``gpus``, entrypoint size, storage, ...);
* KaiwoQueueConfig: ``queues.validate.validate``;
* Model: ``serving.profiles.profile_errors``, against the live model
  configuration (it comes in through a ``profiles`` callable);
* AIMNamespaceConfig: ``aim.validation.spec_errors``.

Every refusal is a :class:`FieldError` naming the field path.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pydantic import ValidationError

from kaiwo_ctrl.aim.validation import spec_errors as aim_spec_errors
from kaiwo_ctrl.queues.validate import validate as validate_queue_config
from kaiwo_ctrl.runtime.objects.fielderrors import FieldError
from kaiwo_ctrl.serving.model.config import SystemConfig
from kaiwo_ctrl.serving.model.profiles import profile_errors
from kaiwo_ctrl.workloads.base.kaiwoobject import KaiwoObject
from kaiwo_ctrl.workloads.builders.validation import spec_error_from_validation
from kaiwo_ctrl.workloads.builders.validation import validate as validate_workload_spec
from kaiwo_ctrl.workloads.base.world import World

#: Returns the current model (system) configuration, or ``None`` when none is
#: known (then profile names are not checked at admission; the reconciler still is).
ProfilesLookup = Callable[[], "SystemConfig | None"]


def profiles_of(source: Any) -> ProfilesLookup:
    """A lookup over a live model-config source (its ``current`` configuration,
    re-read on every call, so a reloaded configuration applies at once)."""
    return lambda: source.current


#: field.ErrorType wording for the reasons that are not "Invalid value".
_FIELD_ERROR_TYPES = {"Required": "Required value", "EntrypointTooLong": "Too long"}


def workload_errors(doc: Mapping[str, Any], world: World) -> list[FieldError]:
    """KaiwoJob / KaiwoService: the reconciler's spec validation.

    Problems with KaiwoConfig (paths outside the object) are left to the
    reconciler's status: they are not the submitter's to fix.
    """
    try:
        obj = KaiwoObject.of(doc)
    except ValidationError as exc:
        err = spec_error_from_validation(exc)
        return [FieldError(err.field, f"Invalid value: {err.message}")]
    return [
        FieldError(e.field, f"{_FIELD_ERROR_TYPES.get(e.reason, 'Invalid value')}: {e.message}")
        for e in validate_workload_spec(obj, world)
        if e.field.startswith(("spec", "metadata"))
    ]


def queue_config_errors(doc: Mapping[str, Any]) -> list[FieldError]:
    return [FieldError(p.path, f"Invalid value: {p.message}") for p in validate_queue_config(doc.get("spec") or {})]


def model_profile_errors(spec: Mapping[str, Any], config: SystemConfig | None) -> list[FieldError]:
    """The Model controller's own profile checks (its ConfigValid=False names the same field)."""
    return [] if config is None else profile_errors(spec, config)


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
            return aim_spec_errors(doc)
        return []
