"""Kubernetes quantities read exactly: the one parser every partition limit goes through."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hygon_dcu_plugin.quantity import QuantityError, parse_quantity, whole_number


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1", Decimal(1)),
        ("1.0", Decimal(1)),
        ("01", Decimal(1)),
        ("1000m", Decimal(1)),
        (".5", Decimal("0.5")),
        ("1.", Decimal(1)),
        ("+2", Decimal(2)),
        ("-1", Decimal(-1)),
        ("1e3", Decimal(1000)),
        ("1E3", Decimal(1000)),
        ("2E", Decimal(2 * 10**18)),
        ("1k", Decimal(1000)),
        ("1Ki", Decimal(1024)),
        ("3Mi", Decimal(3 * 2**20)),
        ("500m", Decimal("0.5")),
        ("1500000u", Decimal("1.5")),
        ("1000000000n", Decimal(1)),
        (" 1 ", Decimal(1)),
        (7, Decimal(7)),
        # Exact: no rounding to the decimal module's default 28 digits.
        ("1000.0000000000000000000000001m", Decimal("1.0000000000000000000000000001")),
        ("0.99999999999999999999999999999999", Decimal("0.99999999999999999999999999999999")),
        ("1.5Ei", Decimal(3 * 2**59)),
        ("0.1Ki", Decimal("102.4")),
        ("1e99", Decimal("1e99")),
        ("1e-99", Decimal("1e-99")),
        (
            "12345678901234567890123456789012345678901234567890Ei",
            Decimal(12345678901234567890123456789012345678901234567890 * 2**60),
        ),
    ],
)
def test_quantity_values(text: object, value: Decimal) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize(
    "text",
    [
        "",
        "one",
        "1 Ki",
        "1KI",
        "1.2.3",
        "--1",
        "1e",
        "e3",
        "0x1",
        "1i",
        "1" * 65,
        pytest.param("7" * 5000, id="string-of-5000-digits"),
        "\u0661",
        "\u00b2",
        None,
        True,
        1.0,
        [],
        {"a": 1},
        "1e99999",
        "1e9999",
        "1e100",
        "1e-100",
        2**70,
        -(2**70),
        pytest.param(10**4999, id="int-of-5000-digits"),
    ],
)
def test_not_quantities(text: object) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(text)


def test_whole_number() -> None:
    assert whole_number(Decimal("1.000")) == 1
    assert whole_number(Decimal("1.0000000000000000000000000001")) is None
    assert whole_number(parse_quantity("1000.0000000000000000000000001m")) is None
    assert whole_number(Decimal("1E+99")) == 10**99
    assert whole_number(Decimal("NaN")) is None
    assert whole_number(Decimal("0.5")) is None
    assert whole_number(Decimal("2E+3")) == 2000
