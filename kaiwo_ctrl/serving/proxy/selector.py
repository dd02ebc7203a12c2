"""Kubernetes label selectors in their string form, parsed and matched.

Supported: ``k=v``, ``k==v``, ``k!=v``, ``k in (a,b)``, ``k notin (a,b)``,
``k`` (exists) and ``!k`` (does not exist), comma-separated (AND).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

Requirement = Callable[[Mapping[str, str]], bool]

_KEY = r"[A-Za-z0-9][-A-Za-z0-9_./]*"
_VALUE = r"[-A-Za-z0-9_.]*"
_SET = re.compile(rf"^\s*({_KEY})\s+(in|notin)\s+\(([^)]*)\)\s*$")
_EQ = re.compile(rf"^\s*({_KEY})\s*(==|!=|=)\s*({_VALUE})\s*$")
_EXISTS = re.compile(rf"^\s*(!?)\s*({_KEY})\s*$")


class SelectorError(ValueError):
    pass


def _split(text: str) -> list[str]:
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return parts


def _requirement(part: str) -> Requirement:
    if m := _SET.match(part):
        key, op, raw = m.groups()
        values = {v.strip() for v in raw.split(",")}
        if any(not re.fullmatch(_VALUE, v) for v in values):
            raise SelectorError(f"invalid value in {part.strip()!r}")
        if op == "in":
            return lambda labels: labels.get(key) in values
        return lambda labels: labels.get(key) not in values
    if m := _EQ.match(part):
        key, op, value = m.groups()
        if op == "!=":
            return lambda labels: labels.get(key) != value
        return lambda labels: labels.get(key) == value
    if m := _EXISTS.match(part):
        neg, key = m.groups()
        if neg:
            return lambda labels: key not in labels
        return lambda labels: key in labels
    raise SelectorError(f"invalid label selector requirement {part.strip()!r}")


def parse_selector(text: str) -> list[Requirement]:
    """All requirements of one selector string; an empty string selects everything."""
    if not text.strip():
        return []
    return [_requirement(p) for p in _split(text)]


def matches(requirements: list[Requirement], labels: Mapping[str, str] | None) -> bool:
    labels = labels or {}
    return all(r(labels) for r in requirements)
