"""Time helpers of the workload status machine. Durations use the one Go
duration parser (:func:`api.meta.parse_duration`)."""

from __future__ import annotations

from datetime import datetime, timezone

from api.meta import parse_duration

__all__ = ["parse_duration", "parse_time"]


def parse_time(value: str | None) -> datetime | None:
    """RFC 3339 timestamp as written by the API server (``...Z``) -> aware datetime."""
    if not value:
        return None
    text = value.replace("Z", "+00:00")
    parsed = datetime.fromisoformat(text)
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=timezone.utc)
    return parsed
