"""Placement policy: which card and which slices a new GPU instance gets.

Pure functions over what the driver reports (legal placements per profile, occupied slices);
nothing here assumes the BW profile table. Occupied slices come from live driver state, not
only from our grants, so a hand-carved instance is never overlapped.

The slice geometry (which slices a placement covers, which placements are free, how many
more instances fit) is the node layer's (``plugins/module_utils/node.py``), so the counts the
kubelet is told are the ones ``mig_info`` reports. The policy is generic over the caller's
profile type: on views of the node layer's cards, ``choose`` answers with the node's own
``Profile`` (and one of its placements), which ``Node.create`` takes as it is.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, Protocol

from ansible_collections.hygon.dcu.plugins.module_utils.cards import Span as PlacementLike
from ansible_collections.hygon.dcu.plugins.module_utils.cards import (
    fit_count,
    occupied_by,
    slices_of,
)
from ansible_collections.hygon.dcu.plugins.module_utils.cards import free_placements as free_spans

from hygon_dcu_plugin.request import SizedProfile, SizeRequest
from hygon_dcu_plugin.vocabulary import PACK, POLICIES, SPREAD

if TYPE_CHECKING:
    from typing_extensions import TypeVar
else:
    from typing import TypeVar

__all__ = [
    "PACK",
    "POLICIES",
    "SPREAD",
    "CardView",
    "Choice",
    "PlacementLike",
    "ProfileLike",
    "card_option",
    "choose",
    "choose_size",
    "free_placements",
    "max_remaining",
    "occupied_by",
    "remaining",
    "size_candidates",
    "slices_of",
]


class ProfileLike(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def slices(self) -> int: ...

    @property
    def placements(self) -> Sequence[PlacementLike]: ...


class SizedProfileLike(ProfileLike, SizedProfile, Protocol):
    """A profile with its placements and the figures a size request is matched against
    (``request.SizedProfile``, the one statement of those figures)."""


# The caller's profile type. The default (PEP 696) keeps a bare ``CardView`` meaning
# ``CardView[ProfileLike]``; only the type checker sees it (typing.TypeVar has no default
# before Python 3.13).
if TYPE_CHECKING:
    P_co = TypeVar("P_co", bound=ProfileLike, covariant=True, default=ProfileLike)
else:
    P_co = TypeVar("P_co", bound=ProfileLike, covariant=True)
P = TypeVar("P", bound=ProfileLike)
S = TypeVar("S", bound=SizedProfileLike)


@dataclass(frozen=True)
class CardView(Generic[P_co]):
    """One card as the policy sees it: its profiles and the slices live instances cover."""

    index: int
    pci: str
    slice_count: int
    profiles: Sequence[P_co]
    occupied: frozenset[int]

    def profile(self, name: str) -> P_co | None:
        for profile in self.profiles:  # a loop: called per card for every decision
            if profile.name == name:
                return profile
        return None


@dataclass(frozen=True)
class Choice(Generic[P_co]):
    card: CardView[P_co]
    profile: P_co
    placement: PlacementLike  # one of profile.placements


def free_placements(profile: ProfileLike, occupied: frozenset[int]) -> list[PlacementLike]:
    """Legal placements of the profile that touch no occupied slice."""
    return list(free_spans(profile.placements, occupied))


def remaining(profile: ProfileLike, occupied: frozenset[int]) -> int:
    """How many more instances of the profile fit at once (non-overlapping free placements)."""
    return fit_count(profile.placements, occupied)


def max_remaining(card: CardView) -> int:
    """Partitions the card can still give, counted in its most numerous free profile."""
    return max((fit_count(p.placements, card.occupied) for p in card.profiles), default=0)


def _widest_first(profiles: Sequence[P]) -> list[P]:
    return sorted(profiles, key=lambda p: (-p.slices, p.name))


def _within_card(card: CardView, profile: ProfileLike) -> PlacementLike | None:
    """Free placement that leaves the most room for the widest profiles (lowest start on ties)."""
    order = _widest_first(card.profiles)
    best: tuple[tuple[int, ...], int] | None = None
    chosen: PlacementLike | None = None
    for p in free_spans(profile.placements, card.occupied):
        after = card.occupied | slices_of(p.start, p.size)
        left = tuple(fit_count(q.placements, after) for q in order)
        key = (left, -p.start)
        if best is None or key > best:
            best, chosen = key, p
    return chosen


def _damage(card: CardView, placement: PlacementLike) -> tuple[int, ...]:
    """How many fewer instances of each profile (widest first) the card could take after it."""
    after = card.occupied | slices_of(placement.start, placement.size)
    return tuple(
        fit_count(q.placements, card.occupied) - fit_count(q.placements, after)
        for q in _widest_first(card.profiles)
    )


Rank = tuple[tuple[int, ...], int]


def card_option(
    card: CardView, profile: ProfileLike, policy: str = PACK
) -> tuple[Rank, PlacementLike] | None:
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


# card_option, or a caller's memo of it (same answers for the same card, profile and policy).
CardOption = Callable[[CardView, ProfileLike, str], tuple[Rank, PlacementLike] | None]


def choose(
    cards: Sequence[CardView[P]],
    profile_name: str,
    policy: str = PACK,
    option: CardOption = card_option,
) -> Choice[P] | None:
    """Card and placement for one new instance of profile_name, or None if nothing fits.

    pack: the placement that costs the node the least future capacity (fewer wide instances lost
    first), then the fullest card (fewest free slices), so whole cards stay free for wide
    profiles (bench/README.md compares it with the alternatives).
    spread: the emptiest card. Ties go to the lowest card index.
    """
    if policy not in POLICIES:
        raise ValueError(f"unknown placement policy {policy!r}; use one of {POLICIES}")
    fitting: list[tuple[Rank, int, Choice[P]]] = []
    for card in cards:
        profile = card.profile(profile_name)
        if profile is None:
            continue
        found = option(card, profile, policy)
        if found is not None:
            rank, placement = found
            fitting.append((rank, card.index, Choice(card, profile, placement)))
    if not fitting:
        return None
    return min(fitting, key=lambda item: item[:2])[2]


def size_candidates(cards: Sequence[CardView[S]], request: SizeRequest) -> list[str]:
    """The names of the profiles any card offers that cover the request, smallest first."""
    # Cards of one model share their profile objects: each is looked at once.
    offered = {id(p): p for c in cards for p in c.profiles}.values()
    return list(dict.fromkeys(p.name for p in request.smallest(offered)))


def choose_size(
    cards: Sequence[CardView[S]],
    request: SizeRequest,
    policy: str = PACK,
    option: CardOption = card_option,
    candidates: Sequence[str] | None = None,
) -> Choice[S] | None:
    """Card and placement for a size request: the smallest covering profile that has a free
    placement, among the cards where that profile covers (cards of two models may give one
    name different figures). The allocator and the scheduler extender both decide by it.
    ``candidates``: ``size_candidates(cards, request)`` when the caller has it already."""
    for name in size_candidates(cards, request) if candidates is None else candidates:
        covering = [c for c in cards if (p := c.profile(name)) is not None and request.covers(p)]
        choice = choose(covering, name, policy, option)
        if choice is not None:
            return choice
    return None
