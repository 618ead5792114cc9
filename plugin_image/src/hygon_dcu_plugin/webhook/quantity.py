"""Kubernetes resource quantities ("1", "1000m", "1e0", "1Ki") as exact decimals."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

# The grammar of k8s.io/apimachinery resource.Quantity: a signed decimal number and one
# optional suffix (binary SI, decimal exponent, or decimal SI). The exponent alternative
# comes before the single letters so that "1e3" is an exponent and "1E" is exa.
_QUANTITY = re.compile(
    r"^(?P<number>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?[0-9]{1,4}|[numkMGTPE])?$"
)

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}

# Longer strings are not quantities anyone writes; the cap keeps a hostile value cheap.
_MAX_LENGTH = 64


class QuantityError(ValueError):
    """The value is not a Kubernetes quantity."""


def parse_quantity(value: object) -> Decimal:
    """Return the exact value of a quantity given as the API server serializes it.

    Quantities arrive as JSON strings; a JSON integer is accepted too because some clients
    write ``1`` unquoted before the API server canonicalizes it.
    """
    if isinstance(value, bool):
        raise QuantityError(f"{value!r} is not a quantity")
    if isinstance(value, int):
        return Decimal(value)
    if not isinstance(value, str):
        raise QuantityError(f"{value!r} is not a quantity")
    text = value.strip()
    if len(text) > _MAX_LENGTH:
        raise QuantityError(f"{value[:_MAX_LENGTH]!r}... is too long to be a quantity")
    match = _QUANTITY.match(text)
    if match is None:
        raise QuantityError(f"{value!r} is not a quantity")
    try:
        number = Decimal(match.group("number"))
    except InvalidOperation as error:  # the regex admits only valid decimals; kept as a guard
        raise QuantityError(f"{value!r} is not a quantity") from error
    suffix = match.group("suffix") or ""
    if suffix in _BINARY:
        return number * _BINARY[suffix]
    if suffix in _DECIMAL:
        return number * _DECIMAL[suffix]
    if suffix:
        return number.scaleb(int(suffix[1:]))
    return number


def whole_number(value: Decimal) -> int | None:
    """The value as an int when it is a whole number, else None."""
    if value != value.to_integral_value():
        return None
    return int(value)
