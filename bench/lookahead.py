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

from hygon_dcu_plugin.placement import (
    PACK,
    CardView,
    card_option,
    free_placements,
    occupied_by,
    slices_of,
)

from .replay import Live, Outcome, replay_with
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
    # Frozen sets, as the memo keys them; only the card that changes is rebuilt.
    taken = [occupied_by((start, size) for start, size, _end in instances) for instances in layout]
    ends = [
        (end, index, start, size)
        for index, instances in enumerate(layout)
        for start, size, end in instances
    ]
    heapq.heapify(ends)
    accepted = 0
    for request in future:
        while ends and ends[0][0] <= request.arrive:
            _end, index, start, size = heapq.heappop(ends)
            taken[index] -= slices_of(start, size)
        chosen = ours.choose(taken, request.profile)
        if chosen is None:
            continue
        index, start, size = chosen
        taken[index] |= slices_of(start, size)
        heapq.heappush(ends, (request.depart, index, start, size))
        accepted += 1
    return accepted


def _state(occupied: Sequence[frozenset[int]], index: int, start: int, size: int) -> NodeState:
    after = list(occupied)
    after[index] = occupied[index] | slices_of(start, size)
    return tuple(sorted(tuple(sorted(card)) for card in after))


@dataclass(frozen=True)
class _Futures:
    """What may come after a decision, sampled (see the module docstring)."""

    card: CardModel
    live: Live
    mix: str
    load: float
    lookahead: Lookahead

    def after(self, now: float, position: int, remaining: int) -> list[Sample]:
        """The samples for the decision at `position` in the stream, `remaining` requests
        before its end: none when nothing is left to come."""
        coming = min(self.lookahead.horizon, remaining)
        count = self.lookahead.futures if coming else 0
        return [
            self._one(now, coming, seed_for("lookahead", self.card.model, now, position, k))
            for k in range(count)
        ]

    def _one(self, now: float, coming: int, seed: int) -> Sample:
        """End times of the live instances, the new one's life, the next `coming` requests."""
        rng = random.Random(seed)
        layout: Layout = [
            [(start, size, now + rng.expovariate(1.0 / MEAN_DURATION)) for start, size in live]
            for live in (card.values() for card in self.live)
        ]
        life = rng.expovariate(1.0 / MEAN_DURATION)
        cards = len(self.live)
        later = stream(self.card, cards, self.mix, self.load, coming, rng.randrange(1 << 30))
        shifted = [
            Request(r.id, now + r.arrive, now + r.depart, r.profile, r.slices) for r in later
        ]
        return layout, life, shifted


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
    total = len(requests)

    def choose(live: Live, request: Request, position: int) -> tuple[int, int, int] | None:
        futures = _Futures(card, live, mix, load, lookahead)
        samples = functools.partial(futures.after, request.arrive, position, total - position - 1)
        occupied = [occupied_by(instances.values()) for instances in live]
        return decide(card, ours, occupied, request.profile, request.arrive, samples)

    return replay_with(card, cards, requests, choose)
