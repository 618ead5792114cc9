"""The best any online allocator can do, computed exactly where the node is small enough to
enumerate: the node as a Markov decision process, solved by value iteration.

With Poisson arrivals and exponential durations (every mix but bursty, whose pods share a job's
length), what a node does next depends only on which instances are live where. The state is
the multiset of card layouts, each layout taken up to the symmetries of the placement table
(instances of one size are interchangeable, and so are cards). The allocator's one decision is
where a request goes: under forced admission it places every request that fits somewhere.

Relative value iteration on the uniformised chain gives the highest long-run acceptance any
placement rule that sees the live instances (but not the future) can reach, with a proven
bracket (for any bias vector h, min(Th - h) <= optimal gain <= max(Th - h)), and a rule that
reaches it. The same chain with a fixed rule gives that rule's exact long-run acceptance, so
ours is measured against the optimum without sampling noise. A rule here acts on a canonical
node (cards in layout order), so where ours ranks two cards equal, the tie goes as the canonical
order says rather than by card index; ours is otherwise the plugin's `choose()` unchanged.

c3000-bw has 11 card layouts up to symmetry, so an 8-card node has 43,758 states; hypo-x8 has
277, which makes about 10^15 states for 8 cards, so it is out of reach.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from hygon_dcu_plugin.placement import CardView, free_placements, occupied_by

from .policies import Policy
from .replay import Live
from .tables import CardModel
from .workload import MEAN_DURATION, Request, arrival_rate, mix_weights, narrowest_first

CardLayout = tuple[tuple[int, int], ...]  # (first slice, slice count) of live instances, sorted
MAX_STATES = 100_000
MAX_ITERATIONS = 200_000


class StateSpaceTooLarge(Exception):
    """The node has more states than the chain may enumerate."""


def card_layouts(card: CardModel) -> set[CardLayout]:
    """Every set of legal placements, each (first slice, slice count), that share no slice:
    what one card can hold at once."""
    spans = sorted({(q.start, q.size) for p in card.profiles for q in p.placements})
    found: set[CardLayout] = set()

    def grow(i: int, used: frozenset[int], chosen: CardLayout) -> None:
        if i == len(spans):
            found.add(chosen)
            return
        grow(i + 1, used, chosen)
        start, size = spans[i]
        slots = frozenset(range(start, start + size))
        if not slots & used:
            grow(i + 1, used | slots, tuple(sorted((*chosen, spans[i]))))

    grow(0, frozenset(), ())
    return found


@functools.cache
def symmetries(card: CardModel) -> tuple[tuple[int, ...], ...]:
    """Permutations of a card's slices that map every profile's legal placements onto
    themselves (found by brute force; cards have few slices). Identity only beyond 8."""
    n = card.slice_count
    if n > 8:
        return (tuple(range(n)),)
    tables = [
        frozenset(frozenset(range(q.start, q.start + q.size)) for q in p.placements)
        for p in card.profiles
    ]
    return tuple(
        perm
        for perm in itertools.permutations(range(n))
        if all(
            frozenset(frozenset(perm[i] for i in block) for block in table) == table
            for table in tables
        )
    )


@dataclass(frozen=True)
class Rates:
    """A sparse square matrix of transition rates as three numpy arrays (entry k: `rate[k]`
    from state `source[k]` to state `target[k]`; repeated pairs add up)."""

    source: np.ndarray
    target: np.ndarray
    rate: np.ndarray
    size: int

    def __matmul__(self, vector: np.ndarray) -> np.ndarray:
        """Per source state, the rate-weighted sum of `vector` over its targets."""
        weighted = self.rate * vector[self.target]
        return np.bincount(self.source, weights=weighted, minlength=self.size)

    def totals(self) -> np.ndarray:
        """Each state's total rate out."""
        return np.bincount(self.source, weights=self.rate, minlength=self.size)


@dataclass(frozen=True)
class Gain:
    """Accepted requests per unit time, proven to lie in [low, high], of `offered` arriving."""

    low: float
    high: float
    offered: float

    @property
    def acceptance(self) -> float:
        return (self.low + self.high) / (2 * self.offered)

    @property
    def error(self) -> float:
        """Half the bracket's width, as a share of the requests offered."""
        return (self.high - self.low) / (2 * self.offered)


