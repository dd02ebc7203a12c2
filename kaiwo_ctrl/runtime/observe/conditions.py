"""Helpers for ``status.conditions`` lists in the ``metav1.Condition`` shape.

Conditions are plain dicts with the keys ``type``, ``status``,
``observedGeneration``, ``lastTransitionTime``, ``reason`` and ``message``;
a list holds at most one condition per ``type``.

``set_condition`` upserts by type and reports whether anything changed, so a
reconciler can skip a status write that would change nothing. The transition
time is only moved when ``status`` actually flips (or when the condition is
first added); reason/message/observedGeneration updates keep it. Inputs are
checked against the API server's validation rules up front, raising
``ValueError`` that names the offending field, so a bad reason fails in the
reconciler rather than as a rejected status update. Messages are the
exception: they often quote user input, so they are cut to ``MESSAGE_LIMIT``
with a marker instead of raising.

Timestamps are written as RFC 3339 in UTC with second precision and a ``Z``
suffix (``2024-05-01T12:00:00Z``), which is what the API server stores.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime, timezone

__all__ = [
    "STATUSES",
    "set_condition",
    "find_condition",
    "remove_condition",
    "is_true",
    "format_time",
    "MESSAGE_LIMIT",
    "TRUNCATION_MARKER",
    "bound_message",
    "quote_value",
]

STATUSES = ("True", "False", "Unknown")

# Optional DNS-subdomain prefix followed by "/", then a name of letters,
# digits, '-', '_' and '.', beginning and ending alphanumerically.
_TYPE_RE = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
)
_TYPE_MAX = 316
# Starts with a letter; letters, digits, '_', ',' and ':' inside; does not end
# with ',' or ':'.
_REASON_RE = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
_REASON_MAX = 1024
#: Messages are cut to this many characters (far below the API's 32768, so a
#: status stays readable in ``kubectl describe`` and small in the cache).
MESSAGE_LIMIT = 2048
TRUNCATION_MARKER = " ...[truncated]"
#: User-supplied values quoted inside messages are cut to this many characters.
VALUE_LIMIT = 128


def bound_message(message: str, limit: int = MESSAGE_LIMIT) -> str:
    """``message`` cut to at most ``limit`` characters, ending in
    :data:`TRUNCATION_MARKER` when anything was cut."""
    if len(message) <= limit:
        return message
    if limit <= len(TRUNCATION_MARKER):
        return message[:limit]
    return message[: limit - len(TRUNCATION_MARKER)] + TRUNCATION_MARKER


def quote_value(value: object, limit: int = VALUE_LIMIT) -> str:
    """``repr(value)`` for quoting a user-supplied value in a message, cut to
    ``limit`` characters with the marker."""
    return bound_message(repr(value), limit)


_last_formatted: tuple[int, str] = (-1, "")


def format_time(now: datetime) -> str:
    """RFC 3339, UTC, whole seconds, ``Z`` suffix. Naive datetimes are refused.
    (The last second's text is kept: a burst formats the same second often.)"""
    global _last_formatted
    if now.tzinfo is None or now.utcoffset() is None:
        raise ValueError("now: must be timezone-aware (naive datetimes are ambiguous)")
    second = int(now.timestamp() // 1)
    if _last_formatted[0] == second:
        return _last_formatted[1]
    text = now.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    _last_formatted = (second, text)
    return text


def _validate(type_: str, status: str, reason: str, message: str, observed_generation: int) -> None:
    if not isinstance(type_, str) or not type_:
        raise ValueError("type: must be a non-empty string")
    if len(type_) > _TYPE_MAX:
        raise ValueError(f"type: must be at most {_TYPE_MAX} characters, got {len(type_)}")
    if not _TYPE_RE.match(type_):
        raise ValueError(f"type: {type_!r} is not a valid condition type")
    if status not in STATUSES:
        raise ValueError(f"status: must be one of True, False, Unknown, got {status!r}")
    if not isinstance(reason, str) or not reason:
        raise ValueError("reason: is required (1-1024 characters)")
    if len(reason) > _REASON_MAX:
        raise ValueError(f"reason: must be at most {_REASON_MAX} characters, got {len(reason)}")
    if not _REASON_RE.match(reason):
        raise ValueError(
            f"reason: {reason!r} must start with a letter and contain only letters, "
            "digits, '_', ',' or ':' (not ending in ',' or ':')"
        )
    if not isinstance(message, str):
        raise ValueError("message: must be a string")
    if (
        not isinstance(observed_generation, int)
        or isinstance(observed_generation, bool)
        or observed_generation < 0
    ):
        raise ValueError(f"observedGeneration: must be an integer >= 0, got {observed_generation!r}")


def set_condition(
    conditions: list[dict],
    type: str,  # noqa: A002 - mirrors the API field name
    status: str,
    reason: str,
    message: str,
    observed_generation: int,
    now: datetime,
) -> bool:
    """Insert or update the condition of ``type`` in place; return True if changed.

    A message longer than :data:`MESSAGE_LIMIT` is cut, ending in
    :data:`TRUNCATION_MARKER` (a long user value must never make the status
    write itself fail)."""
    _validate(type, status, reason, message, observed_generation)
    message = bound_message(message)
    stamp = format_time(now)
    existing = find_condition(conditions, type)
    if existing is None:
        conditions.append(
            {
                "type": type,
                "status": status,
                "observedGeneration": observed_generation,
                "lastTransitionTime": stamp,
                "reason": reason,
                "message": message,
            }
        )
        return True

    changed = False
    if existing.get("status") != status:
        existing["status"] = status
        existing["lastTransitionTime"] = stamp
        changed = True
    elif not existing.get("lastTransitionTime"):
        existing["lastTransitionTime"] = stamp
        changed = True
    for key, value in (
        ("reason", reason),
        ("message", message),
        ("observedGeneration", observed_generation),
    ):
        if existing.get(key) != value:
            existing[key] = value
            changed = True
    return changed


def find_condition(conditions: Sequence[dict] | None, type: str) -> dict | None:  # noqa: A002
    """The condition of ``type``, or None."""
    for cond in conditions or ():
        if cond.get("type") == type:
            return cond
    return None


def remove_condition(conditions: list[dict], type: str) -> bool:  # noqa: A002
    """Remove every condition of ``type`` in place; True if one was removed."""
    before = len(conditions)
    conditions[:] = [c for c in conditions if c.get("type") != type]
    return len(conditions) != before


def is_true(conditions: Sequence[dict] | None, type: str) -> bool:  # noqa: A002
    """True only if the condition exists and its status is ``"True"``."""
    cond = find_condition(conditions, type)
    return cond is not None and cond.get("status") == "True"
