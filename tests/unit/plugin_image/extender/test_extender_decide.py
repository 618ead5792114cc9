"""The extender's choice inside a node is the allocator's (``placement.choose_size``), down to a
node whose cards give one profile name different figures."""

from __future__ import annotations

from hygon_dcu_plugin.extender.decide import NodeState, NotPlaced, Placed, place
from hygon_dcu_plugin.geometry import GeoCard, Geometry, GeoPlacement, GeoProfile
from hygon_dcu_plugin.request import SizeRequest


def card(pci: str, memory_mib: int) -> GeoCard:
    # HYPOTHETICAL: two card models that both call their 1-slice profile "1g".
    profile = GeoProfile("1g", 1, memory_mib, 10, tuple(GeoPlacement(s, 1) for s in range(4)))
    return GeoCard(pci, 4, (profile,), frozenset())


def test_a_size_goes_to_the_card_whose_profile_of_that_name_covers_it() -> None:
    small, large = card("0000:03:00.0", 8000), card("0000:04:00.0", 16000)
    state = NodeState("n", Geometry(1, (small, large)))
    placed = place(state, [("c", SizeRequest(12000))])
    assert isinstance(placed, Placed), placed
    ((assignment),) = placed.assignments
    assert assignment.card == large.pci


def test_a_size_no_card_covers_is_not_placed() -> None:
    state = NodeState("n", Geometry(1, (card("0000:03:00.0", 8000),)))
    placed = place(state, [("c", SizeRequest(12000))])
    assert isinstance(placed, NotPlaced) and "no profile on this node covers" in placed.why
