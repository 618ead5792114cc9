"""Slice placement as a pure function: the size a request takes on a card and the card chosen,
each against figures worked out by hand."""

from __future__ import annotations

import pytest
from hygon_dcu_plugin.request import SliceRequest
from hygon_dcu_plugin.slice_placement import SliceCard, choose_slice_card, slice_size

# A C-3000 "BW" card: 80 compute units, 65,520 MiB (docs/dev/hardware.md).
CUS, MIB = 80, 65520


def card(index: int, *slices: tuple[int, int]) -> SliceCard:
    return SliceCard(index, CUS, MIB, tuple(slices))


@pytest.mark.parametrize(
    ("request_", "size"),
    [
        (SliceRequest(16380), (20, 16380)),  # a quarter of the memory: a quarter of the CUs
        (SliceRequest(16384), (21, 16384)),  # a little more: rounded up
        (SliceRequest(1), (1, 1)),  # never zero compute units
        (SliceRequest(65520), (80, 65520)),
        (SliceRequest(999_999), (80, 999_999)),  # never more than the card has (it won't fit)
        (SliceRequest(8192, 40), (40, 8192)),  # asked compute units are kept
    ],
)
def test_the_size_a_request_takes(request_: SliceRequest, size: tuple[int, int]) -> None:
    assert slice_size(request_, card(0)) == size


def test_a_card_holds_four_slices_whatever_is_left() -> None:
    full = card(0, (1, 1), (1, 1), (1, 1), (1, 1))
    assert full.free_slots == 0 and not full.fits(1, 1)
    assert choose_slice_card([full], SliceRequest(1)) is None


def test_nothing_fits_when_memory_or_compute_units_are_short() -> None:
    busy = card(0, (60, 50000))
    assert choose_slice_card([busy], SliceRequest(20000)) is None  # memory
    assert choose_slice_card([busy], SliceRequest(1000, 21)) is None  # compute units


def test_pack_fills_the_fullest_card_that_stays_usable() -> None:
    cards = [card(0), card(1, (20, 16380)), card(2, (40, 32760))]
    chosen = choose_slice_card(cards, SliceRequest(16380))
    assert chosen is not None and chosen[0].index == 2 and chosen[1:] == (20, 16380)


def test_pack_keeps_a_cards_last_slot_from_stranding_what_it_has_left() -> None:
    # Card 0 is the fullest, but with three slices: a fourth small one there would use its last
    # slot and leave 17 CUs and ~15 GiB no slice could ever have. Card 1 keeps slots after it.
    crowded = card(0, (20, 16000), (20, 16000), (20, 16000))
    roomy = card(1, (40, 32760))
    chosen = choose_slice_card([crowded, roomy], SliceRequest(2048))
    assert chosen is not None and chosen[0].index == 1
    # Without the last-slot rule the fullest card would have it: first-fit by fullness says 0.
    assert crowded.free_memory_mib < roomy.free_memory_mib
    # A slice that takes all the crowded card has left strands nothing: it goes there, not to
    # an empty card it would also fit.
    closing = choose_slice_card([crowded, card(1)], SliceRequest(MIB - 48000, 20))
    assert closing is not None and closing[0].index == 0


def test_spread_takes_the_emptiest_card_and_ties_go_to_the_lowest_index() -> None:
    cards = [card(0, (20, 16380)), card(1), card(2)]
    chosen = choose_slice_card(cards, SliceRequest(16380), "spread")
    assert chosen is not None and chosen[0].index == 1


def test_an_unknown_policy_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="unknown placement policy 'best'"):
        choose_slice_card([card(0)], SliceRequest(1), "best")
