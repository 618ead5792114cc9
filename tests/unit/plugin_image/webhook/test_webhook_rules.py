"""The admission rules as a pure function: verdicts over the case table, and each message.

The quantity parser they read limits with is tested in ../test_quantity.py, the request model
in ../test_request.py.
"""

from __future__ import annotations

from collections import Counter

import pytest
from hygon_dcu_plugin.pod_rules import check_pod, read_pod
from hygon_dcu_plugin.request import (
    PartitionRequest,
    ProfileRequest,
    Reason,
    SizeRequest,
    Violation,
    parse_container,
)
from webhook_pod_cases import CASES, FAMILY, P2G, P4G, PARTITION, WHOLE, Case, container, pod


def test_table_is_wide_enough() -> None:
    assert len(CASES) >= 25
    assert len({case.id for case in CASES}) == len(CASES)
    assert sum(case.allowed for case in CASES) >= 10
    assert {reason for case in CASES for reason, _ignored in case.denied} == set(Reason) - {
        Reason.MALFORMED_POD,
        Reason.SIZE_NOT_OFFERED,  # needs the nodes' profiles: test_webhook_offered.py
        Reason.WRITE_BEYOND_OWN_KEYS,  # a pod's UPDATE: test_webhook_pod_writes.py
    }


def _app_partitions(case: Case) -> list[tuple[str, PartitionRequest]]:
    """What each app container asking for a partition asks, read container by container."""
    asked: list[tuple[str, PartitionRequest]] = []
    for entry in case.pod["spec"].get("containers", []):
        resources = entry.get("resources", {})
        request = parse_container(
            entry["name"], resources.get("limits") or {}, resources.get("requests") or {}
        )
        if isinstance(request, ProfileRequest | SizeRequest):
            asked.append((entry["name"], request))
    return asked


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.id)
def test_one_reading_gives_the_verdict_and_the_requests(case: Case) -> None:
    # The extender serves what read_pod collected: for an admitted pod, exactly the app
    # containers' partition requests, in spec order; for a denied one, its violations.
    reading = read_pod(case.pod)
    assert reading.findings.total == len(case.denied)
    if case.allowed:
        assert reading.partitions == _app_partitions(case)


def test_the_table_admits_pods_with_several_partitions() -> None:
    # Without such cases the test above would hold for a reading that kept one request only.
    assert max(len(read_pod(case.pod).partitions) for case in CASES if case.allowed) >= 2


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.id)
def test_verdict(case: Case) -> None:
    found = Counter((violation.reason, violation.container) for violation in check_pod(case.pod))
    assert found == Counter(case.denied)


def _only(pod_spec: dict[str, object]) -> Violation:
    violations = check_pod(pod_spec)
    assert len(violations) == 1, violations
    return violations[0]


