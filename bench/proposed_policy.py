"""A candidate policy measured next to ours: least damage first, then pack.

Ours picks the fullest card first and only then the placement that keeps the widest blocks
free on that card. This candidate scores every free placement on every card by what it
destroys, counted per profile widest first (how many fewer instances of each profile the card
could still take), takes the least destructive one, and packs (fewest free slices) only
among equally destructive choices. It uses the same primitives as placement.py.
"""

from __future__ import annotations

from collections.abc import Sequence

from hygon_dcu_plugin.placement import (
    CardView,
    PlacementLike,
    free_placements,
    remaining,
    slices_of,
)

from .policies import Decision

LEAST_DAMAGE = "candidate: least damage"


def least_damage(cards: Sequence[CardView], profile_name: str) -> Decision | None:
    best: tuple[tuple[tuple[int, ...], int, int, int], int, PlacementLike] | None = None
    for card in cards:
        profile = card.profile(profile_name)
        if profile is None:
            continue
        order = sorted(card.profiles, key=lambda p: (-p.slices, p.name))
        before = [remaining(q, card.occupied) for q in order]
        free = card.slice_count - len(card.occupied)
        for placement in free_placements(profile, card.occupied):
            after = card.occupied | slices_of(placement.start, placement.size)
            loss = tuple(b - remaining(q, after) for b, q in zip(before, order, strict=True))
            key = (loss, free, card.index, placement.start)
            if best is None or key < best[0]:
                best = (key, card.index, placement)
    return None if best is None else (best[1], best[2])
