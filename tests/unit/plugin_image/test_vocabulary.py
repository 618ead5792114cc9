"""Profile from a container's limits; every refusal."""

from __future__ import annotations

import pytest
from hygon_dcu_plugin.vocabulary import RequestRefused, requested_profile, socket_name

F = "hygon.com/dcu.partitioned"


def test_one_profile() -> None:
    assert requested_profile("c", {F: "1", F + ".mig-2g.15gb": "1"}) == "2g.15gb"


@pytest.mark.parametrize(
    ("limits", "reason", "text"),
    [
        ({}, "bad_request", "must set limits hygon.com/dcu.partitioned: 1"),
        ({F: "2", F + ".mig-2g.15gb": "1"}, "bad_request", "exactly one partition"),
        ({F: "1"}, "no_profile", "add a limit hygon.com/dcu.partitioned.mig-<profile>: 1"),
        (
            {F: "1", F + ".mig-2g.15gb": "1", F + ".mig-8g.63gb": "1"},
            "two_profiles",
            "request exactly one profile",
        ),
        ({F: "1", F + ".mig-2g.15gb": "2"}, "bad_request", "the quantity must be 1"),
    ],
)
def test_refusals_name_the_fix(limits: dict[str, str], reason: str, text: str) -> None:
    with pytest.raises(RequestRefused) as refused:
        requested_profile("main", limits)
    assert refused.value.reason == reason
    assert text in str(refused.value)
    assert "'main'" in str(refused.value)


def test_socket_names_are_distinct_per_resource() -> None:
    names = {socket_name(r) for r in ("hygon.com/dcu", F, F + ".mig-2g.15gb")}
    assert len(names) == 3
    assert all("/" not in n for n in names)


@pytest.mark.parametrize("quantity", ["\u00b2", "1" * 5000, "\u0661", " ", "1e0", "+1"])
def test_odd_quantities_are_refused_not_raised(quantity: str) -> None:
    # A pod created while the webhook was down can carry any string the API server accepted.
    with pytest.raises(RequestRefused) as refused:
        requested_profile("main", {F: quantity, F + ".mig-2g.15gb": "1"})
    assert refused.value.reason == "bad_request"
    assert len(str(refused.value)) < 300
