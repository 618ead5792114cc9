"""The parse's memory bound holds on the shapes that cost most per byte, and what it refuses."""

from __future__ import annotations

import json
import tracemalloc

import pytest
from hygon_dcu_plugin.serving.bounded_json import (
    FIXED_COST,
    MAX_NUMBER_CHARS,
    JsonRefused,
    loads,
    parse_cost,
)

UNITS = 50_000
SHAPES = {
    "empty-objects": b"[" + b"{}," * UNITS + b"{}]",
    "empty-arrays": b"[" + b"[]," * UNITS + b"[]]",
    "one-member-objects": b"[" + b'{"a":0},' * UNITS + b"{}]",
    "six-member-objects": b"[" + b'{"a":0,"b":0,"c":0,"d":0,"e":0,"f":0},' * UNITS + b"{}]",
    "one-element-arrays": b"[" + b"[0]," * UNITS + b"[]]",
    "short-strings": b"[" + b'"ab",' * UNITS + b'""]',
    "wide-short-strings": b"[" + '"\U0001f600\U0001f600",'.encode() * UNITS + b'""]',
    "long-string-widened-by-one-character": '["\U0001f600'.encode() + b"a" * (20 * UNITS) + b'"]',
    "long-string-widened-by-an-escape": b'["\\ud83d\\ude00' + b"a" * (20 * UNITS) + b'"]',
    "two-byte-escape": b'["\\u0100' + b"a" * (20 * UNITS) + b'"]',
    "integers": b"[" + b"1000," * UNITS + b"0]",
    "longest-integers": b"[" + b",".join([b"1" * MAX_NUMBER_CHARS] * UNITS) + b"]",
    "floats": b"[" + b"1.5e300," * UNITS + b"0]",
    "distinct-keys": b"{" + b",".join(b'"k%d":0' % i for i in range(UNITS)) + b"}",
    "distinct-keys-of-objects": b"{" + b",".join(b'"k%d":{}' % i for i in range(UNITS)) + b"}",
    "distinct-keys-and-values": b"{"
    + b",".join(b'"k%d":"v%d"' % (i, i) for i in range(UNITS))
    + b"}",
    "nested-arrays": b"[" + b"[[[[[[[[[[0]]]]]]]]]]," * (UNITS // 10) + b"0]",
    "nested-objects": b"[" + b'{"a":{"a":{"a":{"a":{"a":0}}}}},' * (UNITS // 5) + b"0]",
    "deep-arrays": b"[" * 900 + b"0" + b"]" * 900,
}


@pytest.mark.parametrize("shape", SHAPES)
def test_the_bound_covers_what_the_parse_allocates(shape: str) -> None:
    body = SHAPES[shape]
    tracemalloc.start()
    try:
        document = loads(body, max_cost=1 << 40)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert document == json.loads(body)
    bound = parse_cost(body)
    assert peak <= bound, f"{shape}: allocated {peak} bytes, bound {bound}"
    # And the bound is not so loose that it is meaningless (at most 6x what is used).
    assert bound - FIXED_COST <= 6 * peak, f"{shape}: bound {bound} for {peak} bytes"


def test_a_body_over_budget_is_refused_before_parsing() -> None:
    body = SHAPES["empty-objects"]
    with pytest.raises(JsonRefused) as refused:
        loads(body, max_cost=parse_cost(body) - 1)
    assert refused.value.too_costly
    assert loads(body, max_cost=parse_cost(body)) == json.loads(body)


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b"7" * 5000, "a number of 5000 characters"),
        (b'{"a": -' + b"1" * 40 + b"}", "a number of 41 characters"),
        (b"[1." + b"5" * 40 + b"]", "a number of 42 characters"),
        (b"[NaN]", "NaN is not JSON"),
        (b"[-Infinity]", "-Infinity is not JSON"),
        (b"\xff", "not UTF-8"),
        (b'["\xed\xa0\x80"]', "not UTF-8"),  # an encoded surrogate
        (b"\xef\xbb\xbf{}", "not JSON"),  # a byte order mark
        (b"[" * 5000 + b"]" * 5000, "recursion"),
        (b'{"a": 1', "not JSON"),
    ],
)
def test_refusals_say_why(body: bytes, says: str) -> None:
    with pytest.raises(JsonRefused) as refused:
        loads(body, max_cost=1 << 30)
    assert not refused.value.too_costly
    assert says in refused.value.message


def test_numbers_up_to_the_limit_are_read() -> None:
    assert loads(b"[" + b"9" * MAX_NUMBER_CHARS + b"]", max_cost=1 << 20) == [
        int("9" * MAX_NUMBER_CHARS)
    ]
