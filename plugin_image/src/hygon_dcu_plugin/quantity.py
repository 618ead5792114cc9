"""Kubernetes resource quantities ("1", "1000m", "1e0", "1Ki") as exact decimals.

Exact means no rounding anywhere: the number is read digit for digit, scaled by its suffix in
a decimal context that traps any rounding, so "1000.0000000000000000000000001m" is not 1.
Exponents are bounded, so "1e9999" is refused as out of range instead of being expanded.

The package's only quantity parser: ``request.parse_container`` reads every partition limit
with it, for the admission webhook and the allocator alike.
"""

from __future__ import annotations

import re
from decimal import Context, Decimal, DecimalException, Inexact, Overflow, Rounded, Underflow

# The grammar of k8s.io/apimachinery resource.Quantity: a signed decimal number and one
# optional suffix (binary SI, decimal exponent, or decimal SI). The exponent alternative
# comes before the single letters so that "1e3" is an exponent and "1E" is exa.
_QUANTITY = re.compile(
    r"(?P<number>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?[0-9]+|[numkMGTPE])?"
)

_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}

# Longer strings are not quantities anyone writes; the cap keeps a hostile value cheap.
_MAX_LENGTH = 64
# The API server caps quantities near 2**63 (19 digits) and rounds them to 1n: an exponent
# beyond this cannot be a real request, and refusing it keeps every value small.
MAX_EXPONENT = 99
# Enough digits for the longest number (64 characters) times 2**60 (19 digits), so with
# rounding trapped every product is exact.
_EXACT = Context(
    prec=100,
    Emax=999,
    Emin=-999,
    traps=[Inexact, Rounded, Overflow, Underflow],
)


class QuantityError(ValueError):
    """The value is not a Kubernetes quantity (or one out of any sensible range)."""


def parse_quantity(value: object) -> Decimal:
    """Return the exact value of a quantity given as the API server serializes it.

    Quantities arrive as JSON strings; a JSON integer is accepted too because some clients
    write ``1`` unquoted before the API server canonicalizes it.
    """
    if isinstance(value, bool):
        raise QuantityError(f"{value!r} is not a quantity")
    if isinstance(value, int):
        if value.bit_length() > 64:
            raise QuantityError("the number is out of range")
        return Decimal(value)
    if not isinstance(value, str):
        raise QuantityError(f"a {type(value).__name__} is not a quantity")
    text = value.strip()
    if len(text) > _MAX_LENGTH:
        raise QuantityError(f"{value[:_MAX_LENGTH]!r}... is too long to be a quantity")
    match = _QUANTITY.fullmatch(text)
    if match is None:
        raise QuantityError(f"{value!r} is not a quantity")
    number = Decimal(match.group("number"))  # exact: construction never rounds
    suffix = match.group("suffix") or ""
    binary, exponent = 0, 0
    if suffix in _BINARY:
        binary = _BINARY[suffix]
    elif suffix in _DECIMAL:
        exponent = _DECIMAL[suffix]
    elif suffix:
        exponent = int(suffix[1:])
        if abs(exponent) > MAX_EXPONENT:
            raise QuantityError(
                f"{value!r} has the exponent {suffix[1:]}; at most {MAX_EXPONENT} either way"
            )
    try:
        return _EXACT.multiply(number, Decimal(2**binary)).scaleb(exponent, _EXACT)
    except DecimalException as error:  # the context is sized so that this cannot happen
        raise QuantityError(f"{value!r} cannot be represented exactly") from error


def whole_number(value: Decimal) -> int | None:
    """The value as an int when it is exactly a whole number, else None."""
    if not value.is_finite():
        return None
    _sign, digits, exponent = value.as_tuple()
    if not isinstance(exponent, int):  # only NaN and infinities have a letter here
        return None
    if exponent < 0 and any(digits[exponent:]):
        return None
    return int(value)
