"""What the best possible placement could accept: exact search for small nodes, a sound upper
bound for large ones, and a repacking reference.

- `exact`: clairvoyant search over every placement of every request (the whole stream known in
  advance). `forced=True` keeps the allocator's rule (a request that fits somewhere is placed);
  `forced=False` may also turn requests away to make room for later ones.
- `lp_bound`: the linear-programming relaxation of "accept as many requests as possible while
  the slices in use never exceed the node's slices", with free admission and free repacking.
  Every placement policy's run is a feasible point of that problem, so the LP value (rounded
  down) bounds every policy from above, forced or not. The constraint matrix is an interval
  matrix, so the LP is a min-cost flow along the time line (solved exactly in integers).
- `repacking_acceptance`: the allocator's admission rule on a node that could move instances
  for free (accept iff the live instances plus the new one can be laid out on the cards).
  A reference for "no fragmentation", NOT a bound: accepting a wide request can cost two
  narrow ones later.
"""

from __future__ import annotations

import bisect
import functools
import heapq
import itertools
import math
from collections.abc import Sequence
from fractions import Fraction

from hygon_dcu_plugin.placement import free_placements, occupied_by

from .tables import CardModel
from .workload import Request

CardState = frozenset[tuple[int, int, int]]  # (start, size, departure rank) of live instances


class SearchTooLarge(Exception):
    """The exact search would visit more states than allowed."""


def exact(
    card: CardModel,
    cards: int,
    requests: Sequence[Request],
    forced: bool = True,
    max_states: int = 2_000_000,
) -> int:
    """Most requests any clairvoyant placement can accept on this stream.

    Memoised search over node states. Cards are interchangeable, and so are layouts that a
    symmetry of the placement table maps onto each other (for BW: swapping the halves of
    the card or the slices of a pair), so each state is stored once in canonical form.
    """
    ordered = sorted(requests, key=lambda r: (r.arrive, r.id))
    departs = sorted({r.depart for r in ordered})
    rank = {t: i for i, t in enumerate(departs)}
    maps = symmetries(card)
    memo: dict[tuple[int, tuple[CardState, ...]], int] = {}

    def canonical(live: CardState) -> CardState:
        return min((_mapped(live, s) for s in maps), key=sorted)

    def best(k: int, state: tuple[CardState, ...]) -> int:
        if k == len(ordered):
            return 0
        request = ordered[k]
        gone = bisect.bisect_right(departs, request.arrive)
        state = tuple(
            sorted(
                (canonical(frozenset(i for i in live if i[2] >= gone)) for live in state),
                key=sorted,
            )
        )
        key = (k, state)
        if key in memo:
            return memo[key]
        if len(memo) >= max_states:
            raise SearchTooLarge(f"more than {max_states} states")
        profile = card.profile(request.profile)
        value = -1
        seen: set[CardState] = set()
        for index, live in enumerate(state):
            if live in seen:  # identical cards give identical futures
                continue
            seen.add(live)
            occupied = occupied_by((s, n) for s, n, _ignored in live)
            for p in free_placements(profile, occupied):
                placed = live | {(p.start, p.size, rank[request.depart])}
                nxt = (*state[:index], placed, *state[index + 1 :])
                value = max(value, 1 + best(k + 1, nxt))
        if value < 0 or not forced:
            value = max(value, best(k + 1, state))
        memo[key] = value
        return value

    empty: CardState = frozenset()
    return best(0, tuple(empty for _ignored in range(cards)))


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
    found = []
    for perm in itertools.permutations(range(n)):
        if all(
            frozenset(frozenset(perm[i] for i in block) for block in table) == table
            for table in tables
        ):
            found.append(perm)
    return tuple(found)


def _mapped(live: CardState, perm: tuple[int, ...]) -> CardState:
    out = set()
    for start, size, leaves in live:
        moved = [perm[i] for i in range(start, start + size)]
        out.add((min(moved), size, leaves))
    return frozenset(out)


