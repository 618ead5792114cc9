"""An online reference for the placement benchmark: one-step lookahead over sampled futures.

The exact optimum sees the whole stream; an allocator sees only the past. This reference sits
between them: it knows what an allocator could learn from history (the mix, the arrival rate,
that durations are exponential with mean MEAN_DURATION, how many requests the stream still
has) but not the stream itself: not when live instances end, not what arrives next. At each
arrival with more than one distinct choice it plays the same sampled futures forward under ours
from every choice and keeps the one that accepts the most (ours' own choice on ties). This is
one step of policy improvement from ours: where it wins, an online rule could too; where even
it stays behind the optimum, the gap is the price of not seeing the future.

Sampled futures: the remaining life of every live instance and of the new one is drawn afresh
(exact for exponential durations; the bursty mix's shared job lengths are not modelled), and
the next `horizon` requests come from workload.stream with a seed derived from the decision, so
the reference is deterministic. Ours is memoised per card occupancy through
placement.card_option, the same ranking choose() uses (a unit test holds them equal).
"""

from __future__ import annotations

import functools
import heapq
import random
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from hygon_dcu_plugin.placement import PACK, CardView, card_option, free_placements, slices_of

from .replay import Outcome
from .tables import CardModel
from .workload import MEAN_DURATION, Request, seed_for, stream

# Per card: (first slice, slice count, end time) of each live instance.
Layout = list[list[tuple[int, int, float]]]
# One sampled future: the live instances' ends, the new instance's life, the requests to come.
Sample = tuple[Layout, float, Sequence[Request]]
NodeState = tuple[tuple[int, ...], ...]  # occupied slices per card, sorted: card order ignored


@dataclass(frozen=True)
class Lookahead:
    futures: int  # sampled futures per decision
    horizon: int  # requests in each sampled future


class MemoisedPack:
    """Ours (placement.choose with PACK) with each card's ranking memoised by occupancy."""

    def __init__(self, card: CardModel) -> None:
        self.card = card
        self._ranked: dict[
            tuple[frozenset[int], str], tuple[tuple[tuple[int, ...], int], int, int] | None
        ] = {}

    def on_card(
        self, occupied: frozenset[int], profile_name: str
    ) -> tuple[tuple[tuple[int, ...], int], int, int] | None:
        key = (occupied, profile_name)
        if key not in self._ranked:
            view = CardView(0, "memo", self.card.slice_count, self.card.profiles, occupied)
            option = card_option(view, self.card.profile(profile_name), PACK)
            self._ranked[key] = (
                None if option is None else (option[0], option[1].start, option[1].size)
            )
        return self._ranked[key]

    def choose(
        self, occupied: Sequence[frozenset[int]], profile_name: str
    ) -> tuple[int, int, int] | None:
        """(card, first slice, slice count) for a new instance, or None if nothing fits."""
        best: tuple[tuple[tuple[tuple[int, ...], int], int], int, int] | None = None
        for index, taken in enumerate(occupied):
            ranked = self.on_card(taken, profile_name)
            if ranked is not None and (best is None or (ranked[0], index) < best[0]):
                best = ((ranked[0], index), ranked[1], ranked[2])
        return None if best is None else (best[0][1], best[1], best[2])


def play_forward(ours: MemoisedPack, layout: Layout, future: Sequence[Request]) -> int:
    """Requests ours accepts from `future`, starting from `layout`."""
    taken: list[set[int]] = [set() for _ignored in layout]
    ends: list[tuple[float, int, int, int]] = []
    for index, instances in enumerate(layout):
        for start, size, end in instances:
            taken[index].update(range(start, start + size))
            ends.append((end, index, start, size))
    heapq.heapify(ends)
    accepted = 0
    for request in future:
        while ends and ends[0][0] <= request.arrive:
            _end, index, start, size = heapq.heappop(ends)
            taken[index].difference_update(range(start, start + size))
        chosen = ours.choose([frozenset(t) for t in taken], request.profile)
        if chosen is None:
            continue
        index, start, size = chosen
        taken[index].update(range(start, start + size))
        heapq.heappush(ends, (request.depart, index, start, size))
        accepted += 1
    return accepted


def _state(occupied: Sequence[frozenset[int]], index: int, start: int, size: int) -> NodeState:
    after = list(occupied)
    after[index] = occupied[index] | slices_of(start, size)
    return tuple(sorted(tuple(sorted(card)) for card in after))


