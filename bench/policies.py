"""The placement policies compared: ours (from the plugin, unchanged) and the baselines.

A policy sees the node as the allocator does (one CardView per card) and answers the card index
and placement for one new instance, or None when nothing fits.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from hygon_dcu_plugin.placement import (
    PACK,
    SPREAD,
    CardView,
    PlacementLike,
    choose,
    free_placements,
)

Decision = tuple[int, PlacementLike]
Policy = Callable[[Sequence[CardView], str], Decision | None]


def _ours(policy: str) -> Policy:
    def decide(cards: Sequence[CardView], profile_name: str) -> Decision | None:
        choice = choose(cards, profile_name, policy)
        return None if choice is None else (choice.card.index, choice.placement)

    return decide


def _lowest_free(card: CardView, profile_name: str) -> PlacementLike | None:
    profile = card.profile(profile_name)
    if profile is None:
        return None
    free = free_placements(profile, card.occupied)
    return min(free, key=lambda p: p.start, default=None)


def fullest_lowest_start(cards: Sequence[CardView], profile_name: str) -> Decision | None:
    """The best-known operator's policy: fullest card that fits, lowest free legal start."""
    best: tuple[int, int, PlacementLike] | None = None
    for card in cards:
        placement = _lowest_free(card, profile_name)
        if placement is None:
            continue
        free = card.slice_count - len(card.occupied)
        if best is None or (free, card.index) < best[:2]:
            best = (free, card.index, placement)
    return None if best is None else (best[1], best[2])


def first_fit(cards: Sequence[CardView], profile_name: str) -> Decision | None:
    """Lowest card index that fits, lowest free legal start."""
    for card in sorted(cards, key=lambda c: c.index):
        placement = _lowest_free(card, profile_name)
        if placement is not None:
            return (card.index, placement)
    return None


OURS = "ours (pack)"
BASELINE = "fullest, lowest start"

POLICIES: dict[str, Policy] = {
    OURS: _ours(PACK),
    BASELINE: fullest_lowest_start,
    "first-fit": first_fit,
    "spread": _ours(SPREAD),
}
