"""The request model on its own: each kind of verdict, each reason, and inputs that must not
raise. (test_request_table.py checks that the webhook and the allocator read it alike.)"""

from __future__ import annotations

from typing import Any

import pytest
from ansible_collections.hygon.dcu.plugins.module_utils.cards import Profile
from hygon_dcu_plugin.request import (
    NoPartitionRequest,
    ProfileRequest,
    Reason,
    RefusedRequest,
    SizeRequest,
    WholeCardRequest,
    is_partition,
    parse_container,
)

F = "hygon.com/dcu.partitioned"
P2G = F + ".mig-2g.15gb"
P4G = F + ".mig-4g.31gb"
WHOLE = "hygon.com/dcu"
SLICED = "hygon.com/dcu.sliced"
MEMORY = F + ".memory-mib"
CU = F + ".compute-units"


def _value_id(value: object) -> str:
    # Python will not turn an int of 5,000 digits into text, so ids name its size instead.
    if isinstance(value, int) and not isinstance(value, bool):
        return f"int-of-{value.bit_length()}-bits"
    text = repr(value)
    return text if len(text) <= 40 else f"{type(value).__name__}-of-{len(text)}-characters"


def _refused(limits: dict[str, Any], requests: dict[str, Any] | None = None) -> RefusedRequest:
    verdict = parse_container("main", limits, requests)
    assert isinstance(verdict, RefusedRequest), verdict
    assert all(violation.container == "main" for violation in verdict.violations)
    return verdict


def test_a_profile() -> None:
    verdict = parse_container("main", {F: "1", P2G: "1", "cpu": "2"}, {F: "1", "cpu": "1"})
    assert verdict == ProfileRequest("2g.15gb")
    assert isinstance(verdict, ProfileRequest)
    assert verdict.resource == P2G


@pytest.mark.parametrize(
    ("limits", "verdict"),
    [
        ({WHOLE: "2"}, WholeCardRequest(2)),
        ({WHOLE: 1, "cpu": "1"}, WholeCardRequest(1)),
        ({WHOLE: "500m"}, WholeCardRequest(None)),
        ({WHOLE: "lots"}, WholeCardRequest(None)),
        ({}, NoPartitionRequest()),
        ({"cpu": "1", "nvidia.com/gpu": "1"}, NoPartitionRequest()),
        ({"hygon.com/nic": "1"}, NoPartitionRequest()),
    ],
)
def test_requests_without_a_partition(limits: dict[str, Any], verdict: object) -> None:
    assert parse_container("main", limits) == verdict


