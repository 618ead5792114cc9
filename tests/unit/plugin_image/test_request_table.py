"""One table of container requests, read by both readers, which must agree.

Each row is one container's limits and the verdict written out by hand: the profile it is
granted, or the Reason it is refused for. The webhook reads the row through ``check_pod`` on a
pod holding that container; the allocator through its limits reader (``profile_for``) and
through ``Allocate`` itself on a simulated node (a pod created while the webhook was down).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from hygon_dcu_plugin.allocator import profile_for
from hygon_dcu_plugin.kube import ContainerSpec
from hygon_dcu_plugin.request import Reason
from hygon_dcu_plugin.vocabulary import RequestRefused
from hygon_dcu_plugin.webhook.rules import check_pod
from plugin_harness import Harness

FAMILY = "hygon.com/dcu.partitioned"
P2G = FAMILY + ".mig-2g.15gb"
P4G = FAMILY + ".mig-4g.31gb"
WHOLE = "hygon.com/dcu"
CONTAINER = "main"


@dataclass(frozen=True)
class Row:
    id: str
    limits: dict[str, Any]
    # The profile granted, or why the container is refused.
    verdict: str | Reason


ROWS = [
    Row("1", {FAMILY: "1", P2G: "1"}, "2g.15gb"),
    Row("1000m", {FAMILY: "1000m", P2G: "1000m"}, "2g.15gb"),
    Row("1.0", {FAMILY: "1.0", P2G: "1.0"}, "2g.15gb"),
    Row("01", {FAMILY: "01", P2G: "01"}, "2g.15gb"),
    Row("1e0", {FAMILY: "1e0", P2G: "1"}, "2g.15gb"),
    Row("int", {FAMILY: 1, P2G: 1}, "2g.15gb"),
    Row("other-profile", {FAMILY: "1", P4G: "1"}, "4g.31gb"),
    Row("2", {FAMILY: "2", P2G: "1"}, Reason.QUANTITY_NOT_ONE),
    Row("profile-2", {FAMILY: "1", P2G: "2"}, Reason.QUANTITY_NOT_ONE),
    Row("0", {FAMILY: "1", P2G: "0"}, Reason.QUANTITY_NOT_ONE),
    Row("-1", {FAMILY: "-1", P2G: "1"}, Reason.QUANTITY_NOT_ONE),
    Row("1Ki", {FAMILY: "1Ki", P2G: "1"}, Reason.QUANTITY_NOT_ONE),
    Row("int-2", {FAMILY: 2, P2G: 1}, Reason.QUANTITY_NOT_ONE),
    Row("500m", {FAMILY: "500m", P2G: "1"}, Reason.QUANTITY_NOT_WHOLE),
    Row("1e9999", {FAMILY: "1e9999", P2G: "1"}, Reason.QUANTITY_NOT_WHOLE),
    Row(
        "1000.0000000000000000000000001m",
        {FAMILY: "1000.0000000000000000000000001m", P2G: "1"},
        Reason.QUANTITY_NOT_WHOLE,
    ),
    Row("5000-digit-string", {FAMILY: "7" * 5000, P2G: "1"}, Reason.QUANTITY_NOT_WHOLE),
    Row("5000-digit-int", {FAMILY: 10**4999, P2G: "1"}, Reason.QUANTITY_NOT_WHOLE),
    Row("arabic-indic-one", {FAMILY: "\u0661", P2G: "1"}, Reason.QUANTITY_NOT_WHOLE),
    Row("json-list", {FAMILY: ["1"], P2G: "1"}, Reason.QUANTITY_NOT_WHOLE),
    Row("json-bool", {FAMILY: True, P2G: "1"}, Reason.QUANTITY_NOT_WHOLE),
    Row("two-profiles", {FAMILY: "1", P2G: "1", P4G: "1"}, Reason.TWO_PROFILES),
    Row("family-only", {FAMILY: "1"}, Reason.FAMILY_WITHOUT_PROFILE),
    Row("profile-only", {P2G: "1"}, Reason.PROFILE_WITHOUT_FAMILY),
    Row(
        "whole-card-and-partition",
        {WHOLE: "1", FAMILY: "1", P2G: "1"},
        Reason.MIXED_WITH_PARTITIONS,
    ),
    Row(
        "unknown-partitioned-xyz",
        {FAMILY: "1", P2G: "1", FAMILY + ".xyz": "1"},
        Reason.UNKNOWN_PARTITION_RESOURCE,
    ),
    Row(
        "unknown-partitioned-xyz-only",
        {FAMILY: "1", FAMILY + ".xyz": "1"},
        Reason.UNKNOWN_PARTITION_RESOURCE,
    ),
]


def _pod(limits: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {
            "containers": [
                {
                    "name": CONTAINER,
                    "image": "registry.example/train:1",
                    "resources": {"limits": limits},
                }
            ]
        },
    }


def _webhook(row: Row) -> str | Reason:
    """ "admitted" (the webhook grants nothing), or the reason of its first violation, which
    must be about this container."""
    violations = check_pod(_pod(row.limits))
    if not violations:
        return "admitted"
    assert {violation.container for violation in violations} == {CONTAINER}, violations
    return violations[0].reason


def _refusal(refused: RequestRefused) -> Reason:
    assert refused.request_reason is not None, f"refused without a request reason: {refused}"
    return refused.request_reason


def _limits_reader(row: Row) -> str | Reason:
    try:
        return profile_for(ContainerSpec(CONTAINER, row.limits))
    except RequestRefused as refused:
        return _refusal(refused)


def _create(harness: Harness, row: Row) -> None:
    """A pod the webhook never saw, listed by the kubelet as it admits it."""
    harness.kube.add_pod("default", "p", {CONTAINER: row.limits})
    harness.kubelet.pods["default/p"] = {CONTAINER: {}}


def _allocate(harness: Harness, row: Row) -> str | Reason:
    """Allocate on the family, as the kubelet calls it for the container."""
    _create(harness, row)
    try:
        harness.allocator.allocate(FAMILY, [harness.free_token()])
    except RequestRefused as refused:
        assert harness.node.instances() == []
        return _refusal(refused)
    (grant,) = harness.runtime.store.load().grants
    assert grant.containers == (CONTAINER,)
    profile: str = grant.profile
    return profile


def test_the_table_covers_every_reason_of_a_containers_limits() -> None:
    assert len({row.id for row in ROWS}) == len(ROWS)
    # The two requests-vs-limits reasons need requests, which the allocator never reads;
    # the rest are about where a container sits in its pod.
    per_container = set(Reason) - {
        Reason.REQUESTS_LIMITS_DISAGREE,
        Reason.REQUESTS_WITHOUT_LIMITS,
        Reason.PARTITION_IN_SIDECAR,
        Reason.PARTITION_IN_INIT_CONTAINER,
        Reason.EPHEMERAL_CONTAINER_RESOURCE,
        Reason.MALFORMED_POD,
    }
    assert {row.verdict for row in ROWS if isinstance(row.verdict, Reason)} == per_container


@pytest.mark.parametrize("row", ROWS, ids=lambda row: row.id)
def test_webhook_and_allocator_agree(harness: Harness, row: Row) -> None:
    webhook = _webhook(row)
    reader = _limits_reader(row)
    if FAMILY in row.limits:
        allocated = _allocate(harness, row)
    else:
        # The kubelet calls the family's Allocate only for a container that requests the
        # family: Allocate finds no container to serve, and only the limits reader speaks.
        _create(harness, row)
        with pytest.raises(RequestRefused) as refused:
            harness.allocator.allocate(FAMILY, [harness.free_token()])
        assert refused.value.reason == "unidentified"
        allocated = reader
    refused_for = row.verdict if isinstance(row.verdict, Reason) else None
    assert {"webhook": webhook, "limits reader": reader, "Allocate": allocated} == {
        "webhook": refused_for or "admitted",
        "limits reader": row.verdict,
        "Allocate": row.verdict,
    }