@pytest.mark.parametrize(
    ("pod_spec", "reason", "phrases"),
    [
        (
            pod(container("train", {FAMILY: "1"})),
            Reason.FAMILY_WITHOUT_PROFILE,
            ['container "train"', "without a profile", "hygon.com/dcu.partitioned.mig-<profile>"],
        ),
        (
            pod(container("train", {P2G: "1"})),
            Reason.PROFILE_WITHOUT_FAMILY,
            ['container "train"', P2G, "without the family", "add hygon.com/dcu.partitioned: 1"],
        ),
        (
            pod(container("train", {FAMILY: "3", P2G: "1"})),
            Reason.QUANTITY_NOT_ONE,
            [
                'container "train"',
                f"{FAMILY}: 3",
                "one partition per container; use one pod per partition",
                "set it to 1",
            ],
        ),
        (
            pod(container("train", {FAMILY: "1", P2G: "1", P4G: "1"})),
            Reason.TWO_PROFILES,
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
            Reason.REQUESTS_LIMITS_DISAGREE,
            [
                'container "train"',
                f"requests {P2G}: 2",
                f"limits {P2G}: 1",
                "leave out the requests",
            ],
        ),
        (
            pod(container("train", {FAMILY: "1"}, {P2G: "1"})),
            Reason.REQUESTS_WITHOUT_LIMITS,
            ['container "train"', f"sets {P2G} in requests but not in limits", "set it in limits"],
        ),
        (
            pod(container("train", {FAMILY: "250m", P2G: "1"})),
            Reason.QUANTITY_NOT_WHOLE,
            ['container "train"', "'250m'", "not a whole number", "set it to 1"],
        ),
        (
            pod(container("train", {FAMILY: "1", FAMILY + ".x": "1", P2G: "1"})),
            Reason.UNKNOWN_PARTITION_RESOURCE,
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
            Reason.PARTITION_IN_SIDECAR,
            [
                'sidecar init container "sc"',
                "restartPolicy: Always",
                "request the partition in an app container under spec.containers",
            ],
        ),
        (
            pod(container("train"), init=(container("warm", PARTITION),)),
            Reason.PARTITION_IN_INIT_CONTAINER,
            [
                'init container "warm"',
                "handed on to the app containers",
                "request the partition in an app container under spec.containers",
            ],
        ),
        (
            pod(container("train"), ephemeral=(container("dbg", {P2G: "1"}),)),
            Reason.EPHEMERAL_CONTAINER_RESOURCE,
            ['ephemeral container "dbg"', "cannot have resources", "remove them"],
        ),
        (
            pod(container("train", PARTITION), container("old", {WHOLE: "1"})),
            Reason.MIXED_WITH_PARTITIONS,
            [
                'container "old" requests hygon.com/dcu',
                'container "train" requests a partition',
                "use partitions or whole cards in one pod",
            ],
        ),
    ],
    ids=lambda value: value.value if isinstance(value, Reason) else "",
)
def test_message_names_container_and_fix(
    pod_spec: dict[str, object], reason: Reason, phrases: list[str]
) -> None:
    violation = _only(pod_spec)
    assert violation.reason is reason
    for phrase in phrases:
        assert phrase in violation.message


def test_not_a_quantity_says_so() -> None:
    violation = _only(pod(container("train", {FAMILY: "1", P2G: "two"})))
    assert violation.reason is Reason.QUANTITY_NOT_WHOLE
    assert "'two', which is not a quantity" in violation.message


def test_unnamed_container_is_named_by_position() -> None:
    spec = pod({"image": "x", "resources": {"limits": {FAMILY: "1"}}})
    violation = _only(spec)
    assert violation.container == "spec.containers[0]"
    assert 'container "spec.containers[0]"' in violation.message


def test_init_container_with_restart_policy_never_is_not_a_sidecar() -> None:
    spec = pod(container("train"), init=(container("w", PARTITION, restartPolicy="Never"),))
    assert _only(spec).reason is Reason.PARTITION_IN_INIT_CONTAINER


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
    assert violation.reason is Reason.MALFORMED_POD
    assert where in violation.message


def test_whole_card_next_to_a_partition_is_reported_once_per_container() -> None:
    # The app container's own mixing comes from the request model, an init container's from
    # the pod-level check: neither twice.
    spec = pod(
        container("train", {**PARTITION, WHOLE: "1"}),
        init=(container("warm", {**PARTITION, WHOLE: "1"}),),
    )
    found = Counter((violation.reason, violation.container) for violation in check_pod(spec))
    assert found == Counter(
        [
            (Reason.PARTITION_IN_INIT_CONTAINER, "warm"),
            (Reason.MIXED_WITH_PARTITIONS, "warm"),
            (Reason.MIXED_WITH_PARTITIONS, "train"),
        ]
    )
    messages = [violation.message for violation in check_pod(spec)]
    assert sum("next to its own partition request" in message for message in messages) == 2


def test_a_5000_digit_int_is_a_violation_not_a_crash() -> None:
    # JSON over HTTP cannot carry it (bounded_json), but check_pod must not depend on that.
    violation = _only(pod(container("train", {FAMILY: 10**4999, P2G: "1"})))
    assert violation.reason is Reason.QUANTITY_NOT_WHOLE
    assert "a number of more than 100 digits" in violation.message
