"""Replay a request stream on an in-memory node under one placement policy.

Departures at an instant are applied before arrivals at the same instant (intervals are
half-open). A request is refused only when the policy finds no free legal placement anywhere:
the kubelet has already admitted the pod, so the allocator cannot hold a request back.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from hygon_dcu_plugin.placement import CardView, occupied_by, slices_of

from .policies import Policy
from .tables import CardModel
from .workload import Request

# Per card: the live instances by request id, each as (first slice, slice count).
Live = Sequence[dict[int, tuple[int, int]]]
# Where a request goes, seeing the live instances and the request's position in the stream:
# (card, first slice, slice count), or None to refuse.
Decider = Callable[[Live, Request, int], tuple[int, int, int] | None]


@dataclass(frozen=True)
class Outcome:
    requests: int
    accepted: int
    offered_slice_time: float
    # Refused while the node had at least as many free slices as asked for: slices x duration.
    stranded_slice_time: float
    stranded_refusals: int
    refused: Counter[str] = field(default_factory=Counter)  # refused requests by profile

    @property
    def acceptance(self) -> float:
        return self.accepted / self.requests if self.requests else 1.0

    @property
    def stranded_share(self) -> float:
        if not self.offered_slice_time:
            return 0.0
        return self.stranded_slice_time / self.offered_slice_time


def card_views(card: CardModel, spans: Sequence[dict[int, tuple[int, int]]]) -> list[CardView]:
    return [
        CardView(index, f"sim-{index}", card.slice_count, card.profiles, occupied_by(live.values()))
        for index, live in enumerate(spans)
    ]


def replay(card: CardModel, cards: int, requests: Sequence[Request], policy: Policy) -> Outcome:
    """Replay the stream with a policy that sees the node as the allocator does (CardViews)."""

    def decide(live: Live, request: Request, _position: int) -> tuple[int, int, int] | None:
        decision = policy(card_views(card, live), request.profile)
        if decision is None:
            return None
        index, placement = decision
        return index, placement.start, placement.size

    return replay_with(card, cards, requests, decide)


def replay_with(
    card: CardModel, cards: int, requests: Sequence[Request], decide: Decider
) -> Outcome:
    """Replay the stream with `decide` making every placement (checked for overlap and size)."""
    live: list[dict[int, tuple[int, int]]] = [{} for _ignored in range(cards)]
    departures: list[tuple[float, int, int]] = []  # (time, request id, card)
    free_slices = cards * card.slice_count
    accepted = 0
    offered = stranded = 0.0
    stranded_refusals = 0
    refused: Counter[str] = Counter()
    for position, request in enumerate(sorted(requests, key=lambda r: (r.arrive, r.id))):
        while departures and departures[0][0] <= request.arrive:
            _ignored, rid, index = heapq.heappop(departures)
            free_slices += live[index].pop(rid)[1]
        offered += request.slices * request.duration
        decision = decide(live, request, position)
        if decision is None:
            refused[request.profile] += 1
            if free_slices >= request.slices:
                stranded += request.slices * request.duration
                stranded_refusals += 1
            continue
        index, start, size = decision
        if occupied_by(live[index].values()) & slices_of(start, size) or size != request.slices:
            raise AssertionError(f"decider overlapped or mis-sized: {start}+{size} on card {index}")
        live[index][request.id] = (start, size)
        free_slices -= size
        accepted += 1
        heapq.heappush(departures, (request.depart, request.id, index))
    return Outcome(len(requests), accepted, offered, stranded, stranded_refusals, refused)
