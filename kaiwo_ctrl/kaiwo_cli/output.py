"""Plain, aligned, pipe-friendly output; colour only on a terminal.

Tables are left-aligned columns separated by three spaces with an upper-case
header, as ``kubectl get`` prints them, so ``awk``/``column``/``grep`` work.
Colour is used only when stdout is a TTY, and never when ``NO_COLOR`` is set.
Every cell and painted text is made inert first (:mod:`.sanitize`): what the
server sends is never executed by the terminal.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import IO, Any

import yaml

from .sanitize import Styled, inert

_COLOURS = {"green": "32", "red": "31", "yellow": "33", "blue": "34", "dim": "2", "bold": "1"}
STATUS_COLOURS = {
    "COMPLETE": "green",
    "READY": "green",
    "RUNNING": "blue",
    "STARTING": "blue",
    "PENDING": "yellow",
    "DOWNLOADING": "yellow",
    "TERMINATING": "yellow",
    "FAILED": "red",
    "ERROR": "red",
    "TERMINATED": "dim",
}


def use_colour(stream: IO[str] | None = None) -> bool:
    stream = stream or sys.stdout
    return stream.isatty() and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"


def paint(text: str, colour: str, stream: IO[str] | None = None) -> str:
    if not colour or not use_colour(stream):
        return inert(text)
    return Styled(f"\033[{_COLOURS[colour]}m{inert(text)}\033[0m")


def status_text(status: str | None, stream: IO[str] | None = None) -> str:
    status = status or "NEW"
    return paint(status, STATUS_COLOURS.get(status, ""), stream)


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Aligned columns; width counts visible characters (colour codes excluded)."""
    cells = [[str(h).upper() for h in headers]] + [["" if c is None else inert(c) for c in r] for r in rows]
    widths = [max(_visible_len(r[i]) for r in cells) for i in range(len(headers))]
    lines = []
    for r in cells:
        parts = [c + " " * (w - _visible_len(c)) for c, w in zip(r, widths)]
        lines.append("   ".join(parts).rstrip())
    return "\n".join(lines)


def _visible_len(text: str) -> int:
    n, i = 0, 0
    while i < len(text):
        if text[i] == "\033":
            j = text.find("m", i)
            i = j + 1 if j >= 0 else len(text)
            continue
        n += 1
        i += 1
    return n


def parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def human_duration(seconds: float | None) -> str:
    """kubectl-style short durations: 45s, 5m12s, 3h4m, 2d5h."""
    if seconds is None:
        return "-"
    s = max(int(seconds), 0)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60}s" if s < 600 and s % 60 else f"{s // 60}m"
    if s < 86400:
        h, m = divmod(s // 60, 60)
        return f"{h}h{m}m" if m else f"{h}h"
    d, h = divmod(s // 3600, 24)
    return f"{d}d{h}h" if h else f"{d}d"


def age(timestamp: str | None, now: datetime | None = None) -> str:
    t = parse_time(timestamp)
    if t is None:
        return "-"
    now = now or datetime.now(timezone.utc)
    return human_duration((now - t).total_seconds())


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (entrypoints, scripts) as ``|`` blocks, as people write them."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def dump_yaml(doc: Any) -> str:
    return yaml.dump(doc, Dumper=_Dumper, sort_keys=False, allow_unicode=True)
