"""The placement policy, pure: any profile table, not only BW."""

from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.hygon.dcu.plugins.module_utils import cards
from hygon_dcu_plugin import placement
from hygon_dcu_plugin.placement import CardView, choose, free_placements, remaining
from hypothesis import given
from hypothesis import strategies as st
from profile_tables import BW, P, Prof

# Invented table: 6 slices, an unaligned 3-slice profile, overlapping legal placements.
ODD = (
    Prof("1s", 1, tuple(P(s, 1) for s in range(6))),
    Prof("3s", 3, (P(0, 3), P(2, 3), P(3, 3))),
    Prof("6s", 6, (P(0, 6),)),
)


def card(
    index: int, occupied: set[int], profiles: tuple[Prof, ...] = BW, slices: int = 4
) -> CardView:
    return CardView(index, f"pci{index}", slices, profiles, frozenset(occupied))


def test_pack_picks_the_fullest_card_that_fits() -> None:
    cards = [card(0, set()), card(1, {0}), card(2, {0, 1, 2, 3})]
    choice = choose(cards, "2g")
    assert choice is not None and choice.card.index == 1


def test_pack_prefers_the_card_where_the_instance_costs_no_wide_capacity() -> None:
    # On card 0 (fuller) every free slice lies in its last 3-slice block; card 1 can take a
    # 1-slice instance and still offer a 3-slice one. Fullest-first would close card 0's block.
    cards = [card(0, {0, 1, 2}, ODD, 6), card(1, {5}, ODD, 6)]
    choice = choose(cards, "1s")
    assert choice is not None and choice.card.index == 1
    assert remaining(ODD[1], cards[1].occupied | {choice.placement.start}) == 1


def test_spread_picks_the_emptiest_card() -> None:
    cards = [card(0, {0}), card(1, set()), card(2, {0, 1})]
    choice = choose(cards, "2g", "spread")
    assert choice is not None and choice.card.index == 1


def test_within_a_card_the_widest_aligned_block_stays_free() -> None:
    # Slice 0 taken: a 1-slice instance goes to slice 1, keeping 2:2 free for a 4g.
    choice = choose([card(0, {0})], "2g")
    assert choice is not None and choice.placement.start == 1
    # Slice 2 taken: it goes to slice 3, keeping 0:2.
    choice = choose([card(0, {2})], "2g")
    assert choice is not None and choice.placement.start == 3


def test_never_reuses_an_occupied_slice_and_says_none_when_full() -> None:
    assert choose([card(0, {0, 2})], "4g") is None
    assert choose([card(0, {1}), card(1, {3})], "8g") is None
    choice = choose([card(0, {1}), card(1, {3})], "4g")
    # Equally full: the lower index wins; its only free 4g block is 2:2.
    assert choice is not None and (choice.card.index, choice.placement.start) == (0, 2)


def test_works_for_another_profile_table() -> None:
    odd = card(0, {0}, ODD, 6)
    assert remaining(ODD[1], odd.occupied) == 1  # 3:3 only (2:3 overlaps it)
    choice = choose([odd], "3s")
    # 2:3 and 3:3 leave the same room (two single slices): the lower start wins.
    assert choice is not None and choice.placement.start == 2
    choice = choose([odd], "1s")
    assert choice is not None
    # The 1-slice instance keeps a 3-slice placement free.
    after = odd.occupied | {choice.placement.start}
    assert remaining(ODD[1], frozenset(after)) == 1


def test_unknown_policy_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown placement policy"):
        choose([card(0, set())], "2g", "random")


@given(
    st.sets(st.integers(0, 5)),
    st.sampled_from(["1s", "3s", "6s"]),
    st.sampled_from(["pack", "spread"]),
)
def test_choice_is_always_free_and_legal(occupied: set[int], profile: str, policy: str) -> None:
    view = card(0, occupied, ODD, 6)
    prof = view.profile(profile)
    assert prof is not None
    choice = choose([view], profile, policy)
    free = free_placements(prof, view.occupied)
    if choice is None:
        assert free == []
    else:
        assert choice.placement in free
        taken = set(range(choice.placement.start, choice.placement.start + choice.placement.size))
        assert not taken & occupied


def most_disjoint(placements: list[P]) -> int:
    """Brute force: the largest set of placements no two of which share a slice."""
    for size in range(len(placements), 0, -1):
        for combo in itertools.combinations(placements, size):
            covered = [s for p in combo for s in range(p.start, p.start + p.size)]
            if len(covered) == len(set(covered)):
                return size
    return 0


@given(st.sets(st.integers(0, 5)), st.sampled_from(ODD))
def test_remaining_is_the_most_free_placements_that_fit_together(
    occupied: set[int], profile: Prof
) -> None:
    # The one count the kubelet is told and mig_info reports (node.fit_count), on a table
    # with overlapping legal placements.
    taken = frozenset(occupied)
    free = free_placements(profile, taken)
    assert free == [
        p for p in profile.placements if not occupied & set(range(p.start, p.start + p.size))
    ]
    assert remaining(profile, taken) == most_disjoint(free)


def test_the_geometry_is_the_node_layers() -> None:
    # One definition (module_utils/cards.py): the node layer counts with it, placement decides.
    assert placement.slices_of is cards.slices_of
    assert placement.occupied_by is cards.occupied_by
    assert placement.PlacementLike is cards.Span


def test_the_configuration_loads_without_the_collection() -> None:
    # The CLI reads its configuration (which imports the policy names) before it finds the
    # collection; that must not need the collection yet.
    source = Path(placement.__file__).resolve().parents[1]
    probe = (
        "import sys; import hygon_dcu_plugin.config; "
        "print(sorted(m for m in sys.modules if m.startswith('ansible_collections')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        env={"PYTHONPATH": str(source)},
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.strip() == "[]"
