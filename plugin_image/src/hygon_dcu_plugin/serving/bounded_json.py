"""JSON parsing whose memory is known before it starts.

``json.loads`` builds a Python object for every value, and the objects cost far more than the
text: an array of empty objects takes 24 bytes of memory per byte of body. So before parsing,
a few byte counts (each one pass in C, no copy) bound what the parse would allocate, and the
body is refused if that bound exceeds the caller's budget. The length of a number is bounded
too, so no huge number is converted; nesting is bounded by the interpreter's recursion limit,
which ``json.loads`` enforces (RecursionError), and costs its memory like any other token.

The bound, in bytes, is ``2 * width * len(body)`` (the decoded text, and every string's
characters) plus a cost per token: each ``{`` a dict, each ``[`` a list, each ``:`` a member,
each ``,`` a slot and a number, each pair of ``"`` a string's object header. ``width`` is how
many bytes the widest character takes in a Python string (1, 2 or 4). The tokens are counted
in the whole body, strings included, which only over-counts. The costs are upper bounds of
CPython 3.11's object sizes measured with tracemalloc on the worst shapes (the unit tests
repeat that measurement), so the parse never allocates more than the bound.
"""

from __future__ import annotations

import json
import re
from typing import Any

# Per token, in bytes (see the module docstring).
OBJECT_COST = 192
ARRAY_COST = 96
MEMBER_COST = 96
COMMA_COST = 40
STRING_COST = 80
FIXED_COST = 64 * 1024

# An int64 has at most 20 characters; a longer number is not a Kubernetes field.
MAX_NUMBER_CHARS = 32

# Escapes widen the strings they are in: one of a surrogate (outside the BMP) to 4 bytes a
# character, any other outside Latin-1 to 2.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89abAB]")
_WIDE_ESCAPE = re.compile(rb"\\u(?!00)")
# Lead bytes of 4-byte UTF-8 sequences (and bytes no UTF-8 has, which fail to decode anyway).
_FOUR_BYTE_LEADS = [bytes([lead]) for lead in range(0xF0, 0x100)]


class JsonRefused(ValueError):
    """The body is not JSON this parser accepts; ``too_costly`` means it was never parsed."""

    def __init__(self, message: str, too_costly: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.too_costly = too_costly


class _NumberTooLong(ValueError):
    pass


def parse_cost(body: bytes) -> int:
    """An upper bound of the bytes ``json.loads`` allocates for ``body`` (text included)."""
    width = _widest_character(body)
    return (
        2 * width * len(body)
        + OBJECT_COST * body.count(b"{")
        + ARRAY_COST * body.count(b"[")
        + MEMBER_COST * body.count(b":")
        + COMMA_COST * body.count(b",")
        + STRING_COST * (body.count(b'"') // 2 + 1)
        + FIXED_COST
    )


def _widest_character(body: bytes) -> int:
    """Bytes per character of the widest Python string the body decodes to (1, 2 or 4)."""
    if body.isascii():
        width = 1
    elif any(lead in body for lead in _FOUR_BYTE_LEADS):
        width = 4
    else:
        width = 2  # Latin-1 would be 1; 2 only over-counts
    if width < 4 and b"\\u" in body:
        if _SURROGATE_ESCAPE.search(body):
            width = 4
        elif _WIDE_ESCAPE.search(body):
            width = max(width, 2)
    return width


def loads(body: bytes, max_cost: int) -> Any:
    """Parse UTF-8 JSON, or raise JsonRefused saying why it was not parsed."""
    cost = parse_cost(body)
    if cost > max_cost:
        raise JsonRefused(
            f"parsing this body would take about {cost // 1024} KiB of memory, more than the "
            f"{max_cost // 1024} KiB the webhook allows; a pod this large or this deeply "
            "structured is not something it can check",
            too_costly=True,
        )
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as error:
        raise JsonRefused(f"the body is not UTF-8: {error}") from error
    try:
        return json.loads(
            text,
            parse_int=_parse_int,
            parse_float=_parse_float,
            parse_constant=_refuse_constant,
        )
    except _NumberTooLong as error:
        raise JsonRefused(str(error)) from error
    except (json.JSONDecodeError, RecursionError) as error:
        raise JsonRefused(f"the body is not JSON: {error}") from error


def _check_length(text: str) -> None:
    if len(text) > MAX_NUMBER_CHARS:
        raise _NumberTooLong(
            f"the JSON has a number of {len(text)} characters; at most {MAX_NUMBER_CHARS} "
            "are accepted"
        )


def _parse_int(text: str) -> int:
    _check_length(text)
    return int(text)


def _parse_float(text: str) -> float:
    _check_length(text)
    return float(text)


def _refuse_constant(name: str) -> Any:
    raise json.JSONDecodeError(f"{name} is not JSON", name, 0)
