"""The admission rules as a pure function: verdicts over the case table, and each message."""

from __future__ import annotations

from collections import Counter
from decimal import Decimal

import pytest
from hygon_dcu_plugin.webhook.quantity import QuantityError, parse_quantity, whole_number
from hygon_dcu_plugin.webhook.rules import Rule, Violation, check_pod
from webhook_pod_cases import CASES, FAMILY, P2G, P4G, PARTITION, WHOLE, Case, container, pod


def test_table_is_wide_enough() -> None:
    assert len(CASES) >= 25
    assert len({case.id for case in CASES}) == len(CASES)
    assert sum(case.allowed for case in CASES) >= 10
    assert {rule for case in CASES for rule, _ignored in case.denied} == set(Rule) - {
        Rule.MALFORMED_POD
    }


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.id)
def test_verdict(case: Case) -> None:
    found = Counter((violation.rule, violation.container) for violation in check_pod(case.pod))
    assert found == Counter(case.denied)


def _only(pod_spec: dict[str, object]) -> Violation:
    violations = check_pod(pod_spec)
    assert len(violations) == 1, violations
    return violations[0]


@pytest.mark.parametrize(
    ("pod_spec", "rule", "phrases"),
    [
        (
            pod(container("train", {FAMILY: "1"})),
            Rule.FAMILY_WITHOUT_PROFILE,
            ['container "train"', "without a profile", "hygon.com/dcu.partitioned.mig-<profile>"],
        ),
        (
            pod(container("train", {P2G: "1"})),
            Rule.PROFILE_WITHOUT_FAMILY,
            ['container "train"', P2G, "without the family", "add hygon.com/dcu.partitioned: 1"],
        ),
        (
            pod(container("train", {FAMILY: "3", P2G: "1"})),
            Rule.QUANTITY_NOT_ONE,
            [
                'container "train"',
                f"{FAMILY}: 3",
                "one partition per container; use one pod per partition",
                "set it to 1",
            ],
        ),
        (
            pod(container("train", {FAMILY: "1", P2G: "1", P4G: "1"})),
            Rule.TWO_PROFILES,
            [
                'container "train"',
                P2G,
                P4G,
                "one partition per container",
                "keep exactly one profile",
            ],
        ),
        (
            pod(container("train", PARTITION, {FAMILY: "1", P2G: "2"})),
            Rule.REQUESTS_LIMITS_DISAGREE,
            [
                'container "train"',
                f"requests {P2G}: 2",
                f"limits {P2G}: 1",
                "leave out the requests",
            ],
        ),
        (
            pod(container("train", {FAMILY: "1"}, {P2G: "1"})),
            Rule.REQUESTS_WITHOUT_LIMITS,
            ['container "train"', f"sets {P2G} in requests but not in limits", "set it in limits"],
        ),
        (
            pod(container("train", {FAMILY: "250m", P2G: "1"})),
            Rule.QUANTITY_NOT_WHOLE,
            ['container "train"', "'250m'", "not a whole number", "set it to 1"],
        ),
        (
            pod(container("train", {FAMILY: "1", FAMILY + ".x": "1", P2G: "1"})),
            Rule.UNKNOWN_PARTITION_RESOURCE,
            [
                'container "train"',
                FAMILY + ".x",
                "not a partition resource",
                "hygon.com/dcu.partitioned.mig-<profile>",
            ],
        ),
        (
            pod(
                container("train", PARTITION),
                init=(container("sc", PARTITION, restartPolicy="Always"),),
            ),
            Rule.PARTITION_IN_SIDECAR,
            [
                'sidecar init container "sc"',
                "restartPolicy: Always",
                "request the partition in an app container under spec.containers",
            ],
        ),
        (
            pod(container("train"), init=(container("warm", PARTITION),)),
            Rule.PARTITION_IN_INIT_CONTAINER,
            [
                'init container "warm"',
                "handed on to the app containers",
                "request the partition in an app container under spec.containers",
            ],
        ),
        (
            pod(container("train"), ephemeral=(container("dbg", {P2G: "1"}),)),
            Rule.EPHEMERAL_CONTAINER_RESOURCE,
            ['ephemeral container "dbg"', "cannot have resources", "remove them"],
        ),
        (
            pod(container("train", PARTITION), container("old", {WHOLE: "1"})),
            Rule.MIXED_WITH_PARTITIONS,
            [
                'container "old" requests hygon.com/dcu',
                'container "train" requests a partition',
                "use partitions or whole cards in one pod",
            ],
        ),
    ],
    ids=lambda value: value.value if isinstance(value, Rule) else "",
)
def test_message_names_container_and_fix(
    pod_spec: dict[str, object], rule: Rule, phrases: list[str]
) -> None:
    violation = _only(pod_spec)
    assert violation.rule is rule
    for phrase in phrases:
        assert phrase in violation.message


def test_not_a_quantity_says_so() -> None:
    violation = _only(pod(container("train", {FAMILY: "1", P2G: "two"})))
    assert violation.rule is Rule.QUANTITY_NOT_WHOLE
    assert "'two', which is not a quantity" in violation.message


def test_unnamed_container_is_named_by_position() -> None:
    spec = pod({"image": "x", "resources": {"limits": {FAMILY: "1"}}})
    violation = _only(spec)
    assert violation.container == "spec.containers[0]"
    assert 'container "spec.containers[0]"' in violation.message


def test_init_container_with_restart_policy_never_is_not_a_sidecar() -> None:
    spec = pod(container("train"), init=(container("w", PARTITION, restartPolicy="Never"),))
    assert _only(spec).rule is Rule.PARTITION_IN_INIT_CONTAINER


@pytest.mark.parametrize(
    ("spec", "where"),
    [
        ({"spec": {"containers": {"name": "a"}}}, "spec.containers is not a list"),
        ({"spec": {"containers": ["a"]}}, "spec.containers[0] is not an object"),
        (
            {"spec": {"containers": [{"name": "a", "resources": []}]}},
            "spec.containers[0].resources is not an object",
        ),
        (
            {"spec": {"containers": [{"name": "a", "resources": {"limits": [FAMILY]}}]}},
            "spec.containers[0].resources.limits is not an object",
        ),
        ({"spec": {"containers": [], "initContainers": "x"}}, "spec.initContainers is not a list"),
        ({"spec": "x"}, "pod.spec is not an object"),
    ],
)
def test_malformed_pod_is_denied_not_crashed(spec: dict[str, object], where: str) -> None:
    violation = _only(spec)
    assert violation.rule is Rule.MALFORMED_POD
    assert where in violation.message


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1", Decimal(1)),
        ("1.0", Decimal(1)),
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