@pytest.mark.parametrize(
    ("limits", "requests", "reasons"),
    [
        ({F: "1"}, None, [Reason.FAMILY_WITHOUT_PROFILE]),
        ({P2G: "1"}, None, [Reason.PROFILE_WITHOUT_FAMILY]),
        ({F: "2", P2G: "1"}, None, [Reason.QUANTITY_NOT_ONE]),
        ({F: "1", P2G: "0"}, None, [Reason.QUANTITY_NOT_ONE]),
        ({F: "1", P2G: "500m"}, None, [Reason.QUANTITY_NOT_WHOLE]),
        ({F: "1", P2G: "1", P4G: "1"}, None, [Reason.TWO_PROFILES]),
        ({F: "1", P2G: "1"}, {P2G: "2"}, [Reason.REQUESTS_LIMITS_DISAGREE]),
        ({F: "1"}, {P2G: "1"}, [Reason.REQUESTS_WITHOUT_LIMITS]),
        (
            {F: "1", P2G: "1", F + ".xyz": "1"},
            None,
            [Reason.UNKNOWN_PARTITION_RESOURCE],
        ),
        ({F: "1", P2G: "1", WHOLE: "1"}, None, [Reason.MIXED_WITH_PARTITIONS]),
        ({F: "1", P2G: "1"}, {SLICED: "1"}, [Reason.MIXED_WITH_PARTITIONS]),
        # Several problems: in the webhook's order, the first is the verdict.
        ({F: "1e9999"}, None, [Reason.QUANTITY_NOT_WHOLE, Reason.FAMILY_WITHOUT_PROFILE]),
        (
            {F: "1", F + ".mig-": "1", WHOLE: "1"},
            None,
            [
                Reason.UNKNOWN_PARTITION_RESOURCE,
                Reason.FAMILY_WITHOUT_PROFILE,
                Reason.MIXED_WITH_PARTITIONS,
            ],
        ),
        (
            {F: "1", P2G: "3", P4G: "1"},
            None,
            [Reason.QUANTITY_NOT_ONE, Reason.TWO_PROFILES],
        ),
        # Requests by size.
        ({F: "1", P2G: "1", MEMORY: "1"}, None, [Reason.SIZE_WITH_PROFILE]),
        ({F: "1", CU: "8"}, None, [Reason.COMPUTE_UNITS_WITHOUT_MEMORY]),
        ({MEMORY: "1"}, None, [Reason.PROFILE_WITHOUT_FAMILY]),
        ({F: "1", MEMORY: "0"}, None, [Reason.SIZE_OUT_OF_RANGE]),
        ({F: "1", MEMORY: "16777217"}, None, [Reason.SIZE_OUT_OF_RANGE]),
        ({F: "1", MEMORY: "17Mi"}, None, [Reason.SIZE_OUT_OF_RANGE]),
        ({F: "1", MEMORY: "1", CU: "4097"}, None, [Reason.SIZE_OUT_OF_RANGE]),
        ({F: "1", MEMORY: "1.5"}, None, [Reason.QUANTITY_NOT_WHOLE]),
        ({F: "2", MEMORY: "1"}, None, [Reason.QUANTITY_NOT_ONE]),
        ({F: "1", MEMORY: "1"}, {MEMORY: "2"}, [Reason.REQUESTS_LIMITS_DISAGREE]),
        ({F: "1", MEMORY: "1"}, {CU: "2"}, [Reason.REQUESTS_WITHOUT_LIMITS]),
        (
            {F: "1", P2G: "1", CU: "0"},
            None,
            [
                Reason.SIZE_OUT_OF_RANGE,
                Reason.SIZE_WITH_PROFILE,
                Reason.COMPUTE_UNITS_WITHOUT_MEMORY,
            ],
        ),
    ],
)
def test_reasons(
    limits: dict[str, Any], requests: dict[str, Any] | None, reasons: list[Reason]
) -> None:
    verdict = _refused(limits, requests)
    assert [violation.reason for violation in verdict.violations] == reasons
    assert verdict.reason is reasons[0]


@pytest.mark.parametrize(
    ("limits", "requests", "verdict"),
    [
        ({F: "1", MEMORY: "16384"}, None, SizeRequest(16384)),
        ({F: "1", MEMORY: "16Ki", "cpu": "2"}, None, SizeRequest(16384)),
        ({F: 1, MEMORY: 1, CU: 1}, None, SizeRequest(1, 1)),
        ({F: "1", MEMORY: "16777216", CU: "4096"}, None, SizeRequest(16777216, 4096)),
        (
            {F: "1", MEMORY: "2000", CU: "30"},
            {F: "1", MEMORY: "2000", CU: "30"},
            SizeRequest(2000, 30),
        ),
    ],
)
def test_a_size(
    limits: dict[str, Any], requests: dict[str, Any] | None, verdict: SizeRequest
) -> None:
    assert parse_container("main", limits, requests) == verdict


def _profile(name: str, slices: int, memory: int, cu: int) -> Profile:
    return Profile(0, name, slices, cu, memory, 1, ())


def test_the_smallest_covering_profile_comes_first() -> None:
    small = _profile("a", 1, 1000, 10)
    # As many slices as small but more memory; more slices than small, less memory than wide.
    rich = _profile("b", 1, 3000, 10)
    wide = _profile("c", 2, 2000, 40)
    twin = _profile("d", 2, 2000, 40)
    table = [twin, wide, rich, small]
    assert SizeRequest(1).smallest(table) == [small, rich, wide, twin]
    assert SizeRequest(1000).smallest(table) == [small, rich, wide, twin]
    assert SizeRequest(1001).smallest(table) == [rich, wide, twin]
    assert SizeRequest(2001).smallest(table) == [rich]
    assert SizeRequest(1, 11).smallest(table) == [wide, twin]
    assert SizeRequest(3000, 11).smallest(table) == []
    assert SizeRequest(1, 40).covers(wide) and not SizeRequest(1, 41).covers(wide)


