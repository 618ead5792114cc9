"""Placement quality: how many requests each policy accepts on the same seeded streams, and how
much slice-time it strands.

Two settings:
- 8-card nodes of each model, long streams: every policy, each against the baseline, with the
  verdict "ours >= baseline on every mix" (mean paired per-stream difference).
- The best online allocator, exactly, where the node's states can be enumerated (8-card
  c3000-bw, 2-card nodes; bench/online_optimum.py): ours' and the baseline's exact long-run
  acceptance against it.
Everything here is deterministic: seeds are fixed and nothing is timed.
"""

from __future__ import annotations

import math
import statistics
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from .online_optimum import Gain, NodeChain, StateSpaceTooLarge, decisions, optimal, solve
from .policies import BASELINE, OURS, POLICIES, Policy
from .replay import Outcome, replay
from .report import pct, ratio, table
from .tables import CardModel, discover
from .workload import INDEPENDENT_MIXES, MIXES, Request, seed_for, stream

MODELS = ("c3000-bw", "hypo-x8")
ONLINE_OPTIMUM = "online optimum"
TOLERANCE = 1e-6  # the online optimum's gains are proven to within this share of the requests


@dataclass(frozen=True)
class Scale:
    load: float
    node_streams: int  # streams per (model, mix) on the 8-card node
    node_requests: int
    # Node sizes (cards) the online optimum is computed for, and the most states its chain may
    # have.
    online_cards: tuple[int, ...] = ()
    online_max_states: int = 100_000


FULL = Scale(load=1.0, node_streams=10, node_requests=1500, online_cards=(8, 2))
QUICK = Scale(
    load=1.0, node_streams=1, node_requests=200, online_cards=(2,), online_max_states=1_000
)


@dataclass
class Tally:
    """Sums over the streams of one (model, mix) cell, plus per-stream acceptance."""

    requests: int = 0
    accepted: int = 0
    offered: float = 0.0
    stranded: float = 0.0
    per_stream: list[float] = field(default_factory=list)

    def add(self, outcome: Outcome) -> None:
        self.requests += outcome.requests
        self.accepted += outcome.accepted
        self.offered += outcome.offered_slice_time
        self.stranded += outcome.stranded_slice_time
        self.per_stream.append(outcome.acceptance)

    @property
    def acceptance(self) -> float:
        return self.accepted / self.requests if self.requests else 1.0

    @property
    def stranded_share(self) -> float:
        return self.stranded / self.offered if self.offered else 0.0


@dataclass
class Cell:
    model: str
    mix: str
    policies: dict[str, Tally]


def progress(what: str) -> None:
    """Where a long run is (stderr, so the tables on stdout stay byte-identical)."""
    print(f"  placement: {what}", file=sys.stderr, flush=True)


def paired_difference(a: Tally, b: Tally) -> tuple[float, float]:
    """Mean per-stream acceptance difference a - b and its standard error."""
    diffs = [x - y for x, y in zip(a.per_stream, b.per_stream, strict=True)]
    mean = statistics.fmean(diffs)
    se = statistics.stdev(diffs) / math.sqrt(len(diffs)) if len(diffs) > 1 else 0.0
    return mean, se


def _streams(
    card: CardModel, cards: int, mix: str, load: float, count: int, requests: int
) -> Iterable[list[Request]]:
    for replica in range(count):
        yield stream(card, cards, mix, load, requests, seed_for(card.model, cards, mix, replica))


def node_cells(scale: Scale, policies: dict[str, Policy]) -> list[Cell]:
    cells = []
    for model in MODELS:
        card = discover(model)
        for mix in MIXES:
            progress(f"8 cards {model} {mix}")
            cell = Cell(model, mix, {name: Tally() for name in policies})
            for requests in _streams(
                card, 8, mix, scale.load, scale.node_streams, scale.node_requests
            ):
                for name, policy in policies.items():
                    cell.policies[name].add(replay(card, 8, requests, policy))
            cells.append(cell)
    return cells


def node_table(cells: Sequence[Cell]) -> str:
    rows = []
    for cell in cells:
        base = cell.policies[BASELINE].acceptance
        for name, tally in cell.policies.items():
            rows.append(
                [
                    f"{cell.model} {cell.mix} | {name}",
                    pct(tally.acceptance),
                    ratio(tally.acceptance, base),
                    pct(tally.stranded_share),
                ]
            )
    return table(["model mix | policy", "accepted", "/baseline", "stranded"], rows)


@dataclass(frozen=True)
class OnlineCell:
    """One (model, mix) of the exact online optimum: its gain and the compared policies' gains
    under the same chain."""

    model: str
    mix: str
    cards: int
    states: int
    optimum: Gain
    policies: dict[str, Gain]


