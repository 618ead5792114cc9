"""The exact clairvoyant optimum on nodes too large for the state search in optimum.py: the same
question ("most requests any placement accepts under forced admission") as an integer program,
solved by HiGHS through scipy.

Variables: y[r, c, p] = 1 when request r gets placement p on card c. Constraints:
- a request gets at most one placement;
- instances on one card never share a slice while both live (checked at every arrival instant:
  two half-open intervals overlap exactly when one holds the other's start);
- forced admission: a request is refused only if every legal placement on every card is
  blocked by an instance that arrived before it and is still live (for each card and each
  placement: the blocking instances plus the request's own variables sum to at least 1).
Cards are interchangeable, so the k-th request (arrival order, from 0) may use cards 0..k only
(number the cards by first use); this removes symmetric copies without losing any solution.

HiGHS stops after `node_limit` branch-and-bound nodes, not after a time, so the same stream
gives the same answer every run. When it stops early the answer is an interval: `accepted` is
the best placement found (the optimum is at least that) and `bound` is HiGHS's proven limit.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import coo_matrix

from .tables import CardModel
from .workload import Request

# A variable: (request position in arrival order, card, first slice, slice count).
_Slot = tuple[int, int, int, int]


@dataclass(frozen=True)
class Solved:
    accepted: int  # requests the best placement found accepts (the optimum is at least this)
    bound: int  # no placement accepts more (equal to accepted when proven optimal)
    refused: Counter[str]  # refused requests by profile in the best placement found

    @property
    def proven(self) -> bool:
        return self.accepted == self.bound


class _Rows:
    """Sparse constraint rows built one at a time: lower <= sum(columns) <= upper."""

    def __init__(self) -> None:
        self.rows: list[int] = []
        self.cols: list[int] = []
        self.lower: list[float] = []
        self.upper: list[float] = []

    def add(self, columns: Sequence[int], lower: float, upper: float) -> None:
        row = len(self.lower)
        self.rows.extend([row] * len(columns))
        self.cols.extend(columns)
        self.lower.append(lower)
        self.upper.append(upper)

    def constraint(self, variables: int) -> LinearConstraint:
        matrix = coo_matrix(
            (np.ones(len(self.rows)), (np.array(self.rows), np.array(self.cols))),
            shape=(len(self.lower), variables),
        ).tocsr()
        return LinearConstraint(matrix, np.array(self.lower), np.array(self.upper))


def _by_slice(
    slots: Sequence[_Slot], columns: Sequence[Sequence[int]], requests: Sequence[int]
) -> dict[tuple[int, int], list[int]]:
    """The variables of these requests that would cover each (card, slice)."""
    found: dict[tuple[int, int], list[int]] = {}
    for k in requests:
        for column in columns[k]:
            _request, index, start, size = slots[column]
            for piece in range(start, start + size):
                found.setdefault((index, piece), []).append(column)
    return found


def solve(card: CardModel, cards: int, requests: Sequence[Request], node_limit: int) -> Solved:
    """Most requests any clairvoyant placement accepts on this stream (see the module docstring)."""
    ordered = sorted(requests, key=lambda r: (r.arrive, r.id))
    slots: list[_Slot] = []
    columns: list[list[int]] = []  # per request, its variables
    for k, request in enumerate(ordered):
        mine = []
        for index in range(min(k + 1, cards)):
            for placement in card.profile(request.profile).placements:
                mine.append(len(slots))
                slots.append((k, index, placement.start, placement.size))
        columns.append(mine)
    rows = _Rows()
    for mine in columns:
        rows.add(mine, -math.inf, 1)
    for instant in sorted({r.arrive for r in ordered}):
        live = [k for k, r in enumerate(ordered) if r.arrive <= instant < r.depart]
        for holding in _by_slice(slots, columns, live).values():
            if len(holding) > 1:
                rows.add(holding, -math.inf, 1)
    for k, request in enumerate(ordered):
        before = [j for j in range(k) if ordered[j].depart > request.arrive]
        taken = _by_slice(slots, columns, before)
        for index in range(cards):
            for placement in card.profile(request.profile).placements:
                blocking: set[int] = set()
                for piece in range(placement.start, placement.start + placement.size):
                    blocking.update(taken.get((index, piece), ()))
                rows.add(sorted(blocking) + columns[k], 1, math.inf)
    result = milp(
        -np.ones(len(slots)),
        constraints=rows.constraint(len(slots)),
        integrality=np.ones(len(slots), dtype=np.int64),
        bounds=Bounds(0, 1),
        options={"node_limit": node_limit},
    )
    if result.x is None:
        raise RuntimeError(f"HiGHS found no placement at all: {result.message}")
    chosen = {slots[c][0] for c in range(len(slots)) if result.x[c] > 0.5}
    refused = Counter(r.profile for k, r in enumerate(ordered) if k not in chosen)
    # HiGHS minimises -accepted; its dual bound is the proven limit (a float: round safely).
    bound = math.floor(-result.mip_dual_bound + 1e-6)
    return Solved(len(chosen), max(bound, len(chosen)), refused)
