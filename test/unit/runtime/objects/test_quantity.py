from decimal import Decimal

import pytest

from kaiwo_ctrl.runtime.objects.quantity import QuantityError, cpu_cores_ceil, parse_quantity, to_int


@pytest.mark.parametrize(
    "text,expected",
    [
        ("1", Decimal(1)),
        ("500m", Decimal("0.5")),
        ("16Gi", Decimal(16 * 2**30)),
        ("100Mi", Decimal(100 * 2**20)),
        ("1k", Decimal(1000)),
        ("1.5", Decimal("1.5")),
        ("2e3", Decimal(2000)),
        (8, Decimal(8)),
        (None, Decimal(0)),
        ("128974848", Decimal(128974848)),
    ],
)
def test_parse(text, expected):
    assert parse_quantity(text) == expected


@pytest.mark.parametrize("bad", ["", "abc", "1Xi", "--1", True])
def test_parse_rejects(bad):
    with pytest.raises(QuantityError):
        parse_quantity(bad)


def test_rounding():
    assert cpu_cores_ceil("3500m") == 4
    assert cpu_cores_ceil("8") == 8
    assert to_int("7.9") == 7