@dataclass
class _Node:
    """The node as the reference replays it: live instances per card, by request id."""

    live: list[dict[int, tuple[int, int]]]

    def occupied(self) -> list[frozenset[int]]:
        return [
            frozenset(s for start, size in card.values() for s in range(start, start + size))
            for card in self.live
        ]


def _sample(
    card: CardModel,
    node: _Node,
    now: float,
    settings: tuple[str, float, int],
    seed: int,
) -> Sample:
    """One sampled future: end times of the live instances, the new one's life, what comes."""
    mix, load, requests = settings
    rng = random.Random(seed)
    layout: Layout = [
        [(start, size, now + rng.expovariate(1.0 / MEAN_DURATION)) for start, size in live.values()]
        for live in node.live
    ]
    life = rng.expovariate(1.0 / MEAN_DURATION)
    coming = stream(card, len(node.live), mix, load, requests, rng.randrange(1 << 30))
    shifted = [Request(r.id, now + r.arrive, now + r.depart, r.profile, r.slices) for r in coming]
    return layout, life, shifted


def _samples(
    card: CardModel,
    node: _Node,
    now: float,
    settings: tuple[str, float, int],
    which: tuple[int, int],
) -> list[Sample]:
    """`which` = (the decision's position in the stream, how many futures to sample)."""
    position, count = which
    return [
        _sample(card, node, now, settings, seed_for("lookahead", card.model, now, position, k))
        for k in range(count)
    ]


def decide(
    card: CardModel,
    ours: MemoisedPack,
    occupied: Sequence[frozenset[int]],
    profile_name: str,
    now: float,
    samples: Callable[[], Iterable[Sample]],
) -> tuple[int, int, int] | None:
    """(card, first slice, slice count) for the new instance, or None if nothing fits: of the
    distinct choices, the one after which ours accepts the most over the samples; ours' own
    choice unless another does strictly better."""
    default = ours.choose(occupied, profile_name)
    if default is None:
        return None
    choices: dict[NodeState, tuple[int, int, int]] = {}
    for index, taken in enumerate(occupied):
        for placement in free_placements(card.profile(profile_name), taken):
            state = _state(occupied, index, placement.start, placement.size)
            choices.setdefault(state, (index, placement.start, placement.size))
    if len(choices) < 2:
        return default
    score: Counter[NodeState] = Counter()
    for layout, life, future in samples():
        for state, (index, start, size) in choices.items():
            trial = [list(instances) for instances in layout]
            trial[index].append((start, size, now + life))
            score[state] += play_forward(ours, trial, future)
    mine = _state(occupied, *default)
    best = max(score.values(), default=0)
    if score[mine] >= best:
        return default
    return choices[next(state for state, value in score.items() if value == best)]


def replay_lookahead(
    card: CardModel,
    cards: int,
    requests: Sequence[Request],
    mix: str,
    load: float,
    lookahead: Lookahead,
) -> Outcome:
    """Replay the stream with the lookahead reference making every placement."""
    ours = MemoisedPack(card)
    node = _Node([{} for _ignored in range(cards)])
    ends: list[tuple[float, int, int]] = []
    ordered = sorted(requests, key=lambda r: (r.arrive, r.id))
    accepted = 0
    refused: Counter[str] = Counter()
    for position, request in enumerate(ordered):
        while ends and ends[0][0] <= request.arrive:
            _end, rid, index = heapq.heappop(ends)
            node.live[index].pop(rid)
        coming = min(lookahead.horizon, len(ordered) - position - 1)

        samples = functools.partial(
            _samples,
            card,
            node,
            request.arrive,
            (mix, load, coming),
            (position, lookahead.futures if coming else 0),
        )
        chosen = decide(card, ours, node.occupied(), request.profile, request.arrive, samples)
        if chosen is None:
            refused[request.profile] += 1
            continue
        index, start, size = chosen
        node.live[index][request.id] = (start, size)
        heapq.heappush(ends, (request.depart, request.id, index))
        accepted += 1
    offered = sum(r.slices * r.duration for r in ordered)
    # Stranded slice-time is not tracked for the reference (it is not a policy under test).
    return Outcome(len(ordered), accepted, offered, 0.0, 0, refused)
