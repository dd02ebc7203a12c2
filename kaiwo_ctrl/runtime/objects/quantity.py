"""Kubernetes resource quantities (``500m``, ``16Gi``, ``1.5``, ``2e3``).

Quantities are parsed into exact ``Decimal`` values so that sums of node
capacities and comparisons never drift through floating point. Used by the
GPU maths, the node-pool discovery, the container resource defaults and the
runtime's object diff (which compares quantities by value).
"""

from __future__ import annotations

import math
import re
from decimal import Decimal

from kaiwo_ctrl.runtime.objects.fielderrors import FieldError

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


#: Largest magnitude accepted (far above any real capacity: 10^12 Ei). Bigger
#: values, such as ``1e9999999``, would overflow Decimal arithmetic or build
#: integers with millions of digits, so they are refused as invalid instead.
MAX_MAGNITUDE = Decimal("1e30")


class QuantityError(FieldError):
    """An invalid quantity; a :class:`FieldError` (``path`` empty until the
    caller names the field with :meth:`FieldError.under` or ``at``)."""

    def __init__(self, detail: str, path: str = "", value: object = None) -> None:
        super().__init__(path, detail, value)

    def at(self, path: str) -> "QuantityError":
        """The same error naming the field ``path``."""
        return QuantityError(self.detail, path, self.value)


def parse_quantity(value: str | int | float | Decimal | None) -> Decimal:
    """Parse a Kubernetes quantity into an exact Decimal (``None`` -> 0)."""
    if value is None:
        return Decimal(0)
    if isinstance(value, Decimal):
        return value
    if isinstance(value, bool):
        raise QuantityError(f"invalid quantity {value!r}")
    if isinstance(value, (int, float)):
        if isinstance(value, float) and not math.isfinite(value):
            raise QuantityError(f"invalid quantity {_short(value)}")
        value = str(value)
    text = str(value).strip()
    m = _RE.match(text) if len(text) <= 64 else None
    if not m:
        raise QuantityError(f"invalid quantity {_short(value)}")
    number, suffix = m.group(1), m.group(2) or ""
    if suffix in ("E",) and ("e" in number.lower()):
        raise QuantityError(f"invalid quantity {_short(value)}")
    try:
        base = Decimal(number)
        result = base * (_BINARY[suffix] if suffix in _BINARY else _DECIMAL[suffix])
    except ArithmeticError as exc:  # InvalidOperation, decimal.Overflow
        raise QuantityError(f"invalid quantity {_short(value)}") from exc
    if abs(result) > MAX_MAGNITUDE:
        raise QuantityError(f"quantity {_short(value)} is out of range (at most {MAX_MAGNITUDE:E} in magnitude)")
    return result


def _short(value: object) -> str:
    """``repr`` of a user value, bounded, for error messages."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def cpu_cores_ceil(value: str | int | float | Decimal | None) -> int:
    """CPU quantity rounded up to whole cores (``3500m`` -> 4)."""
    return math.ceil(parse_quantity(value))


def to_int(value: str | int | float | Decimal | None) -> int:
    """Integer value of a quantity (rounded down)."""
    return math.floor(parse_quantity(value))


def format_gi(gib: int | Decimal) -> str:
    """``32`` -> ``"32Gi"``."""
    return f"{int(gib)}Gi"
