"""Write only what differs.

``contains(actual, desired)`` answers "would applying ``desired`` change
anything?": every field we set must already hold the same value, while
fields the server or other managers added are ignored. Quantities are
compared by value (``"1000m" == "1"``, ``"1Gi" == "1073741824"``) because the
API server canonicalises them. A reconcile that finds nothing changed makes
no request at all.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kaiwo_ctrl.quantity import QuantityError, parse_quantity


def _scalar_equal(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b  # True must not equal 1
    if a == b:
        return True
    if isinstance(a, (str, int, float)) and isinstance(b, (str, int, float)):
        try:
            return parse_quantity(a) == parse_quantity(b)
        except QuantityError:
            return False
    return False


def contains(actual: Any, desired: Any) -> bool:
    """True when ``actual`` already holds every value set in ``desired``."""
    if isinstance(desired, Mapping):
        if not isinstance(actual, Mapping):
            return not desired and actual is None
        for k, v in desired.items():
            if v is None:
                continue
            if k not in actual:
                if v == {} or v == []:
                    continue
                return False
            if not contains(actual[k], v):
                return False
        return True
    if isinstance(desired, Sequence) and not isinstance(desired, (str, bytes)):
        if not isinstance(actual, Sequence) or isinstance(actual, (str, bytes)) or len(actual) != len(desired):
            return False
        return all(contains(a, d) for a, d in zip(actual, desired))
    return _scalar_equal(actual, desired)


def differing_paths(actual: Any, desired: Any, prefix: str = "") -> list[str]:
    """Paths (``spec.template.spec.containers[0].image``) where ``actual`` lacks ``desired``."""
    if isinstance(desired, Mapping):
        if not isinstance(actual, Mapping):
            return [] if (not desired and actual is None) else [prefix or "."]
        out: list[str] = []
        for k, v in desired.items():
            if v is None:
                continue
            p = f"{prefix}.{k}" if prefix else str(k)
            if k not in actual:
                if v not in ({}, []):
                    out.append(p)
                continue
            out += differing_paths(actual[k], v, p)
        return out
    if isinstance(desired, Sequence) and not isinstance(desired, (str, bytes)):
        if not isinstance(actual, Sequence) or isinstance(actual, (str, bytes)) or len(actual) != len(desired):
            return [prefix]
        out = []
        for i, (a, d) in enumerate(zip(actual, desired)):
            out += differing_paths(a, d, f"{prefix}[{i}]")
        return out
    return [] if _scalar_equal(actual, desired) else [prefix]
