"""The one reading of a container's logical-slice request (``request.parse_container``), row by
row against verdicts written out by hand, and the same rows through the pod rules
(``pod_rules.check_pod``) the webhook denies with."""

from __future__ import annotations

from typing import Any

import pytest
from hygon_dcu_plugin.pod_rules import check_pod
from hygon_dcu_plugin.request import (
    MAX_MEMORY_MIB,
    Reason,
    RefusedRequest,
    SliceRequest,
    parse_container,
)

SLICED = "hygon.com/dcu.sliced"
MEMORY = SLICED + ".memory-mib"
CU = SLICED + ".compute-units"
WHOLE = "hygon.com/dcu"
FAMILY = "hygon.com/dcu.partitioned"

ROWS: list[tuple[str, dict[str, Any], SliceRequest | list[Reason]]] = [
    ("memory", {SLICED: "1", MEMORY: "16384"}, SliceRequest(16384)),
    ("memory-and-cus", {SLICED: "1", MEMORY: "24576", CU: "30"}, SliceRequest(24576, 30)),
    ("spelled-1000m", {SLICED: "1000m", MEMORY: "16384"}, SliceRequest(16384)),
    ("memory-as-a-number", {SLICED: 1, MEMORY: 8192}, SliceRequest(8192)),
    ("with-cpu", {SLICED: "1", MEMORY: "1024", "cpu": "2"}, SliceRequest(1024)),
    ("largest-memory", {SLICED: "1", MEMORY: str(MAX_MEMORY_MIB)}, SliceRequest(MAX_MEMORY_MIB)),
    ("no-memory", {SLICED: "1"}, [Reason.SLICE_WITHOUT_MEMORY]),
    ("cus-only", {SLICED: "1", CU: "20"}, [Reason.SLICE_WITHOUT_MEMORY]),
    ("memory-without-slice", {MEMORY: "16384"}, [Reason.SLICE_SIZE_WITHOUT_SLICE]),
    ("two", {SLICED: "2", MEMORY: "16384"}, [Reason.QUANTITY_NOT_ONE]),
    ("zero", {SLICED: "0", MEMORY: "16384"}, [Reason.QUANTITY_NOT_ONE]),
    ("half", {SLICED: "500m", MEMORY: "16384"}, [Reason.QUANTITY_NOT_WHOLE]),
    ("memory-not-whole", {SLICED: "1", MEMORY: "1.5"}, [Reason.QUANTITY_NOT_WHOLE]),
    ("memory-zero", {SLICED: "1", MEMORY: "0"}, [Reason.SIZE_OUT_OF_RANGE]),
    (
        "memory-too-large",
        {SLICED: "1", MEMORY: str(MAX_MEMORY_MIB + 1)},
        [Reason.SIZE_OUT_OF_RANGE],
    ),
    ("cus-zero", {SLICED: "1", MEMORY: "16384", CU: "0"}, [Reason.SIZE_OUT_OF_RANGE]),
    (
        "unknown-name",
        {SLICED: "1", MEMORY: "16384", SLICED + ".cores": "5"},
        [Reason.UNKNOWN_SLICE_RESOURCE],
    ),
    ("whole-card-too", {SLICED: "1", MEMORY: "16384", WHOLE: "1"}, [Reason.SLICE_WITH_WHOLE_CARD]),
    (
        "partition-too",
        {SLICED: "1", MEMORY: "16384", FAMILY: "1", FAMILY + ".mig-2g.15gb": "1"},
        [Reason.MIXED_WITH_PARTITIONS],
    ),
    (
        "everything-wrong-at-once",
        {SLICED: "3", CU: "0", WHOLE: "1"},
        [
            Reason.SIZE_OUT_OF_RANGE,
            Reason.QUANTITY_NOT_ONE,
            Reason.SLICE_WITHOUT_MEMORY,
            Reason.SLICE_WITH_WHOLE_CARD,
        ],
    ),
]


def _pod(limits: dict[str, Any]) -> dict[str, Any]:
    container = {"name": "main", "image": "x", "resources": {"limits": limits}}
    return {"apiVersion": "v1", "kind": "Pod", "spec": {"containers": [container]}}


@pytest.mark.parametrize(("limits", "verdict"), [row[1:] for row in ROWS], ids=[r[0] for r in ROWS])
def test_one_verdict_for_the_request_and_the_pod(
    limits: dict[str, Any], verdict: SliceRequest | list[Reason]
) -> None:
    read = parse_container("main", limits)
    violations = check_pod(_pod(limits))
    if isinstance(verdict, SliceRequest):
        assert read == verdict and violations == []
        return
    assert isinstance(read, RefusedRequest)
    assert [violation.reason for violation in read.violations] == verdict
    assert [violation.reason for violation in violations] == verdict
    assert all(violation.container == "main" for violation in violations)
    assert all('container "main"' in violation.message for violation in violations)


def test_every_reason_of_a_slices_own_limits_has_a_row() -> None:
    own = {
        Reason.SLICE_WITHOUT_MEMORY,
        Reason.SLICE_SIZE_WITHOUT_SLICE,
        Reason.SLICE_WITH_WHOLE_CARD,
        Reason.UNKNOWN_SLICE_RESOURCE,
    }
    reasons = {
        reason for _id, _limits, verdict in ROWS if isinstance(verdict, list) for reason in verdict
    }
    assert own <= reasons


def test_messages_say_how_to_ask() -> None:
    (missing,) = check_pod(_pod({SLICED: "1"}))
    assert f"add {MEMORY}, e.g. {SLICED}: 1 and {MEMORY}: 16384" in missing.message
    (both,) = check_pod(_pod({SLICED: "1", MEMORY: "1024", WHOLE: "1"}))
    assert "a container gets whole cards or one slice of a card, not both" in both.message
