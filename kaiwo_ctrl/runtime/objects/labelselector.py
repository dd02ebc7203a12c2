"""Kubernetes label selectors in their string form: the one parser.

Owns: ``a=b,c==d,e!=f,g in (x,y),h notin (z),i,!j`` (comma = AND) parsed into
requirements, which either match a labels mapping or become a LabelSelector
(``matchLabels`` / ``matchExpressions``). Pure functions over the standard library.

Every input is hostile: the text is bounded in length and in terms, parsed in
linear time (no backtracking split), and anything malformed raises
``SelectorError`` (a ``ValueError``) naming the offending term.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

MAX_SELECTOR_CHARS = 4096
MAX_REQUIREMENTS = 64

# A key is an optional DNS-subdomain prefix and a name; values may be empty.
_KEY = r"[A-Za-z0-9][-A-Za-z0-9_./]*"
_VALUE = r"[-A-Za-z0-9_.]*"
_SET = re.compile(rf"\s*({_KEY})\s+(in|notin)\s*\(([^()]*)\)\s*")
_EQ = re.compile(rf"\s*({_KEY})\s*(==|!=|=)\s*({_VALUE})\s*")
_EXISTS = re.compile(rf"\s*(!?)\s*({_KEY})\s*")
_VALUE_RE = re.compile(_VALUE)

IN, NOT_IN, EXISTS, DOES_NOT_EXIST = "In", "NotIn", "Exists", "DoesNotExist"
EQUALS, NOT_EQUALS = "Equals", "NotEquals"


class SelectorError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class Requirement:
    """One term; calling it with a labels mapping says whether it holds."""

    key: str
    operator: str
    values: frozenset[str] = frozenset()

    def __call__(self, labels: Mapping[str, str]) -> bool:
        op = self.operator
        if op == EXISTS:
            return self.key in labels
        if op == DOES_NOT_EXIST:
            return self.key not in labels
        found = labels.get(self.key) in self.values
        return found if op in (EQUALS, IN) else not found


def _split(text: str) -> list[str]:
    """Top-level comma-separated terms; parentheses do not nest."""
    parts: list[str] = []
    start, depth = 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
        if depth not in (0, 1):
            raise SelectorError(f"unbalanced parentheses at character {i + 1}")
    if depth:
        raise SelectorError("unbalanced parentheses: a '(' is not closed")
    parts.append(text[start:])
    return parts


def _requirement(part: str) -> Requirement:
    if m := _SET.fullmatch(part):
        key, op, raw = m.groups()
        # As Kubernetes does: "in ()" and "in (a,)" include the empty value.
        values = frozenset(v.strip() for v in raw.split(","))
        if any(not _VALUE_RE.fullmatch(v) for v in values):
            raise SelectorError(f"invalid value in {part.strip()!r}")
        return Requirement(key, IN if op == "in" else NOT_IN, values)
    if m := _EQ.fullmatch(part):
        key, op, value = m.groups()
        return Requirement(key, NOT_EQUALS if op == "!=" else EQUALS, frozenset((value,)))
    if m := _EXISTS.fullmatch(part):
        neg, key = m.groups()
        return Requirement(key, DOES_NOT_EXIST if neg else EXISTS)
    raise SelectorError(f"invalid label selector requirement {part.strip()[:100]!r}")


def parse_selector(text: str) -> list[Requirement]:
    """All requirements of one selector string; an empty string selects everything."""
    if len(text) > MAX_SELECTOR_CHARS:
        raise SelectorError(f"label selector longer than {MAX_SELECTOR_CHARS} characters")
    if not text.strip():
        return []
    parts = _split(text)
    if len(parts) > MAX_REQUIREMENTS:
        raise SelectorError(f"label selector has more than {MAX_REQUIREMENTS} requirements")
    return [_requirement(p) for p in parts]


def matches(requirements: list[Requirement], labels: Mapping[str, str] | None) -> bool:
    labels = labels or {}
    return all(r(labels) for r in requirements)


def label_selector(text: str) -> dict[str, Any]:
    """The selector string as a LabelSelector; ``!=`` becomes ``NotIn`` of one value."""
    match_labels: dict[str, str] = {}
    exprs: list[dict[str, Any]] = []
    for r in parse_selector(text):
        if r.operator == EQUALS:
            (match_labels[r.key],) = r.values
        elif r.operator in (EXISTS, DOES_NOT_EXIST):
            exprs.append({"key": r.key, "operator": r.operator})
        else:
            exprs.append({"key": r.key, "operator": IN if r.operator == IN else NOT_IN, "values": sorted(r.values)})
    out: dict[str, Any] = {}
    if match_labels:
        out["matchLabels"] = match_labels
    if exprs:
        out["matchExpressions"] = exprs
    return out