def online_cells(scale: Scale, policies: dict[str, Policy]) -> tuple[list[OnlineCell], list[str]]:
    """The exact online optimum on every model whose node is small enough, and the models left
    out with why."""
    cells: list[OnlineCell] = []
    out_of_reach: list[str] = []
    compared = {name: policies[name] for name in (OURS, BASELINE)}
    for cards in scale.online_cards:
        for model in MODELS:
            card = discover(model)
            for mix in INDEPENDENT_MIXES:
                progress(f"{cards} cards {model} {mix} (online optimum)")
                try:
                    chain = NodeChain.for_mix(card, cards, mix, scale.load, scale.online_max_states)
                except StateSpaceTooLarge as error:
                    out_of_reach.append(str(error))
                    break  # the state space does not depend on the mix
                best, _bias = optimal(chain, TOLERANCE)
                gains = {
                    name: solve(chain, decisions(chain, policy), TOLERANCE)[0]
                    for name, policy in compared.items()
                }
                cells.append(OnlineCell(model, mix, cards, len(chain.states), best, gains))
    return cells, out_of_reach


def online_table(cells: Sequence[OnlineCell]) -> str:
    rows = []
    for cell in cells:
        ours = cell.policies[OURS].acceptance
        best = cell.optimum.acceptance
        rows.append(
            [
                f"{cell.cards} card {cell.model} {cell.mix}",
                cell.states,
                pct(best, 3),
                pct(ours, 3),
                pct(cell.policies[BASELINE].acceptance, 3),
                ratio(ours, best),
                f"{100 * (ours - best):+.3f}",
                f"{max(c.error for c in (cell.optimum, *cell.policies.values())):.0e}",
            ]
        )
    return table(
        [
            "node model mix",
            "states",
            ONLINE_OPTIMUM,
            OURS,
            BASELINE,
            "ours /online opt",
            "ours - online opt pts",
            "+/- (proven)",
        ],
        rows,
    )


def baseline_verdict(node: Sequence[Cell], ours: str) -> list[str]:
    """The verdict that ours >= the baseline on every mix (8-card long streams), then the cells
    behind by more than two standard errors and the paired difference per cell."""
    lines, behind, significant = [], [], []
    for cell in node:
        mean, se = paired_difference(cell.policies[ours], cell.policies[BASELINE])
        lines.append(
            f"  8-card {cell.model} {cell.mix}: {ours} - baseline = "
            f"{100 * mean:+.3f} pts (s.e. {100 * se:.3f})"
        )
        if mean < 0:
            behind.append(f"{cell.model} {cell.mix} ({100 * mean:+.3f} pts)")
            if mean < -2 * se:
                significant.append(f"{cell.model} {cell.mix}")
    verdict = "HOLDS" if not behind else "FAILS on " + ", ".join(behind)
    return [
        f"{ours} >= baseline on every mix (8-card nodes, long streams): {verdict}",
        "  8-card cells behind by more than 2 standard errors: "
        + (", ".join(significant) or "none"),
        *lines,
    ]


def online_verdict(cells: Sequence[OnlineCell], out_of_reach: Sequence[str]) -> list[str]:
    """Ours against the best online allocator, exactly in the long run, per node size."""
    lines = []
    for cards in sorted({c.cards for c in cells}, reverse=True):
        measured = [c for c in cells if c.cards == cards]
        to_best = statistics.fmean(
            c.policies[OURS].acceptance / c.optimum.acceptance for c in measured
        )
        models = ", ".join(dict.fromkeys(c.model for c in measured))
        lines.append(
            f"{OURS} / {ONLINE_OPTIMUM} (exact long run; {cards} cards, {models}; mixes with "
            f"independent lengths), mean over cells: {to_best:.4f} -> within 2%: "
            + ("HOLDS" if to_best >= 0.98 else "FAILS")
        )
    if out_of_reach:
        lines.append(f"  {ONLINE_OPTIMUM} out of reach: " + "; ".join(out_of_reach))
    return lines


def run(quick: bool = False, scale: Scale | None = None) -> str:
    scale = scale or (QUICK if quick else FULL)
    out = [
        "== placement quality ==",
        f"offered load {scale.load:.2f} (mean slices asked for / node slices); mixes by "
        "profile width rank; stranded = slice-time refused while enough slices were free",
    ]
    for model in MODELS:
        out.append("  " + discover(model).describe())
    node = node_cells(scale, POLICIES)
    out += [
        "",
        f"8-card nodes: {scale.node_streams} stream(s) x {scale.node_requests} requests per cell",
        node_table(node),
    ]
    online, out_of_reach = online_cells(scale, POLICIES)
    if online:
        out += [
            "",
            "Nodes against the best online allocator (exact long-run acceptance: the node as a "
            "Markov decision process; mixes with independent lengths; rules act on the node up "
            "to card order)",
            online_table(online),
        ]
    out.append("")
    out += baseline_verdict(node, OURS)
    out += online_verdict(online, out_of_reach)
    return "\n".join(out)
