"""Kubernetes meta types shared by every kind, and schemas for embedded
Kubernetes objects.

* :class:`ObjectMeta` is deliberately loose: the common fields are typed, and
  anything else the apiserver returns (managedFields, ...) is kept as-is so a
  read-modify-write never drops it.
* :class:`Condition` mirrors ``metav1.Condition`` including its validation.
* :class:`KubeObject` is the base of every top-level kind; subclasses set
  GROUP/VERSION/KIND/PLURAL/NAMESPACED.
* ``*_SCHEMA`` constants are partial OpenAPI schemas for embedded core types
  that the Python models keep as plain dicts.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from typing import Any, ClassVar, Literal

from pydantic import ConfigDict

from api.base import ApiModel
from kaiwo_ctrl.runtime.objects.fielderrors import FieldError
from api.fields import field

# --------------------------------------------------------------------------
# Time and duration helpers
# --------------------------------------------------------------------------

#: Go-style duration (``time.ParseDuration`` without sign): ``90s``, ``1h30m``, ``1.5h``, ``0``.
DURATION_PATTERN = r"^(0|([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+)$"
#: The stricter form the KaiwoConfig uses: integer amounts of s, m or h.
SIMPLE_DURATION_PATTERN = r"^([0-9]+(s|m|h))+$"

#: Nanoseconds per unit, as Go's ``time.ParseDuration`` spells them.
_DURATION_UNITS = {"ns": 1, "us": 10**3, "µs": 10**3, "μs": 10**3, "ms": 10**6, "s": 10**9, "m": 60 * 10**9, "h": 3600 * 10**9}
# One amount: digits with an optional fraction (``1``, ``1.5``, ``1.``, ``.5``), then a unit.
_DURATION_PART = re.compile(r"(\d*)(?:\.(\d*))?(ns|us|µs|μs|ms|s|m|h)")
#: Go durations are int64 nanoseconds (about 292 years).
MAX_DURATION_NS = 2**63 - 1


def parse_duration(value: str, path: str = "") -> timedelta:
    """Parse a Go duration (``time.ParseDuration`` without a sign): ``1h30m``,
    ``45s``, ``1.5h``, ``.5h``, ``1.h``, ``0``. This is the one duration parser.

    Raises :class:`~kaiwo_ctrl.runtime.objects.fielderrors.FieldError` (a ``ValueError``)
    naming ``path`` when the text is malformed (blanks, a sign, a missing unit
    are malformed, as in Go) or longer than Go's int64 nanoseconds allow.
    """
    if value == "0":
        return timedelta(0)
    text = value if isinstance(value, str) else ""
    pos, total = 0, 0
    while pos < len(text):
        m = _DURATION_PART.match(text, pos)
        if m is None or not (m.group(1) or m.group(2)):
            break
        whole, frac, unit = m.group(1) or "0", m.group(2) or "", _DURATION_UNITS[m.group(3)]
        total += int(whole) * unit + (int(frac) * unit // 10 ** len(frac) if frac else 0)
        if total > MAX_DURATION_NS:
            raise FieldError(path, f"duration {value!r} is out of range (at most about 2562047h)", value)
        pos = m.end()
    if not text or pos != len(text):
        raise FieldError(path, f"invalid duration {value!r}", value)
    return timedelta(microseconds=total // 1000)


def format_time(moment: datetime) -> str:
    """RFC 3339 with second precision in UTC, as metav1.Time serialises."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: str) -> datetime:
    """Parse an RFC 3339 timestamp as written by the apiserver."""
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def now_time() -> str:
    return format_time(datetime.now(timezone.utc))


# --------------------------------------------------------------------------
# Meta types
# --------------------------------------------------------------------------


class ObjectMeta(ApiModel):
    """Standard object metadata (loose: unknown keys are kept)."""

    model_config = ConfigDict(extra="allow")

    name: str | None = field(None, description="Object name.")
    generate_name: str | None = field(None, description="Prefix for a server-generated name.")
    namespace: str | None = field(None, description="Namespace of a namespaced object.")
    labels: dict[str, str] | None = field(None, description="Labels.")
    annotations: dict[str, str] | None = field(None, description="Annotations.")
    uid: str | None = field(None, description="Server-assigned unique ID.")
    resource_version: str | None = field(None, description="Opaque version for optimistic concurrency.")
    generation: int | None = field(None, description="Sequence number of the desired state.")
    creation_timestamp: str | None = field(None, description="Creation time (RFC 3339).")
    deletion_timestamp: str | None = field(None, description="Deletion request time (RFC 3339).")
    finalizers: list[str] | None = field(None, description="Finalizers.")
    owner_references: list[dict[str, Any]] | None = field(None, description="Owner references.")

    # Dict-style read access by the JSON key (``meta["resourceVersion"]``, ``meta.get("labels", {})``).
    def _as_dict(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")

    def get(self, key: str, default: Any = None) -> Any:
        return self._as_dict().get(key, default)

    def __getitem__(self, key: str) -> Any:
        return self._as_dict()[key]

    def __contains__(self, key: object) -> bool:
        return key in self._as_dict()


CONDITION_TYPE_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
)
CONDITION_REASON_PATTERN = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"


