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

from ..geometry import Geometry, GeoProfile, card_views
from ..placement import PACK, CardView, Choice, choose, choose_size, size_candidates, slices_of
from ..request import PartitionRequest, ProfileRequest, SizeRequest

BINPACK = "binpack"
SPREAD = "spread"
NODE_POLICIES = (BINPACK, SPREAD)
MAX_SCORE = 10  # the 1.20 extender API's MaxExtenderPriority


@dataclass(frozen=True)
class NodeState:
    """One node as the extender sees it: its published geometry (None when unusable, with
    ``why``) and the spans reserved on it but maybe not carved yet (card pci -> spans)."""

    name: str
    geometry: Geometry | None
    why: str = ""
    reserved: Mapping[str, tuple[tuple[int, int], ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class Assignment:
    """What one container gets: card (PCI address), profile, placement."""

    container: str
    card: str
    profile: str
    start: int
    size: int


@dataclass(frozen=True)
class Placed:
    assignments: tuple[Assignment, ...]
    free_slices_after: int
    total_slices: int


@dataclass(frozen=True)
class NotPlaced:
    why: str


def _order(
    requests: Sequence[tuple[str, PartitionRequest]], profiles: list[GeoProfile]
) -> list[tuple[str, PartitionRequest]]:
    """Widest first, so a narrow container never takes the room a wide one of the same pod
    needs (the stable sort keeps the pod's order among equals)."""
    slices = {p.name: p.slices for p in profiles}

    def width(item: tuple[str, PartitionRequest]) -> int:
        request = item[1]
        if isinstance(request, ProfileRequest):
            return slices.get(request.profile, 0)
        smallest = request.smallest(profiles)
        return smallest[0].slices if smallest else 0

    return sorted(requests, key=width, reverse=True)


def _choice(
    views: list[CardView[GeoProfile]], request: PartitionRequest
) -> Choice[GeoProfile] | str | None:
    """The allocator's choice for the request (placement.choose, choose_size), or why no
    profile of the node can serve it."""
    if isinstance(request, ProfileRequest):
        if not any(v.profile(request.profile) for v in views):
            return f"no profile on this node covers {_want(request)}"
        return choose(views, request.profile, PACK)
    if not size_candidates(views, request):
        return f"no profile on this node covers {_want(request)}"
    return choose_size(views, request, PACK)


def _want(request: PartitionRequest) -> str:
    if isinstance(request, SizeRequest):
        return f"a partition of {request.describe()}"
    return f"a {request.profile} partition"


def place(state: NodeState, requests: Sequence[tuple[str, PartitionRequest]]) -> Placed | NotPlaced:
    """Where each (container, request) of one pod goes on this node, all at once, counting
    what is carved and what is reserved; or why the pod does not fit here."""
    if state.geometry is None:
        return NotPlaced(state.why or "no geometry published for this node")
    views = card_views(state.geometry, state.reserved)
    profiles = state.geometry.profiles()
    assignments: list[Assignment] = []
    for container, request in _order(requests, profiles):
        choice = _choice(views, request)
        if isinstance(choice, str):
            return NotPlaced(choice)
        if choice is None:
            return NotPlaced(f"no free placement for {_want(request)} (container {container})")
        placement = choice.placement
        assignments.append(
            Assignment(
                container, choice.card.pci, choice.profile.name, placement.start, placement.size
            )
        )
        taken = slices_of(placement.start, placement.size)
        views = [v if v.index != choice.card.index else _with(v, taken) for v in views]
    total = sum(v.slice_count for v in views)
    free = total - sum(len(v.occupied) for v in views)
    return Placed(tuple(assignments), free, total)


def _with(view: CardView[GeoProfile], taken: frozenset[int]) -> CardView[GeoProfile]:
    return CardView(view.index, view.pci, view.slice_count, view.profiles, view.occupied | taken)


def score(placed: Placed, policy: str) -> int:
    """0..MAX_SCORE: binpack scores the node fuller after the pod higher, spread emptier."""
    if policy not in NODE_POLICIES:
        raise ValueError(f"unknown node policy {policy!r}; use one of {NODE_POLICIES}")
    if placed.total_slices == 0:
        return 0
    used = placed.total_slices - placed.free_slices_after
    fullness = used * MAX_SCORE // placed.total_slices
    return fullness if policy == BINPACK else MAX_SCORE - fullness
