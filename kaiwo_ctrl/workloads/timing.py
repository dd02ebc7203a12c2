"""Go-style duration strings (``1h30m``, ``90s``, ``1.5h``) used by
``spec.duration`` and the KaiwoConfig scheduling thresholds."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")


def parse_duration(text: str) -> timedelta:
    """Parse a Go duration (no sign); raises ``ValueError`` when malformed."""
    value = (text or "").strip()
    if value == "0":
        return timedelta(0)
    if not value:
        raise ValueError("empty duration")
    pos, seconds = 0, 0.0
    while pos < len(value):
        m = _PART.match(value, pos)
        if not m:
            raise ValueError(f"invalid duration {text!r}")
        seconds += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    return timedelta(seconds=seconds)


def parse_time(value: str | None) -> datetime | None:
    """RFC 3339 timestamp as written by the API server (``...Z``) -> aware datetime."""
    if not value:
        return None
    text = value.replace("Z", "+00:00")
    parsed = datetime.fromisoformat(text)
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=timezone.utc)
    return parsed
