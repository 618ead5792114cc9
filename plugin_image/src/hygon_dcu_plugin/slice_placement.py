"""Which card a new logical slice goes on (docs/dev/logical-slices.md, "Placement").

Pure functions over what the library reports of each card: its compute units and memory, the
live slices' sizes and how many slices a card may hold. A slice has no fixed position (the
driver gives it the card's lowest free compute units), so a card is a bin of three
capacities: compute units, memory, slice count.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from hygon_dcu_plugin.request import SliceRequest
from hygon_dcu_plugin.vocabulary import PACK, POLICIES

# Slices a card holds at most (the vendor's limit; docs/dev/hardware.md).
MAX_SLICES_PER_CARD = 4


@dataclass(frozen=True)
class SliceCard:
    """A card as slice placement sees it; ``slices``: the live ones' (compute units, MiB)."""

    index: int
    compute_units: int
    memory_mib: int
    slices: tuple[tuple[int, int], ...] = ()
    max_slices: int = MAX_SLICES_PER_CARD

    @property
    def free_compute_units(self) -> int:
        return self.compute_units - sum(cus for cus, _mib in self.slices)

    @property
    def free_memory_mib(self) -> int:
        return self.memory_mib - sum(mib for _cus, mib in self.slices)

    @property
    def free_slots(self) -> int:
        return self.max_slices - len(self.slices)

    def fits(self, compute_units: int, memory_mib: int) -> bool:
        return (
            self.free_slots > 0
            and compute_units <= self.free_compute_units
            and memory_mib <= self.free_memory_mib
        )


def room_text(cards: Sequence[SliceCard]) -> str:
    """What each card has free, as refusals tell it."""
    shown = [
        f"card {c.index}: {c.free_slots} of {c.max_slices} slices, {c.free_compute_units} "
        f"compute units, {c.free_memory_mib} MiB free"
        for c in cards
    ]
    return "; ".join(shown) or "no card offers slices"


def slice_size(request: SliceRequest, card: SliceCard) -> tuple[int, int]:
    """(compute units, MiB) the request takes on ``card``: its own compute units, or the
    card's in proportion to the memory asked (rounded up, at least one, at most the card's)."""
    if request.compute_units is not None:
        return request.compute_units, request.memory_mib
    share = math.ceil(card.compute_units * request.memory_mib / max(card.memory_mib, 1))
    return min(max(share, 1), card.compute_units), request.memory_mib


def _left_after(card: SliceCard, compute_units: int, memory_mib: int) -> tuple[float, float]:
    """After the slice: (what no later slice could use, what is left), each in card fractions
    of compute units plus memory. Once a card's compute units, memory or slice count runs out,
    all it has left of the others is stranded."""
    cus = (card.free_compute_units - compute_units) / max(card.compute_units, 1)
    mib = (card.free_memory_mib - memory_mib) / max(card.memory_mib, 1)
    slots = card.free_slots - 1
    left = cus + mib
    stranded = left if min(cus, mib, slots) <= 0 else 0.0
    return stranded, left


def choose_slice_card(
    cards: Sequence[SliceCard], request: SliceRequest, policy: str = PACK
) -> tuple[SliceCard, int, int] | None:
    """The card for one new slice and its (compute units, MiB), or None if no card fits.

    pack: the card where the slice strands the least (a card whose compute units, memory or
    slice count it would use up, with the others left over, comes last), then the one it leaves
    fullest, so whole cards stay free for large slices (bench/README.md measures it).
    spread: the card with the most left. Ties go to the lowest card index.
    """
    if policy not in POLICIES:
        raise ValueError(f"unknown placement policy {policy!r}; use one of {POLICIES}")
    fitting: list[tuple[tuple[float, ...], int, SliceCard, int, int]] = []
    for card in cards:
        cus, mib = slice_size(request, card)
        if not card.fits(cus, mib):
            continue
        stranded, left = _left_after(card, cus, mib)
        rank = (stranded, left) if policy == PACK else (-left,)
        fitting.append((rank, card.index, card, cus, mib))
    if not fitting:
        return None
    _rank, _index, card, cus, mib = min(fitting, key=lambda item: item[:2])
    return card, cus, mib