def test_size_messages_name_the_unit() -> None:
    # The fix for a size is a size, not "set it to 1" as for the family and the profiles.
    for limits, requests, unit in (
        ({F: "1", MEMORY: "1.5"}, None, "MiB"),
        ({F: "1", MEMORY: "lots"}, None, "MiB"),
        ({F: "1", MEMORY: "1", CU: "0.5"}, None, "compute units"),
        ({F: "1", MEMORY: "1", CU: "0"}, None, "compute units"),
        ({F: "1", MEMORY: "0"}, None, "MiB"),
        ({F: "1", MEMORY: "1"}, {MEMORY: "2"}, "same size"),
    ):
        (violation,) = _refused(limits, requests).violations
        assert "set it to 1" not in violation.message
        assert "set both to 1" not in violation.message
        assert unit in violation.message, violation.message
    assert SizeRequest(2048, 16).describe() == "2048 MiB and 16 compute units"
    assert SizeRequest(2048).describe() == "2048 MiB"


def test_message_is_the_verdict_and_a_count_of_the_rest() -> None:
    verdict = _refused({F: "1", P2G: "3", P4G: "two"})
    assert verdict.message().startswith(verdict.violations[0].message)
    assert verdict.message().endswith("(and 2 more problems in its resources)")
    single = _refused({F: "1"})
    assert single.message() == single.violations[0].message


def test_messages_name_the_container_and_the_fix() -> None:
    (violation,) = _refused({F: "1"}).violations
    assert violation.message.startswith('container "main" requests hygon.com/dcu.partitioned')
    assert "add a limit hygon.com/dcu.partitioned.mig-<profile>: 1" in violation.message
    assert violation.rule is violation.reason  # the webhook's log reads it by that name


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        1.0,
        [],
        ["1"],
        {"a": 1},
        "",
        " ",
        "\u0661",
        "1" * 5000,
        10**4999,
        -(10**4999),
        2**64,
        "1e9999",
        "1e-9999",
        "NaN",
        "Infinity",
        "1000.0000000000000000000000001m",
    ],
    ids=_value_id,
)
def test_any_value_is_a_verdict_not_an_exception(value: object) -> None:
    for limits in (
        {F: value, P2G: "1"},
        {F: "1", P2G: value},
        {F: value},
        {WHOLE: value},
        {F: "1", MEMORY: value},
        {F: "1", MEMORY: "1", CU: value},
    ):
        verdict = parse_container("main", limits, {F: value})
        if isinstance(verdict, RefusedRequest):
            assert all(len(violation.message) < 600 for violation in verdict.violations)
    assert _refused({F: value, P2G: "1"}).reason is Reason.QUANTITY_NOT_WHOLE


def test_names_and_values_are_shortened() -> None:
    name = "n" * 20_000
    resource = F + ".x" + "y" * 20_000
    verdict = parse_container(name, {F: "1", P2G: "x" * 20_000, resource: "1"})
    assert isinstance(verdict, RefusedRequest)
    assert len(verdict.violations) == 2
    for violation in verdict.violations:
        assert violation.container == name
        assert len(violation.message) < 1_000
        assert "characters)" in violation.message


def test_non_string_keys_are_not_resources() -> None:
    limits: dict[Any, Any] = {1: "1", None: "1", F: "1", P2G: "1"}
    assert parse_container("main", limits) == ProfileRequest("2g.15gb")


@pytest.mark.parametrize(
    ("name", "partition"),
    [(F, True), (P2G, True), (F + ".xyz", True), (F + "x", False), (WHOLE, False), (SLICED, False)],
)
def test_is_partition(name: str, partition: bool) -> None:
    assert is_partition(name) is partition
