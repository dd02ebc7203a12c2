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
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from kaiwo_ctrl.runtime.objects.quantity import QuantityError, parse_quantity
from kaiwo_ctrl.runtime.objects.fielderrors import FieldError

from kaiwo_ctrl.serving.model.config import SystemConfig

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


def profile_ref(spec_value: str | None, config: SystemConfig) -> tuple[str, int]:
    """``spec.resourceProfile`` as (profile name, count); a FieldError on it
    when it is missing, malformed or names no profile of ``config``."""
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
    if name not in config.resource_profiles:
        known = ", ".join(sorted(config.resource_profiles)[:20])
        raise FieldError(field_path, f"unknown resource profile {name!r} (known: {known})", spec_value)
    return name, count


def check_cache_profile(value: str | None, config: SystemConfig) -> None:
    """A FieldError on ``spec.cacheProfile`` when it names no cache profile of ``config``."""
    if value and value not in config.cache_profiles:
        known = ", ".join(sorted(config.cache_profiles)[:20]) or "none configured"
        raise FieldError("spec.cacheProfile", f"unknown cache profile {value!r} (known: {known})", value)


def profile_errors(spec: Mapping[str, Any], config: SystemConfig) -> list[FieldError]:
    """The Model's profile names against ``config``: the checks the Pod build
    makes, for admission. A missing ``resourceProfile`` is accepted there
    (KubeAI accepts it; the Model then reports ConfigValid=False)."""
    out: list[FieldError] = []
    if spec.get("resourceProfile"):
        try:
            profile_ref(spec["resourceProfile"], config)
        except FieldError as e:
            out.append(e)
    try:
        check_cache_profile(spec.get("cacheProfile"), config)
    except FieldError as e:
        out.append(e)
    return out


def resolve_profile(spec_value: str | None, config: SystemConfig) -> Profile:
    name, count = profile_ref(spec_value, config)
    prof = config.resource_profiles[name]
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