class Condition(ApiModel):
    """One aspect of the object's observed state (metav1.Condition)."""

    type: str = field(
        description="Condition type in CamelCase (or domain/CamelCase).",
        pattern=CONDITION_TYPE_PATTERN,
        max_length=316,
    )
    status: Literal["True", "False", "Unknown"] = field(description="Condition status: True, False or Unknown.")
    observed_generation: int | None = field(
        None,
        description="metadata.generation the condition was computed from.",
        minimum=0,
        fmt="int64",
    )
    last_transition_time: str = field(
        default_factory=now_time,
        description="When the status last changed (RFC 3339).",
        fmt="date-time",
    )
    reason: str = field(
        description="Machine-readable CamelCase reason for the last transition.",
        pattern=CONDITION_REASON_PATTERN,
        min_length=1,
        max_length=1024,
    )
    message: str = field(
        "",
        description="Human-readable details about the last transition; may be empty.",
        max_length=32768,
    )

    #: Required in the CRD even though Python fills them (as in metav1.Condition).
    CRD_REQUIRED: ClassVar[tuple[str, ...]] = ("lastTransitionTime", "message")


class KubeObject(ApiModel):
    """Base of every top-level kind."""

    GROUP: ClassVar[str]
    VERSION: ClassVar[str]
    KIND: ClassVar[str]
    PLURAL: ClassVar[str]
    NAMESPACED: ClassVar[bool]

    api_version: str = field("", description="APIVersion of the object.")
    kind: str = field("", description="Kind of the object.")
    metadata: ObjectMeta = field(default_factory=ObjectMeta, description="Standard object metadata.")

    def model_post_init(self, __context: Any) -> None:
        if not self.api_version:
            self.api_version = self.api_version_str()
        if not self.kind:
            self.kind = self.KIND

    @classmethod
    def api_version_str(cls) -> str:
        return f"{cls.GROUP}/{cls.VERSION}"

    @property
    def name(self) -> str | None:
        return self.metadata.name

    @property
    def namespace(self) -> str | None:
        return self.metadata.namespace


# --------------------------------------------------------------------------
# Partial schemas for embedded Kubernetes types (kept as dicts in Python)
# --------------------------------------------------------------------------

# Kubernetes' quantity syntax with the exponent limited to two digits, so every
# accepted value parses (1e9999999 overflowed the operator's arithmetic).
QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|"
    r"([eE](\+|-)?[0-9]{1,2}))?$"
)

QUANTITY_SCHEMA: dict[str, Any] = {
    "anyOf": [{"type": "integer"}, {"type": "string"}],
    "pattern": QUANTITY_PATTERN,
    "maxLength": 64,
    "x-kubernetes-int-or-string": True,
}

EMBEDDED_OBJECT_SCHEMA: dict[str, Any] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}


def embedded_object(description: str) -> dict[str, Any]:
    """Schema for a complete embedded Kubernetes object or spec kept verbatim."""
    return {"description": description, **EMBEDDED_OBJECT_SCHEMA}


RESOURCE_REQUIREMENTS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "claims": {
            "type": "array",
            "description": "Names of pod resource claims this container uses.",
            "items": {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "description": "Name of a resource claim of the pod."},
                    "request": {"type": "string", "description": "Request name inside that claim."},
                },
                "required": ["name"],
            },
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["name"],
        },
        "limits": {
            "type": "object",
            "description": "Maximum amount of compute resources allowed.",
            "additionalProperties": QUANTITY_SCHEMA,
        },
        "requests": {
            "type": "object",
            "description": "Minimum amount of compute resources required.",
            "additionalProperties": QUANTITY_SCHEMA,
        },
    },
}

ENV_VAR_ITEM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "description": "Variable name."},
        "value": {"type": "string", "description": "Literal value."},
        "valueFrom": {"description": "Source for the value (secret, config map, field or resource ref).", **EMBEDDED_OBJECT_SCHEMA},
    },
    "required": ["name"],
}

LOCAL_OBJECT_REFERENCE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"name": {"type": "string", "description": "Name of the referent.", "default": ""}},
    "x-kubernetes-map-type": "atomic",
}

TAINT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "key": {"type": "string", "description": "Taint key."},
        "value": {"type": "string", "description": "Taint value."},
        "effect": {"type": "string", "description": "NoSchedule, PreferNoSchedule or NoExecute."},
        "timeAdded": {"type": "string", "format": "date-time", "description": "When a NoExecute taint was added."},
    },
    "required": ["effect", "key"],
}

TOLERATION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "key": {"type": "string", "description": "Taint key the toleration applies to; empty matches all keys."},
        "operator": {"type": "string", "description": "Exists or Equal (default)."},
        "value": {"type": "string", "description": "Taint value to match."},
        "effect": {"type": "string", "description": "Taint effect to match; empty matches all effects."},
        "tolerationSeconds": {
            "type": "integer",
            "format": "int64",
            "description": "How long a NoExecute taint is tolerated.",
        },
    },
}
