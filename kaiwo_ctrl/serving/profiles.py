"""Resource profiles: ``spec.resourceProfile = "<profile>:<count>"``.

Every request and limit of the profile is multiplied by ``count``; node
selector, affinity, tolerations, scheduler and runtime class are copied to
the Pod. The image is ``spec.image`` if set, else the engine's image named by
the profile's ``imageName`` (falling back to ``default``).

KubeAI accepts a count of 0 or below and builds Pods that request nothing
[quirk]; here the count must be a positive integer.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from kaiwo_ctrl.quantity import QuantityError, parse_quantity
from kaiwo_ctrl.runtime.fielderrors import FieldError

from .config import SystemConfig

_NUMBER = re.compile(r"^([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(.*)$")
POD_FIELDS = ("nodeSelector", "affinity", "tolerations", "schedulerName", "runtimeClassName")


@dataclass(frozen=True)
class Profile:
    name: str
    count: int
    requests: dict[str, str] = field(default_factory=dict)
    limits: dict[str, str] = field(default_factory=dict)
    pod_fields: dict[str, Any] = field(default_factory=dict)
    image_name: str = "default"


def multiply(quantity: Any, count: int, where: str) -> str:
    """``quantity × count`` keeping the unit suffix (``2Gi × 3 = 6Gi``, ``500m × 3 = 1500m``)."""
    text = str(quantity).strip()
    try:
        parse_quantity(text)
    except QuantityError:
        raise FieldError(where, f"invalid quantity {text!r} in the system config", text) from None
    m = _NUMBER.match(text)
    if not m or "e" in m.group(2).lower():
        return str(parse_quantity(text) * count)
    value = Decimal(m.group(1)) * count
    number = str(value.to_integral_value()) if value == value.to_integral_value() else format(value.normalize(), "f")
    return number + m.group(2)


def resolve_profile(spec_value: str | None, config: SystemConfig) -> Profile:
    field_path = "spec.resourceProfile"
    if not spec_value:
        raise FieldError(field_path, 'is required: "<profile>:<count>", e.g. cpu:1')
    parts = spec_value.split(":")
    if len(parts) != 2 or not parts[0]:
        raise FieldError(field_path, f'must be "<profile>:<count>", got {spec_value!r}', spec_value)
    name, count_text = parts
    try:
        count = int(count_text)
    except ValueError:
        raise FieldError(field_path, f"count {count_text!r} is not an integer", spec_value) from None
    if count < 1:
        raise FieldError(field_path, f"count must be at least 1, got {count}", spec_value)
    prof = config.resource_profiles.get(name)
    if prof is None:
        known = ", ".join(sorted(config.resource_profiles)[:20])
        raise FieldError(field_path, f"unknown resource profile {name!r} (known: {known})", spec_value)
    where = f"resourceProfiles.{name}"
    return Profile(
        name=name,
        count=count,
        requests={k: multiply(v, count, f"{where}.requests.{k}") for k, v in (prof.get("requests") or {}).items()},
        limits={k: multiply(v, count, f"{where}.limits.{k}") for k, v in (prof.get("limits") or {}).items()},
        pod_fields={k: copy.deepcopy(prof[k]) for k in POD_FIELDS if prof.get(k)},
        image_name=prof.get("imageName") or "default",
    )


def resolve_image(engine: str, spec_image: str | None, profile: Profile, config: SystemConfig) -> str:
    if spec_image:
        return spec_image
    images = config.images.get(engine) or {}
    image = images.get(profile.image_name) or images.get("default")
    if not image:
        raise FieldError("spec.engine", f"no default server image for engine {engine} in modelServers.{engine}.images")
    return image
