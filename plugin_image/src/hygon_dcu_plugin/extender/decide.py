"""The extender's decisions, pure functions of what it knows: can a node place every partition
container of a pod, how do nodes rank, and what is reserved on the node chosen
(docs/dev/extender.md).

Inside a node the allocator's own rule decides (``placement.choose`` with ``pack``), so the
extender reserves what the allocator would have chosen had it been alone. Across nodes the
policy is ``binpack`` (the fullest node that fits) or ``spread`` (the emptiest).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from hygon_dcu_plugin.geometry import Geometry, GeoProfile, card_views
from hygon_dcu_plugin.placement import (
    PACK,
    CardOption,
    CardView,
    Choice,
    card_option,
    choose,
    choose_size,
    size_candidates,
    slices_of,
)
from hygon_dcu_plugin.request import PartitionRequest, ProfileRequest, SizeRequest

BINPACK = "binpack"
SPREAD = "spread"
NODE_POLICIES = (BINPACK, SPREAD)
MAX_SCORE = 10  # the 1.20 extender API's MaxExtenderPriority


@dataclass(frozen=True)
class NodeState:
    """One node as the extender sees it: its published geometry (None when unusable, with
    ``why``) and what is reserved on it but maybe not carved yet: partition spans and logical
    slices, each by card pci."""

    name: str
    geometry: Geometry | None
    why: str = ""
    reserved: Mapping[str, tuple[tuple[int, int], ...]] = field(default_factory=dict)
    # card pci -> the (compute units, MiB) of the logical slices reserved there
    reserved_slices: Mapping[str, tuple[tuple[int, int], ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class Assignment:
    """What one container gets: card (PCI address), profile, placement."""

    container: str
    card: str
    profile: str
    start: int
    size: int


@dataclass(frozen=True)
class SliceAssignment:
    """What one container gets of logical slices: card (PCI address), its size."""

    container: str
    card: str
    compute_units: int
    memory_mib: int


@dataclass(frozen=True)
class Placed:
    """Where a pod's containers go, and the node's room after them out of its capacity (in
    partition slices for a partition pod, in MiB for a logical-slice pod): ``score`` reads
    the two as a fraction."""

    assignments: tuple[Assignment, ...]
    free_after: int
    capacity: int
    slices: tuple[SliceAssignment, ...] = ()


@dataclass(frozen=True)
class NotPlaced:
    why: str


def _order(
    requests: Sequence[tuple[int, tuple[str, PartitionRequest]]], profiles: Sequence[GeoProfile]
) -> list[tuple[int, tuple[str, PartitionRequest]]]:
    """Widest first, so a narrow container never takes the room a wide one of the same pod
    needs (the stable sort keeps the pod's order among equals)."""
    slices = {p.name: p.slices for p in profiles}

    def width(item: tuple[int, tuple[str, PartitionRequest]]) -> int:
        request = item[1][1]
        if isinstance(request, ProfileRequest):
            return slices.get(request.profile, 0)
        smallest = request.smallest(profiles)
        return smallest[0].slices if smallest else 0

    return sorted(requests, key=width, reverse=True)


# Why one request of a pod could not be placed: no profile of the node covers it, or no
# profile that covers it has a free placement (docs/dev/extender.md).
NO_PROFILE = "no-profile"
NO_ROOM = "no-room"


@dataclass(frozen=True)
class Outcome:
    """Where a pod's requests go on a node, by their index in the pod, or which one failed
    and how. It depends on the requests only through ``shape``, so one outcome serves every
    pod of that shape on that node content (``place_memo``)."""

    taken: tuple[tuple[int, str, str, int, int], ...]  # (index, card pci, profile, start, size)
    free_slices_after: int
    total_slices: int
    failed: tuple[str, int] | None = None  # (NO_PROFILE or NO_ROOM, index)


def _choice(
    views: list[CardView[GeoProfile]], request: PartitionRequest, option: CardOption
) -> Choice[GeoProfile] | str | None:
    """The allocator's choice for the request (placement.choose, choose_size), or NO_PROFILE
    when no profile of the node can serve it."""
    if isinstance(request, ProfileRequest):
        if not any(v.profile(request.profile) for v in views):
            return NO_PROFILE
        return choose(views, request.profile, PACK, option)
    candidates = size_candidates(views, request)
    if not candidates:
        return NO_PROFILE
    return choose_size(views, request, PACK, option, candidates)


def _want(request: PartitionRequest) -> str:
    if isinstance(request, SizeRequest):
        return f"a partition of {request.describe()}"
    return f"a {request.profile} partition"


def distinct_profiles(geometry: Geometry) -> tuple[GeoProfile, ...]:
    """Every profile of any card, once per value (two models may give one name different
    figures), in the order the cards list them."""
    return tuple(dict.fromkeys(p for card in geometry.cards for p in card.profiles))


def shape(
    requests: Sequence[tuple[str, PartitionRequest]], profiles: Sequence[GeoProfile]
) -> tuple[object, ...]:
    """What ``outcome`` reads of the requests on a node whose ``distinct_profiles`` are
    ``profiles``: a profile request by its name, a size request by the profiles it covers
    (their positions in ``profiles``)."""
    return tuple(
        request.profile
        if isinstance(request, ProfileRequest)
        else tuple(i for i, p in enumerate(profiles) if request.covers(p))
        for _container, request in requests
    )


def outcome(
    geometry: Geometry,
    reserved: Mapping[str, tuple[tuple[int, int], ...]],
    requests: Sequence[tuple[str, PartitionRequest]],
    option: CardOption = card_option,
) -> Outcome:
    """Where each request of one pod goes on this node, all at once, counting what is carved
    and what is reserved; or the first that does not fit. ``option`` is
    ``placement.card_option`` or a memo of it."""
    return outcome_on(card_views(geometry, reserved), geometry.profiles(), requests, option)


def outcome_on(
    views: list[CardView[GeoProfile]],
    profiles: Sequence[GeoProfile],
    requests: Sequence[tuple[str, PartitionRequest]],
    option: CardOption = card_option,
) -> Outcome:
    """``outcome`` from the node's card views (reservations counted) and its
    ``Geometry.profiles``, which a caller placing many pods on one node content makes once."""
    taken: list[tuple[int, str, str, int, int]] = []
    indexed = list(enumerate(requests))
    for index, (_container, request) in _order(indexed, profiles):
        choice = _choice(views, request, option)
        if choice is None:
            return Outcome((), 0, 0, (NO_ROOM, index))
        if isinstance(choice, str):
            return Outcome((), 0, 0, (choice, index))
        placement = choice.placement
        taken.append((index, choice.card.pci, choice.profile.name, placement.start, placement.size))
        used = slices_of(placement.start, placement.size)
        views = [v if v.index != choice.card.index else _with(v, used) for v in views]
    total = sum(v.slice_count for v in views)
    free = total - sum(len(v.occupied) for v in views)
    return Outcome(tuple(taken), free, total)


def answer(found: Outcome, requests: Sequence[tuple[str, PartitionRequest]]) -> Placed | NotPlaced:
    """The outcome told in this pod's container names and figures."""
    if found.failed is not None:
        kind, index = found.failed
        container, request = requests[index]
        if kind == NO_PROFILE:
            return NotPlaced(f"no profile on this node covers {_want(request)}")
        return NotPlaced(f"no free placement for {_want(request)} (container {container})")
    return Placed(
        tuple(
            Assignment(requests[index][0], card, profile, start, size)
            for index, card, profile, start, size in found.taken
        ),
        found.free_slices_after,
        found.total_slices,
    )


def place(state: NodeState, requests: Sequence[tuple[str, PartitionRequest]]) -> Placed | NotPlaced:
    """Where each (container, request) of one pod goes on this node, all at once, counting
    what is carved and what is reserved; or why the pod does not fit here."""
    if state.geometry is None:
        return NotPlaced(state.why or "no geometry published for this node")
    return answer(outcome(state.geometry, state.reserved, requests), requests)


def _with(view: CardView[GeoProfile], taken: frozenset[int]) -> CardView[GeoProfile]:
    return CardView(view.index, view.pci, view.slice_count, view.profiles, view.occupied | taken)


def score(placed: Placed, policy: str) -> int:
    """0..MAX_SCORE: binpack scores the node fuller after the pod higher, spread emptier."""
    if policy not in NODE_POLICIES:
        raise ValueError(f"unknown node policy {policy!r}; use one of {NODE_POLICIES}")
    if placed.capacity == 0:
        return 0
    used = placed.capacity - placed.free_after
    fullness = used * MAX_SCORE // placed.capacity
    return fullness if policy == BINPACK else MAX_SCORE - fullness