class NodeChain:
    """The node as a Markov decision process (see the module docstring)."""

    def __init__(
        self,
        card: CardModel,
        cards: int,
        rates: Mapping[str, float],
        max_states: int = MAX_STATES,
    ) -> None:
        """`rates`: requests per unit time by profile name (profiles left out: none)."""
        unknown = set(rates) - {p.name for p in card.profiles}
        if unknown:
            raise KeyError(f"model {card.model} has no profile {sorted(unknown)}")
        self.card = card
        self.cards = cards
        self.profiles = narrowest_first(card)
        self.rates = [rates.get(p.name, 0.0) for p in self.profiles]
        self.offered = sum(self.rates)
        self._symmetries = symmetries(card)
        self.layouts = sorted({self.canonical(layout) for layout in card_layouts(card)})
        self._layout_ids = {layout: i for i, layout in enumerate(self.layouts)}
        count = math.comb(len(self.layouts) + cards - 1, cards)
        if count > max_states:
            raise StateSpaceTooLarge(
                f"{cards}-card {card.model}: {count} states ({len(self.layouts)} card layouts), "
                f"more than {max_states}"
            )
        self.states = list(itertools.combinations_with_replacement(range(len(self.layouts)), cards))
        self._state_ids = {state: i for i, state in enumerate(self.states)}
        self.choices = [self._choices(p.name) for p in self.profiles]
        self.departures, self.leaving = self._departures()

    @classmethod
    def for_mix(
        cls, card: CardModel, cards: int, mix: str, load: float, max_states: int = MAX_STATES
    ) -> NodeChain:
        """The chain of the streams workload.stream draws for this mix and load."""
        total = arrival_rate(card, cards, mix, load)
        profiles = narrowest_first(card)
        weights = mix_weights(mix, profiles)
        rates = {p.name: total * w / sum(weights) for p, w in zip(profiles, weights, strict=True)}
        return cls(card, cards, rates, max_states)

    def canonical(self, instances: Iterable[tuple[int, int]]) -> CardLayout:
        live = list(instances)
        return min(
            tuple(sorted((min(perm[i] for i in range(s, s + n)), n) for s, n in live))
            for perm in self._symmetries
        )

    def layout_id(self, instances: Iterable[tuple[int, int]]) -> int:
        return self._layout_ids[self.canonical(instances)]

    def state_id(self, layout_ids: Iterable[int]) -> int:
        return self._state_ids[tuple(sorted(layout_ids))]

    def replaced(self, state: tuple[int, ...], position: int, layout: int) -> int:
        """The state after the card at `position` of `state` takes layout `layout`."""
        return self.state_id((*state[:position], layout, *state[position + 1 :]))

    def _added(self, layout: int, profile_name: str) -> list[int]:
        """The distinct layouts a card of this layout can reach by taking one such instance."""
        live = self.layouts[layout]
        free = free_placements(self.card.profile(profile_name), occupied_by(live))
        return sorted({self.layout_id((*live, (q.start, q.size))) for q in free})

    def _choices(self, profile_name: str) -> np.ndarray:
        """Per state, the distinct states one such request can lead to; -1 pads the rows, so
        column 0 is -1 exactly where the request does not fit."""
        added = [self._added(layout, profile_name) for layout in range(len(self.layouts))]
        rows = []
        for state in self.states:
            after = {
                self.replaced(state, state.index(layout), grown)
                for layout in set(state)
                for grown in added[layout]
            }
            rows.append(sorted(after))
        width = max([1, *(len(row) for row in rows)])
        out = np.full((len(rows), width), -1, dtype=np.int64)
        for i, row in enumerate(rows):
            out[i, : len(row)] = row
        return out

    def _departures(self) -> tuple[Rates, np.ndarray]:
        """Rates from each state to each state one departure away, and each state's total."""
        ends: list[dict[int, int]] = []  # per layout: layout after one instance ends -> ways
        for live in self.layouts:
            ways: dict[int, int] = {}
            for instance in live:
                after = self.layout_id(i for i in live if i != instance)
                ways[after] = ways.get(after, 0) + 1
            ends.append(ways)
        source: list[int] = []
        target: list[int] = []
        rate: list[float] = []
        for index, state in enumerate(self.states):
            for layout in set(state):
                cards = state.count(layout)
                for after, instances in ends[layout].items():
                    source.append(index)
                    target.append(self.replaced(state, state.index(layout), after))
                    rate.append(cards * instances / MEAN_DURATION)
        matrix = Rates(
            np.asarray(source, dtype=np.int64),
            np.asarray(target, dtype=np.int64),
            np.asarray(rate, dtype=np.float64),
            len(self.states),
        )
        return matrix, matrix.totals()

    def views(self, state: tuple[int, ...]) -> list[CardView]:
        """The canonical node of a state, as a placement rule sees it."""
        return [
            CardView(
                i,
                f"state-{i}",
                self.card.slice_count,
                self.card.profiles,
                occupied_by(self.layouts[k]),
            )
            for i, k in enumerate(state)
        ]


