"""Resource names; the profile the allocator reads from a container's limits, and every refusal."""

from __future__ import annotations

import re

import grpc
import pytest
from hygon_dcu_plugin.deviceplugin.allocator import request_for
from hygon_dcu_plugin.deviceplugin.refused import RequestRefused
from hygon_dcu_plugin.kube import ContainerSpec
from hygon_dcu_plugin.refusal import AllocateRefusal
from hygon_dcu_plugin.request import ProfileRequest, Reason
from hygon_dcu_plugin.vocabulary import socket_name

F = "hygon.com/dcu.partitioned"
P2G = F + ".mig-2g.15gb"


def test_one_profile() -> None:
    assert request_for(ContainerSpec("c", {F: "1", P2G: "1"})) == ProfileRequest("2g.15gb")


@pytest.mark.parametrize("one", ["1", "01", "1.0", "1000m", "1e0", "+1", " 1 "])
def test_every_spelling_of_one_is_one(one: str) -> None:
    # The same reading as the webhook's (request.parse_container), not a stricter one.
    assert request_for(ContainerSpec("c", {F: one, P2G: one})) == ProfileRequest("2g.15gb")


@pytest.mark.parametrize(
    ("limits", "label", "reason", "text"),
    [
        ({F: "2", P2G: "1"}, "bad_request", Reason.QUANTITY_NOT_ONE, "one partition per container"),
        (
            {F: "1"},
            "no_profile",
            Reason.FAMILY_WITHOUT_PROFILE,
            "no profile: add a limit hygon.com/dcu.partitioned.mig-<profile>: 1",
        ),
        (
            {F: "1", P2G: "1", F + ".mig-8g.63gb": "1"},
            "two_profiles",
            Reason.TWO_PROFILES,
            "request exactly one profile",
        ),
        ({F: "1", P2G: "2"}, "bad_request", Reason.QUANTITY_NOT_ONE, f"{P2G}: 2"),
        ({F: "1", P2G: "500m"}, "bad_request", Reason.QUANTITY_NOT_WHOLE, "not a whole number"),
        (
            {F: "1", P2G: "1", "hygon.com/dcu": "1"},
            "bad_request",
            Reason.MIXED_WITH_PARTITIONS,
            "use partitions or whole cards in one pod",
        ),
    ],
)
def test_refusals_name_the_fix(
    limits: dict[str, str], label: str, reason: Reason, text: str
) -> None:
    with pytest.raises(RequestRefused) as refused:
        request_for(ContainerSpec("main", limits))
    # The metric label (and gRPC code) keeps the allocator's older names; the request reason
    # is the webhook's.
    assert refused.value.reason == label
    assert refused.value.request_reason is reason
    assert text in str(refused.value)
    assert 'container "main"' in str(refused.value)


def test_a_container_without_partition_is_not_served() -> None:
    with pytest.raises(RequestRefused) as refused:
        request_for(ContainerSpec("main", {"cpu": "1"}))
    assert refused.value.reason == "bad_request"
    assert refused.value.request_reason is None
    assert "requests no partition" in str(refused.value)


def test_other_problems_are_counted_in_the_message() -> None:
    with pytest.raises(RequestRefused) as refused:
        request_for(ContainerSpec("main", {F: "1e9999"}))
    assert refused.value.request_reason is Reason.QUANTITY_NOT_WHOLE
    assert str(refused.value).endswith("(and 1 more problem in its resources)")


def test_socket_names_are_distinct_per_resource() -> None:
    names = {socket_name(r) for r in ("hygon.com/dcu", F, P2G)}
    assert len(names) == 3
    assert all("/" not in n for n in names)


@pytest.mark.parametrize("quantity", ["\u00b2", "1" * 5000, "\u0661", " ", "0x1", "1_0"])
def test_odd_quantities_are_refused_not_raised(quantity: str) -> None:
    # A pod created while the webhook was down can carry any string the API server accepted.
    with pytest.raises(RequestRefused) as refused:
        request_for(ContainerSpec("main", {F: quantity, P2G: "1"}))
    assert refused.value.reason == "bad_request"
    assert refused.value.request_reason is Reason.QUANTITY_NOT_WHOLE
    assert len(str(refused.value)) < 300


def test_allocate_refusals_keep_their_labels_and_grpc_codes() -> None:
    # The labels are what the role's dashboard and alerts select on (docs/image.md); the codes
    # are what the kubelet reports on the pod.
    assert {r.value: r.status for r in AllocateRefusal} == {
        "bad_request": "INVALID_ARGUMENT",
        "no_profile": "INVALID_ARGUMENT",
        "two_profiles": "INVALID_ARGUMENT",
        "too_many": "INVALID_ARGUMENT",
        "unknown_profile": "FAILED_PRECONDITION",
        "no_capacity": "RESOURCE_EXHAUSTED",
        "unidentified": "FAILED_PRECONDITION",
        "kubelet_unreachable": "FAILED_PRECONDITION",
        "stale_grant": "FAILED_PRECONDITION",
        "card_unhealthy": "FAILED_PRECONDITION",
        "poisoned_registry": "FAILED_PRECONDITION",
        "reservation_taken": "FAILED_PRECONDITION",
        "bad_reservation": "FAILED_PRECONDITION",
        "grants_store": "FAILED_PRECONDITION",
        "slices_unreadable": "FAILED_PRECONDITION",
        "slice_too_large": "FAILED_PRECONDITION",
        "card_sliced": "FAILED_PRECONDITION",
    }
    for refusal in AllocateRefusal:
        assert re.fullmatch(r"\w+", refusal.value)
        assert grpc.StatusCode[refusal.status].name == refusal.status


def test_every_request_reason_has_one_refusal() -> None:
    special = {Reason.FAMILY_WITHOUT_PROFILE: "no_profile", Reason.TWO_PROFILES: "two_profiles"}
    for reason in Reason:
        assert reason.refusal == special.get(reason, "bad_request")
