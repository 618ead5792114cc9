"""Placement policy: which card and which slices a new GPU instance gets.

Pure functions over what the driver reports (legal placements per profile, occupied slices);
nothing here assumes the BW profile table. Occupied slices come from live driver state, not
only from our records, so a hand-carved instance is never overlapped.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

PACK = "pack"
SPREAD = "spread"
POLICIES = (PACK, SPREAD)


class PlacementLike(Protocol):
    @property
    def start(self) -> int: ...

    @property
    def size(self) -> int: ...


class ProfileLike(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def slices(self) -> int: ...

    @property
    def placements(self) -> Sequence[PlacementLike]: ...


@dataclass(frozen=True)
class CardView:
    """One card as the policy sees it: its profiles and the slices live instances cover."""

    index: int
    pci: str
    slice_count: int
    profiles: Sequence[ProfileLike]
    occupied: frozenset[int]

    def profile(self, name: str) -> ProfileLike | None:
        return next((p for p in self.profiles if p.name == name), None)


@dataclass(frozen=True)
class Choice:
    card: CardView
    profile: ProfileLike
    placement: PlacementLike


def slices_of(start: int, size: int) -> frozenset[int]:
    return frozenset(range(start, start + size))


def occupied_by(spans: Iterable[tuple[int, int]]) -> frozenset[int]:
    taken: set[int] = set()
    for start, size in spans:
        taken |= slices_of(start, size)
    return frozenset(taken)


def free_placements(profile: ProfileLike, occupied: frozenset[int]) -> list[PlacementLike]:
    """Legal placements of the profile that touch no occupied slice (legal ones ignore
    what is carved, so free = legal - occupied)."""
    return [p for p in profile.placements if not (slices_of(p.start, p.size) & occupied)]


def remaining(profile: ProfileLike, occupied: frozenset[int]) -> int:
    """How many more instances of the profile fit at once (non-overlapping free placements).

    Greedy by end slice is exact for intervals, whatever the placement table looks like.
    """
    count = 0
    end = -1
    for p in sorted(free_placements(profile, occupied), key=lambda q: (q.start + q.size, q.start)):
        if p.start > end:
            count += 1
            end = p.start + p.size - 1
    return count


def max_remaining(card: CardView) -> int:
    """Partitions the card can still give, counted in its most numerous free profile."""
    return max((remaining(p, card.occupied) for p in card.profiles), default=0)


def _widest_first(profiles: Sequence[ProfileLike]) -> list[ProfileLike]:
    return sorted(profiles, key=lambda p: (-p.slices, p.name))


def _within_card(card: CardView, profile: ProfileLike) -> PlacementLike | None:
    """Free placement that leaves the most room for the widest profiles (lowest start on ties)."""
    order = _widest_first(card.profiles)
    best: tuple[tuple[int, ...], int] | None = None
    chosen: PlacementLike | None = None
    for p in free_placements(profile, card.occupied):
        after = card.occupied | slices_of(p.start, p.size)
        left = tuple(remaining(q, after) for q in order)
        key = (left, -p.start)
        if best is None or key > best:
            best, chosen = key, p
    return chosen


def _damage(card: CardView, placement: PlacementLike) -> tuple[int, ...]:
    """How many fewer instances of each profile (widest first) the card could take after it."""
    after = card.occupied | slices_of(placement.start, placement.size)
    return tuple(
        remaining(q, card.occupied) - remaining(q, after) for q in _widest_first(card.profiles)
    )


def card_option(
    card: CardView, profile: ProfileLike, policy: str = PACK
) -> tuple[tuple[tuple[int, ...], int], PlacementLike] | None:
    """The placement this card would give a new instance of the profile, and the rank choose()
    compares cards by (lower wins; the card index breaks ties), or None if it does not fit.
    It depends on nothing but this card, so a caller may memoise it per occupancy."""
    placement = _within_card(card, profile)
    if placement is None:
        return None
    free = card.slice_count - len(card.occupied)
    if policy == PACK:
        return (_damage(card, placement), free), placement
    return ((), -free), placement


def choose(cards: Sequence[CardView], profile_name: str, policy: str = PACK) -> Choice | None:
    """Card and placement for one new instance of profile_name, or None if nothing fits.

    pack: the placement that costs the node the least future capacity (fewer wide instances lost
    first), then the fullest card (fewest free slices), so whole cards stay free for wide
    profiles; measured against the alternatives in bench/placement_quality.py.
    spread: the emptiest card. Ties go to the lowest card index.
    """
    if policy not in POLICIES:
        raise ValueError(f"unknown placement policy {policy!r}; use one of {POLICIES}")
    fitting: list[tuple[tuple[tuple[int, ...], int], int, Choice]] = []
    for card in cards:
        profile = card.profile(profile_name)
        if profile is None:
            continue
        option = card_option(card, profile, policy)
        if option is not None:
            rank, placement = option
            fitting.append((rank, card.index, Choice(card, profile, placement)))
    if not fitting:
        return None
    return min(fitting, key=lambda item: item[:2])[2]