def solve(
    chain: NodeChain, choices: Sequence[np.ndarray], tolerance: float
) -> tuple[Gain, np.ndarray]:
    """Relative value iteration; stops when the gain's bracket is narrower than `tolerance`
    of the offered requests. Returns the gain and the bias (relative value of each state)."""
    # Uniformised at a rate above every state's total, so every state may stay put: the
    # discrete chain is aperiodic and the iteration converges.
    uniform = (sum(chain.rates) + float(chain.leaving.max())) * 1.05
    stay = uniform - sum(chain.rates) - chain.leaving
    bias = np.zeros(len(chain.states))
    for _ignored in range(MAX_ITERATIONS):
        value = chain.departures @ bias + stay * bias
        for rate, options in zip(chain.rates, choices, strict=True):
            reachable = np.where(options >= 0, bias[np.maximum(options, 0)], -np.inf)
            value += rate * np.where(options[:, 0] >= 0, reachable.max(axis=1) + 1.0, bias)
        value /= uniform
        step = value - bias
        gain = Gain(float(step.min()) * uniform, float(step.max()) * uniform, chain.offered)
        bias = value - value[0]
        if gain.high - gain.low < tolerance * chain.offered:
            return gain, bias
    raise RuntimeError(f"value iteration did not converge in {MAX_ITERATIONS} steps")


def optimal(chain: NodeChain, tolerance: float = 1e-6) -> tuple[Gain, np.ndarray]:
    """The best long-run gain of any online placement rule, and the bias that reaches it."""
    return solve(chain, chain.choices, tolerance)


def decisions(chain: NodeChain, policy: Policy) -> list[np.ndarray]:
    """Per profile, the state each state moves to when the policy places such a request on the
    canonical node (-1 where it refuses): `choices` with one column."""
    fixed = []
    for profile in chain.profiles:
        column = np.full((len(chain.states), 1), -1, dtype=np.int64)
        for index, state in enumerate(chain.states):
            decision = policy(chain.views(state), profile.name)
            if decision is not None:
                card, placement = decision
                live = (*chain.layouts[state[card]], (placement.start, placement.size))
                column[index, 0] = chain.replaced(state, card, chain.layout_id(live))
        fixed.append(column)
    return fixed


def evaluate(chain: NodeChain, policy: Policy, tolerance: float = 1e-6) -> Gain:
    """A placement policy's exact long-run gain, the policy deciding on each canonical node."""
    return solve(chain, decisions(chain, policy), tolerance)[0]


class OptimalRule:
    """The optimal rule as a replay decider: of the placements open to the request, the one
    whose next state has the highest bias (lowest card, then lowest start, on ties)."""

    def __init__(self, chain: NodeChain, bias: np.ndarray) -> None:
        self.chain = chain
        self.bias = bias
        self._ids: dict[frozenset[tuple[int, int]], int] = {}

    def _layout(self, instances: Iterable[tuple[int, int]]) -> int:
        key = frozenset(instances)
        if key not in self._ids:
            self._ids[key] = self.chain.layout_id(key)
        return self._ids[key]

    def __call__(self, live: Live, request: Request, _position: int) -> tuple[int, int, int] | None:
        layouts = [self._layout(card.values()) for card in live]
        state = tuple(layouts)
        profile = self.chain.card.profile(request.profile)
        best: tuple[float, tuple[int, int, int]] | None = None
        for index, card in enumerate(live):
            for q in free_placements(profile, occupied_by(card.values())):
                grown = self._layout((*card.values(), (q.start, q.size)))
                after = self.chain.state_id((*state[:index], grown, *state[index + 1 :]))
                value = float(self.bias[after])
                if best is None or value > best[0]:
                    best = (value, (index, q.start, q.size))
        return None if best is None else best[1]
