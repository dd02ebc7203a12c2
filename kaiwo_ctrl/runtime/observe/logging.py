"""Structured logging on top of the standard ``logging`` module.

``setup_logging`` installs one handler on the root logger that writes one line
per record to stderr, either as a JSON object (``fmt="json"``, the default,
for log collectors) or as a readable line (``fmt="console"``, for humans).

A JSON line always has ``ts`` (RFC 3339, UTC, millisecond precision, ``Z``),
``level``, ``logger`` and ``msg``. It also carries:

* every field bound with ``log_context(...)`` around the logging call -- the
  fields live in a ``ContextVar``, so each asyncio task sees the context it was
  created in and concurrent reconciles never mix their fields;
* anything passed via ``extra={...}`` on the logging call;
* ``error`` and ``stacktrace`` when exception info is attached.

The four base keys are never overwritten by context or extra fields. Values
orjson cannot encode natively are written with ``str()``.

The context is read when the record is formatted, which with the handlers
installed here happens synchronously inside the logging call.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime, timezone
from types import MappingProxyType
from typing import Any, Literal, TextIO

import orjson

__all__ = [
    "setup_logging",
    "log_context",
    "current_log_context",
    "JsonFormatter",
    "ConsoleFormatter",
]

_EMPTY: Mapping[str, Any] = MappingProxyType({})
_context: ContextVar[Mapping[str, Any]] = ContextVar("runtime_log_context", default=_EMPTY)

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "warn": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
}
_BASE_KEYS = ("ts", "level", "logger", "msg")
# Attributes every LogRecord has; anything else on a record came from extra=.
_RECORD_ATTRS = frozenset(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {
    "message",
    "asctime",
    "taskName",
}
_HANDLER_MARK = "_runtime_structured_handler"


@contextmanager
def log_context(**fields: Any) -> Iterator[Mapping[str, Any]]:
    """Add ``fields`` to every log line emitted inside the ``with`` block.

    Nested blocks add to (and may override) the outer fields; leaving a block
    restores the previous set.
    """
    merged = MappingProxyType({**_context.get(), **fields})
    token = _context.set(merged)
    try:
        yield merged
    finally:
        _context.reset(token)


def current_log_context() -> dict[str, Any]:
    """A copy of the fields currently bound with ``log_context``."""
    return dict(_context.get())


def _timestamp(created: float) -> str:
    dt = datetime.fromtimestamp(created, tz=timezone.utc)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    """Context fields, then extra fields (extra wins over context)."""
    fields: dict[str, Any] = dict(_context.get())
    for key, value in record.__dict__.items():
        if key not in _RECORD_ATTRS and not key.startswith("_"):
            fields[key] = value
    for key in _BASE_KEYS:
        fields.pop(key, None)
    return fields


class JsonFormatter(logging.Formatter):
    """One JSON object per record."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": _timestamp(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        out.update(_fields(record))
        if record.exc_info and record.exc_info[0] is not None:
            out["error"] = f"{record.exc_info[0].__name__}: {record.exc_info[1]}"
            out["stacktrace"] = self.formatException(record.exc_info)
        elif record.exc_text:
            out["stacktrace"] = record.exc_text
        if record.stack_info:
            out["stack"] = self.formatStack(record.stack_info)
        return orjson.dumps(out, default=str, option=orjson.OPT_NON_STR_KEYS).decode()


class ConsoleFormatter(logging.Formatter):
    """``<ts> <LEVEL> <logger> <msg> key=value ...`` for reading in a terminal."""

    def format(self, record: logging.LogRecord) -> str:
        parts = [
            _timestamp(record.created),
            f"{record.levelname:<7}",
            record.name,
            record.getMessage(),
        ]
        for key, value in _fields(record).items():
            text = value if isinstance(value, str) else orjson.dumps(value, default=str).decode()
            parts.append(f"{key}={text}")
        line = " ".join(parts)
        if record.exc_info and record.exc_info[0] is not None:
            line += "\n" + self.formatException(record.exc_info)
        if record.stack_info:
            line += "\n" + self.formatStack(record.stack_info)
        return line


def setup_logging(
    level: str = "info",
    fmt: Literal["json", "console"] = "json",
    stream: TextIO | None = None,
) -> logging.Handler:
    """Route all logging to one structured handler on the root logger.

    Calling it again replaces the handler it installed before (other handlers
    are left alone). ``stream`` defaults to the current ``sys.stderr``.
    """
    try:
        numeric = _LEVELS[level.lower()]
    except (KeyError, AttributeError):
        raise ValueError(f"level: unknown log level {level!r}; use one of {sorted(_LEVELS)}") from None
    if fmt == "json":
        formatter: logging.Formatter = JsonFormatter()
    elif fmt == "console":
        formatter = ConsoleFormatter()
    else:
        raise ValueError(f"fmt: must be 'json' or 'console', got {fmt!r}")

    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(formatter)
    setattr(handler, _HANDLER_MARK, True)

    root = logging.getLogger()
    for old in list(root.handlers):
        if getattr(old, _HANDLER_MARK, False):
            root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(numeric)
    return handler
