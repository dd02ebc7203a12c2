"""Kubernetes resource quantities (``500m``, ``16Gi``, ``1.5``, ``2e3``).

Quantities are parsed into exact ``Decimal`` values so that sums of node
capacities and comparisons never drift through floating point. Used by the
GPU maths, the node-pool discovery and the container resource defaults.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "P": Decimal(10**15),
    "E": Decimal(10**18),
}
_RE = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$")


class QuantityError(ValueError):
    pass


def parse_quantity(value: str | int | float | Decimal | None) -> Decimal:
    """Parse a Kubernetes quantity into an exact Decimal (``None`` -> 0)."""
    if value is None:
        return Decimal(0)
    if isinstance(value, Decimal):
        return value
    if isinstance(value, bool):
        raise QuantityError(f"invalid quantity {value!r}")
    if isinstance(value, (int, float)):
        return Decimal(str(value))
    text = str(value).strip()
    m = _RE.match(text)
    if not m:
        raise QuantityError(f"invalid quantity {value!r}")
    number, suffix = m.group(1), m.group(2) or ""
    if suffix in ("E",) and ("e" in number.lower()):
        raise QuantityError(f"invalid quantity {value!r}")
    try:
        base = Decimal(number)
    except InvalidOperation as exc:  # pragma: no cover - regex already guards
        raise QuantityError(f"invalid quantity {value!r}") from exc
    if suffix in _BINARY:
        return base * _BINARY[suffix]
    return base * _DECIMAL[suffix]


def cpu_cores_ceil(value: str | int | float | Decimal | None) -> int:
    """CPU quantity rounded up to whole cores (``3500m`` -> 4)."""
    return math.ceil(parse_quantity(value))


def to_int(value: str | int | float | Decimal | None) -> int:
    """Integer value of a quantity (rounded down)."""
    return math.floor(parse_quantity(value))


def format_gi(gib: int | Decimal) -> str:
    """``32`` -> ``"32Gi"``."""
    return f"{int(gib)}Gi"
