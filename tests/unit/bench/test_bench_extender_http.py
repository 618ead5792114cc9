"""The extender's HTTPS benchmark (bench/extender_http.py) at a tiny size: the fleet is as
fragmented as it says, every pod is bound through the real server, and the table has its rows.
Nothing is timed."""

from __future__ import annotations

from hygon_dcu_plugin.geometry import Geometry

from bench import extender_http


def _holes(geometry: Geometry) -> int:
    """Free slices with a carved slice on each side, over the node's cards."""
    return sum(
        1
        for card in geometry.cards
        for n in range(1, card.slice_count - 1)
        if n not in card.occupied and {n - 1, n + 1} <= card.occupied
    )


def test_the_fleet_is_fragmented_and_partly_reserved() -> None:
    fleet = extender_http.fragmented_fleet(60, seed=1)
    assert len({node.name for node in fleet}) == 60
    assert sum(_holes(node.geometry) > 0 for node in fleet) >= 10
    reserved = sum(node.reservation is not None for node in fleet)
    assert 5 <= reserved <= 30  # about a quarter
    for node in fleet:
        if node.reservation is not None:  # a reservation never sits on a carved slice
            (taken,) = node.reservation.containers.values()
            card = next(c for c in node.geometry.cards if c.pci == taken.card)
            assert card.occupied.isdisjoint(range(taken.start, taken.start + taken.size))


def test_every_pod_is_bound_through_the_extender_at_each_size() -> None:
    out = extender_http.run((4, 8), 3)
    assert "4 nodes " in out and "8 nodes " in out and "8/4 (x2 nodes)" in out
    assert out.count("3 (3 bound)") == 2