def lp_bound(card: CardModel, cards: int, requests: Sequence[Request]) -> int:
    """Upper bound on the requests any policy can accept (see the module docstring)."""
    capacity = cards * card.slice_count
    times = sorted({r.arrive for r in requests} | {r.depart for r in requests})
    node = {t: i for i, t in enumerate(times)}
    scale = math.lcm(*(r.slices for r in requests)) if requests else 1
    flow = _MinCostFlow(len(times))
    for i in range(len(times) - 1):
        flow.add(i, i + 1, capacity, 0)
    for r in requests:
        # x' = slices * x (how many slices of r are "accepted"), worth 1/slices each.
        flow.add(node[r.arrive], node[r.depart], r.slices, -(scale // r.slices))
    cost = flow.run(0, len(times) - 1, capacity) if len(times) > 1 else 0
    return math.floor(Fraction(-cost, scale))


class _MinCostFlow:
    """Successive shortest paths with potentials; every arc of the input goes forward in time,
    so the first potentials come from one pass in index order despite negative costs."""

    def __init__(self, nodes: int) -> None:
        self.arcs: list[list[list[int]]] = [[] for _ignored in range(nodes)]  # to, cap, cost, rev

    def add(self, u: int, v: int, cap: int, cost: int) -> None:
        self.arcs[u].append([v, cap, cost, len(self.arcs[v])])
        self.arcs[v].append([u, 0, -cost, len(self.arcs[u]) - 1])

    def run(self, source: int, sink: int, need: int) -> int:
        n = len(self.arcs)
        inf = math.inf
        potential: list[float] = [inf] * n
        potential[source] = 0
        for u in range(n):
            if potential[u] == inf:
                continue
            for v, cap, cost, _ignored in self.arcs[u]:
                if cap > 0 and v > u and potential[u] + cost < potential[v]:
                    potential[v] = potential[u] + cost
        total = 0
        while need > 0:
            dist: list[float] = [inf] * n
            prev: list[tuple[int, int] | None] = [None] * n
            dist[source] = 0
            heap: list[tuple[float, int]] = [(0, source)]
            while heap:
                d, u = heapq.heappop(heap)
                if d > dist[u]:
                    continue
                for j, (v, cap, cost, _ignored) in enumerate(self.arcs[u]):
                    if cap <= 0 or potential[v] == inf:
                        continue
                    nd = d + cost + potential[u] - potential[v]
                    if nd < dist[v]:
                        dist[v] = nd
                        prev[v] = (u, j)
                        heapq.heappush(heap, (nd, v))
            if dist[sink] == inf:
                raise RuntimeError("no path left in the time line (cannot happen)")
            for v in range(n):
                if dist[v] < inf:
                    potential[v] += dist[v]
            push = need
            v = sink
            while v != source:
                step = prev[v]
                assert step is not None
                u, j = step
                push = min(push, self.arcs[u][j][1])
                v = u
            v = sink
            while v != source:
                step = prev[v]
                assert step is not None
                u, j = step
                arc = self.arcs[u][j]
                arc[1] -= push
                self.arcs[v][arc[3]][1] += push
                total += push * arc[2]
                v = u
            need -= push
        return total


def card_layouts(card: CardModel) -> list[frozenset[tuple[str, int, int]]]:
    """Every set of legal placements, each (profile, first slice, slice count), that share no
    slice: what one card can hold at once."""
    spans = [(p.name, q.start, q.size) for p in card.profiles for q in p.placements]
    found: list[frozenset[tuple[str, int, int]]] = []

    def grow(i: int, used: frozenset[int], chosen: frozenset[tuple[str, int, int]]) -> None:
        if i == len(spans):
            found.append(chosen)
            return
        grow(i + 1, used, chosen)
        _profile, start, size = spans[i]
        slots = frozenset(range(start, start + size))
        if not slots & used:
            grow(i + 1, used | slots, chosen | {spans[i]})

    grow(0, frozenset(), frozenset())
    return found


def _maximal_counts(card: CardModel) -> tuple[tuple[int, ...], ...]:
    """Maximal per-profile instance counts one card can hold at once (profiles in table order)."""
    names = [p.name for p in card.profiles]
    found = {
        tuple(sum(1 for profile, _start, _size in layout if profile == name) for name in names)
        for layout in card_layouts(card)
    }
    maximal = [
        c
        for c in found
        if not any(o != c and all(a >= b for a, b in zip(o, c, strict=True)) for o in found)
    ]
    return tuple(sorted(maximal))


def repacking_acceptance(card: CardModel, cards: int, requests: Sequence[Request]) -> int:
    """Requests accepted when instances could be re-laid out for free (reference, not a bound)."""
    layouts = _maximal_counts(card)
    names = [p.name for p in card.profiles]

    @functools.cache
    def fits(demand: tuple[int, ...], left: int) -> bool:
        if not any(demand):
            return True
        if left == 0:
            return False
        return any(
            fits(tuple(max(0, d - c) for d, c in zip(demand, layout, strict=True)), left - 1)
            for layout in layouts
        )

    live = [0] * len(names)
    departures: list[tuple[float, int]] = []
    accepted = 0
    for r in sorted(requests, key=lambda q: (q.arrive, q.id)):
        while departures and departures[0][0] <= r.arrive:
            live[heapq.heappop(departures)[1]] -= 1
        i = names.index(r.profile)
        live[i] += 1
        if fits(tuple(live), cards):
            accepted += 1
            heapq.heappush(departures, (r.depart, i))
        else:
            live[i] -= 1
    return accepted
