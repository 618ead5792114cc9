"""Placement quality: how many requests each policy accepts on the same seeded streams, and how
much slice-time it strands, against the best any placement could do.

Five settings:
- 8-card nodes of each model, long streams: every policy, the repacking reference and the LP
  upper bound (bench/optimum.py explains why it is sound and why it is loose).
- 8-card nodes, short streams: every policy against the exact clairvoyant optimum under the
  allocator's admission rule (a request that fits somewhere is placed), as an integer program
  (bench/milp_optimum.py), with what the optimum turned away to get there, and the online
  lookahead reference (bench/lookahead.py) on the same streams.
- 8-card nodes, medium streams: ours and the baseline against the online lookahead reference,
  which knows the workload's distribution but not the stream: how much an online rule could gain.
- 1- and 2-card nodes, short streams: the same optimum by exhaustive search (bench/optimum.py).
- The best online allocator, exactly, where the node's states can be enumerated (8-card
  c3000-bw, 2-card nodes; bench/online_optimum.py): ours' and the baseline's exact long-run
  acceptance against it, and its optimal rule replayed on the integer program's streams.
Everything here is deterministic: seeds are fixed, the solver stops on a node count, and
nothing is timed.
"""

from __future__ import annotations

import math
import statistics
import sys
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from . import milp_optimum, optimum
from .lookahead import Lookahead, replay_lookahead
from .online_optimum import (
    Gain,
    NodeChain,
    OptimalRule,
    StateSpaceTooLarge,
    decisions,
    expected_accepted,
    optimal,
    solve,
)
from .policies import BASELINE, OURS, POLICIES, Policy
from .replay import Decider, Outcome, replay, replay_with
from .report import pct, ratio, table
from .tables import CardModel, discover
from .workload import INDEPENDENT_MIXES, MIXES, Request, seed_for, stream

MODELS = ("c3000-bw", "hypo-x8")
LOOKAHEAD = "online lookahead"
ONLINE_OPTIMUM = "online optimum"
TOLERANCE = 1e-6  # the online optimum's gains are proven to within this share of the requests
LOOKAHEAD_SAMPLING = Lookahead(futures=32, horizon=30)


@dataclass(frozen=True)
class Scale:
    load: float
    node_streams: int  # streams per (model, mix) on the 8-card node
    node_requests: int
    small: tuple[tuple[int, int, int], ...]  # (cards, streams, requests) for exact search
    # 8-card streams per (model, mix) and their length for the integer program; 0 streams: none
    exact_streams: int = 0
    exact_requests: int = 0
    # The online lookahead reference: its sampling, and the 8-card streams it is compared on
    # beside the exact setting (0 streams: only in the exact setting).
    lookahead: Lookahead = LOOKAHEAD_SAMPLING
    lookahead_streams: int = 0
    lookahead_requests: int = 0
    # Node sizes (cards) the online optimum is computed for, and the most states its chain may
    # have; its 8-card rules join the integer program's table.
    online_cards: tuple[int, ...] = ()
    online_max_states: int = 100_000


FULL = Scale(
    load=1.0,
    node_streams=10,
    node_requests=1500,
    small=((1, 30, 14), (2, 20, 10)),
    exact_streams=2,
    exact_requests=60,
    lookahead_streams=2,
    lookahead_requests=600,
    online_cards=(8, 2),
)
# A stream whose exact search needs more states than this is left out (and counted as skipped).
MAX_STATES = 300_000
# Branch-and-bound nodes the integer program may use per stream (a count, so runs repeat).
NODE_LIMIT = 300
QUICK = Scale(
    load=1.0,
    node_streams=1,
    node_requests=200,
    small=((1, 4, 10), (2, 2, 8)),
    exact_streams=1,
    exact_requests=16,
    lookahead=Lookahead(futures=4, horizon=6),
    lookahead_streams=1,
    lookahead_requests=40,
    online_cards=(2,),
    online_max_states=1_000,
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

    def add_count(self, requests: int, accepted: int) -> None:
        self.requests += requests
        self.accepted += accepted
        self.per_stream.append(accepted / requests if requests else 1.0)

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
    references: dict[str, Tally]
    skipped: int = 0  # streams the exact search could not finish
    # Whole-card requests turned away, by policy or reference name (8-card exact setting).
    widest_refused: Counter[str] = field(default_factory=Counter)
    widest_offered: int = 0
    unproven: int = 0  # streams where the integer program stopped before proving its answer


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


def _empty_cell(model: str, mix: str, policies: dict[str, Policy], *references: str) -> Cell:
    return Cell(
        model, mix, {name: Tally() for name in policies}, {ref: Tally() for ref in references}
    )


def node_cells(scale: Scale, policies: dict[str, Policy]) -> list[Cell]:
    cells = []
    for model in MODELS:
        card = discover(model)
        for mix in MIXES:
            progress(f"8 cards {model} {mix}")
            cell = _empty_cell(model, mix, policies, "repacking (ref.)", "LP bound")
            for requests in _streams(
                card, 8, mix, scale.load, scale.node_streams, scale.node_requests
            ):
                for name, policy in policies.items():
                    cell.policies[name].add(replay(card, 8, requests, policy))
                cell.references["repacking (ref.)"].add_count(
                    len(requests), optimum.repacking_acceptance(card, 8, requests)
                )
                cell.references["LP bound"].add_count(
                    len(requests), optimum.lp_bound(card, 8, requests)
                )
            cells.append(cell)
    return cells


def small_cells(scale: Scale, policies: dict[str, Policy]) -> list[tuple[int, Cell]]:
    cells = []
    for cards, count, size in scale.small:
        for model in MODELS:
            card = discover(model)
            for mix in MIXES:
                progress(f"{cards} card(s) {model} {mix}")
                cell = _empty_cell(model, mix, policies, "optimum", "LP bound")
                for requests in _streams(card, cards, mix, scale.load, count, size):
                    try:
                        best = optimum.exact(
                            card, cards, requests, forced=True, max_states=MAX_STATES
                        )
                    except optimum.SearchTooLarge:
                        cell.skipped += 1  # left out for every policy alike
                        continue
                    for name, policy in policies.items():
                        cell.policies[name].add(replay(card, cards, requests, policy))
                    cell.references["optimum"].add_count(len(requests), best)
                    cell.references["LP bound"].add_count(
                        len(requests), optimum.lp_bound(card, cards, requests)
                    )
                cells.append((cards, cell))
    return cells


def _count(cell: Cell, name: str, outcome: Outcome, widest: str) -> None:
    """Add one stream's outcome to the policy's (or reference's) tally and whole-card count."""
    tallies = cell.policies if name in cell.policies else cell.references
    tallies[name].add(outcome)
    cell.widest_refused[name] += outcome.refused[widest]


@dataclass(frozen=True)
class OnlineCell:
    """One (model, mix) of the exact online optimum: its gain, the compared policies' gains
    under the same chain, and its rule."""

    model: str
    mix: str
    cards: int
    states: int
    optimum: Gain
    policies: dict[str, Gain]
    rule: OptimalRule
    # Expected acceptance on a stream of `horizon` requests from an empty node, by the online
    # optimum (which also knows how many requests are left) and by each compared policy.
    horizon: int
    expected: dict[str, float]


def online_cells(scale: Scale, policies: dict[str, Policy]) -> tuple[list[OnlineCell], list[str]]:
    """The exact online optimum on every model whose node is small enough, and the models left
    out with why."""
    cells: list[OnlineCell] = []
    out_of_reach: list[str] = []
    compared = {name: policies[name] for name in (OURS, BASELINE)}
    horizon = scale.exact_requests or scale.node_requests
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
                best, bias = optimal(chain, TOLERANCE)
                gains: dict[str, Gain] = {}
                expected = {ONLINE_OPTIMUM: expected_accepted(chain, chain.choices, horizon)}
                for name, policy in compared.items():
                    fixed = decisions(chain, policy)
                    gains[name] = solve(chain, fixed, TOLERANCE)[0]
                    expected[name] = expected_accepted(chain, fixed, horizon)
                cells.append(
                    OnlineCell(
                        model,
                        mix,
                        cards,
                        len(chain.states),
                        best,
                        gains,
                        OptimalRule(chain, bias),
                        horizon,
                        {name: value / horizon for name, value in expected.items()},
                    )
                )
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
                pct(cell.expected[ONLINE_OPTIMUM], 3),
                pct(cell.expected[OURS], 3),
                ratio(cell.expected[OURS], cell.expected[ONLINE_OPTIMUM]),
            ]
        )
    horizon = cells[0].horizon
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
            f"{horizon} from empty: {ONLINE_OPTIMUM}",
            OURS,
            "ours /online opt",
        ],
        rows,
    )


def exact_node_cells(
    scale: Scale,
    policies: dict[str, Policy],
    rules: Mapping[tuple[str, str], Decider] | None = None,
) -> list[Cell]:
    """8-card nodes, short streams: every policy against the integer program's optimum, with
    the online lookahead and, where `rules` has one for the (model, mix), the online optimum's
    rule replayed on the same streams."""
    cells: list[Cell] = []
    if not scale.exact_streams:
        return cells
    for model in MODELS:
        card = discover(model)
        widest = max(card.profiles, key=lambda p: p.slices).name
        for mix in MIXES:
            progress(f"8 cards {model} {mix} (integer program)")
            rule = (rules or {}).get((model, mix))
            known = (ONLINE_OPTIMUM,) if rule else ()
            cell = _empty_cell(model, mix, policies, "optimum", "optimum bound", LOOKAHEAD, *known)
            for requests in _streams(
                card, 8, mix, scale.load, scale.exact_streams, scale.exact_requests
            ):
                best = milp_optimum.solve(card, 8, requests, NODE_LIMIT)
                cell.references["optimum"].add_count(len(requests), best.accepted)
                cell.references["optimum bound"].add_count(len(requests), best.bound)
                cell.unproven += not best.proven
                cell.widest_refused["optimum"] += best.refused[widest]
                cell.widest_offered += sum(r.profile == widest for r in requests)
                for name, policy in policies.items():
                    _count(cell, name, replay(card, 8, requests, policy), widest)
                online = replay_lookahead(card, 8, requests, mix, scale.load, scale.lookahead)
                _count(cell, LOOKAHEAD, online, widest)
                if rule:
                    _count(cell, ONLINE_OPTIMUM, replay_with(card, 8, requests, rule), widest)
            cells.append(cell)
    return cells


def lookahead_cells(scale: Scale, policies: dict[str, Policy]) -> list[Cell]:
    """8-card nodes, medium streams: ours and the baseline beside the online lookahead."""
    cells: list[Cell] = []
    if not scale.lookahead_streams:
        return cells
    compared = {name: policies[name] for name in (OURS, BASELINE)}
    for model in MODELS:
        card = discover(model)
        widest = max(card.profiles, key=lambda p: p.slices).name
        for mix in MIXES:
            progress(f"8 cards {model} {mix} (online lookahead)")
            cell = _empty_cell(model, mix, compared, LOOKAHEAD)
            for requests in _streams(
                card, 8, mix, scale.load, scale.lookahead_streams, scale.lookahead_requests
            ):
                cell.widest_offered += sum(r.profile == widest for r in requests)
                online = replay_lookahead(card, 8, requests, mix, scale.load, scale.lookahead)
                _count(cell, LOOKAHEAD, online, widest)
                for name, policy in compared.items():
                    _count(cell, name, replay(card, 8, requests, policy), widest)
            cells.append(cell)
    return cells


def lookahead_table(cells: Sequence[Cell]) -> str:
    rows = []
    for cell in cells:
        online = cell.references[LOOKAHEAD]
        ours = cell.policies[OURS]
        refused = cell.widest_refused
        rows.append(
            [
                f"8 card {cell.model} {cell.mix}",
                pct(online.acceptance),
                pct(ours.acceptance),
                pct(cell.policies[BASELINE].acceptance),
                f"{100 * (online.acceptance - ours.acceptance):+.2f}",
                f"{refused[LOOKAHEAD]} / {refused[OURS]} / {cell.widest_offered}",
            ]
        )
    return table(
        [
            "node model mix",
            LOOKAHEAD,
            OURS,
            BASELINE,
            "lookahead - ours pts",
            "whole-card refused lookahead / ours / asked",
        ],
        rows,
    )


def exact_node_table(cells: Sequence[Cell]) -> str:
    names = list(cells[0].policies)
    rows = []
    for cell in cells:
        best = cell.references["optimum"].acceptance
        row: list[object] = [
            f"8 card {cell.model} {cell.mix}",
            pct(best),
            ratio(cell.references["optimum bound"].acceptance, best),
        ]
        row += [ratio(t.acceptance, best) for t in cell.policies.values()]
        row.append(ratio(cell.references[LOOKAHEAD].acceptance, best))
        online = cell.references.get(ONLINE_OPTIMUM)
        row.append(ratio(online.acceptance, best) if online else "")
        refused = cell.widest_refused
        row.append(
            f"{refused['optimum']} / {refused[OURS]} / {refused[LOOKAHEAD]} / {cell.widest_offered}"
        )
        row.append(cell.unproven or "")
        rows.append(row)
    return table(
        ["node model mix", "optimum", "bound/opt"]
        + [f"{n} /opt" for n in names]
        + [f"{LOOKAHEAD} (ref.) /opt", f"{ONLINE_OPTIMUM} (ref.) /opt"]
        + ["whole-card refused opt / ours / lookahead / asked"]
        + ["unproven"],
        rows,
    )


def node_table(cells: Sequence[Cell], bound: str = "LP bound") -> str:
    names = list(cells[0].policies) + list(cells[0].references)
    rows = []
    for cell in cells:
        base = cell.policies[BASELINE].acceptance
        top = cell.references[bound].acceptance
        for name in names:
            tally = cell.policies.get(name) or cell.references[name]
            stranded = pct(tally.stranded_share) if name in cell.policies else ""
            rows.append(
                [
                    f"{cell.model} {cell.mix} | {name}",
                    pct(tally.acceptance),
                    ratio(tally.acceptance, base),
                    ratio(tally.acceptance, top),
                    stranded,
                ]
            )
    return table(["model mix | policy", "accepted", "/baseline", f"/{bound}", "stranded"], rows)


def small_table(cells: Sequence[tuple[int, Cell]]) -> str:
    rows = []
    for cards, cell in cells:
        best = cell.references["optimum"].acceptance
        row: list[object] = [
            f"{cards} card {cell.model} {cell.mix}",
            pct(best),
            ratio(best, cell.references["LP bound"].acceptance),
        ]
        row += [ratio(t.acceptance, best) for t in cell.policies.values()]
        row.append(cell.skipped or "")
        rows.append(row)
    names = list(cells[0][1].policies)
    return table(
        ["node model mix", "optimum", "opt/LP bound"] + [f"{n} /opt" for n in names] + ["skipped"],
        rows,
    )


def _behind_baseline(node: Sequence[Cell], ours: str) -> tuple[list[str], list[str], list[str]]:
    """Per-cell paired differences on the 8-card long streams, the cells behind, and those
    behind by more than two standard errors."""
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
    return lines, behind, significant


def _mean_ratio(cells: Sequence[Cell], ours: str, reference: str) -> float:
    """A policy's acceptance over a reference's, averaged over cells."""
    return statistics.fmean(
        c.policies[ours].acceptance / c.references[reference].acceptance for c in cells
    )


def _reference_to_optimum(cells: Sequence[Cell], reference: str) -> float:
    """A reference's acceptance over the exact optimum's, averaged over cells."""
    return statistics.fmean(
        c.references[reference].acceptance / c.references["optimum"].acceptance for c in cells
    )


def _lookahead_verdicts(exact_node: Sequence[Cell], online: Sequence[Cell], ours: str) -> list[str]:
    """Where the online lookahead stands: against the exact optimum, and against ours."""
    lines = []
    if exact_node:
        to_opt = _reference_to_optimum(exact_node, LOOKAHEAD)
        lines.append(
            f"{LOOKAHEAD} (knows the mix, not the stream) / exact optimum (8 cards, short "
            f"streams), mean over cells: {to_opt:.4f}; {ours} / {LOOKAHEAD}: "
            f"{_mean_ratio(exact_node, ours, LOOKAHEAD):.4f}"
        )
    compared = [c for c in online if ours in c.policies]
    if compared:
        ahead = []
        for cell in compared:
            mean, se = paired_difference(cell.references[LOOKAHEAD], cell.policies[ours])
            if mean > 2 * se:
                ahead.append(f"{cell.model} {cell.mix} ({100 * mean:+.2f} pts)")
        gain = statistics.fmean(
            c.references[LOOKAHEAD].acceptance - c.policies[ours].acceptance for c in compared
        )
        lines.append(
            f"{LOOKAHEAD} - {ours} (8 cards, medium streams), mean over cells: "
            f"{100 * gain:+.2f} pts; ahead by more than 2 standard errors on: "
            + (", ".join(ahead) or "none")
        )
    return lines


def _online_optimum_verdicts(
    cells: Sequence[OnlineCell], out_of_reach: Sequence[str], exact_node: Sequence[Cell], ours: str
) -> list[str]:
    """Ours against the best online allocator: exactly in the long run, and where that
    allocator's rule stands against the clairvoyant optimum on the short streams."""
    lines = []
    for cards in sorted({c.cards for c in cells}, reverse=True):
        measured = [c for c in cells if c.cards == cards and ours in c.policies]
        if not measured:
            continue
        to_best = statistics.fmean(
            c.policies[ours].acceptance / c.optimum.acceptance for c in measured
        )
        models = ", ".join(dict.fromkeys(c.model for c in measured))
        short = statistics.fmean(c.expected[ours] / c.expected[ONLINE_OPTIMUM] for c in measured)
        lines.append(
            f"{ours} / {ONLINE_OPTIMUM} (exact long run; {cards} cards, {models}; mixes with "
            f"independent lengths), mean over cells: {to_best:.4f} -> within 2%: "
            + ("HOLDS" if to_best >= 0.98 else "FAILS")
            + f"; expected on {measured[0].horizon} requests from empty: {short:.4f}"
        )
    if out_of_reach:
        lines.append(f"  {ONLINE_OPTIMUM} out of reach: " + "; ".join(out_of_reach))
    known = [c for c in exact_node if ONLINE_OPTIMUM in c.references]
    if known:
        to_opt = _reference_to_optimum(known, ONLINE_OPTIMUM)
        lines.append(
            f"{ONLINE_OPTIMUM}'s rule / exact clairvoyant optimum (8 cards, short streams, "
            f"the {len(known)} cells where it is known), mean: {to_opt:.4f}; {ours} there: "
            f"{_mean_ratio(known, ours, 'optimum'):.4f}"
        )
    return lines


def verdicts(
    node: Sequence[Cell],
    small: Sequence[tuple[int, Cell]],
    exact_node: Sequence[Cell],
    ours: str,
    online: Sequence[Cell] = (),
    best_online: tuple[Sequence[OnlineCell], Sequence[str]] = ((), ()),
) -> list[str]:
    lines, behind, significant = _behind_baseline(node, ours)
    verdict = "HOLDS" if not behind else "FAILS on " + ", ".join(behind)
    lines.insert(0, f"{ours} >= baseline on every mix (8-card nodes, long streams): {verdict}")
    lines.insert(
        1,
        "  8-card cells behind by more than 2 standard errors: "
        + (", ".join(significant) or "none"),
    )
    labelled = [(f"{cards}-card", c) for cards, c in small] + [("8-card", c) for c in exact_node]
    short = []
    for label, cell in labelled:
        ahead = cell.policies[ours].accepted - cell.policies[BASELINE].accepted
        if ahead < 0:
            requests = cell.policies[ours].requests
            short.append(f"{label} {cell.model} {cell.mix} ({ahead:+d} of {requests} requests)")
    lines.append(
        f"  short exact-search streams where {ours} is behind: {', '.join(short) or 'none'}"
    )
    small_cells = [c for _ignored, c in small]
    to_small = _mean_ratio(small_cells, ours, "optimum")
    lines.append(
        f"{ours} / exact optimum (1-2 cards), mean over cells: {to_small:.4f} "
        f"-> within 2%: {'HOLDS' if to_small >= 0.98 else 'FAILS'}"
    )
    if exact_node:
        # Unproven cells divide by the best placement found, which is <= the optimum, so the
        # true ratio is at most this: a FAILS here is certain, a HOLDS is not if any is unproven.
        to_node = _mean_ratio(exact_node, ours, "optimum")
        unproven = sum(c.unproven for c in exact_node)
        verdict = "HOLDS" if to_node >= 0.98 else "FAILS"
        if verdict == "HOLDS" and unproven:
            verdict = f"not proven ({unproven} stream(s) unproven)"
        lines.append(
            f"{ours} / exact optimum (8 cards, short streams), mean over cells: {to_node:.4f} "
            f"-> within 2%: {verdict}"
        )
        refused = sum(c.widest_refused["optimum"] for c in exact_node)
        ours_refused = sum(c.widest_refused[ours] for c in exact_node)
        asked = sum(c.widest_offered for c in exact_node)
        lines.append(
            f"  whole-card requests turned away there: optimum {refused}, {ours} {ours_refused}, "
            f"of {asked} asked"
        )
    to_bound = _mean_ratio(node, ours, "LP bound")
    to_repack = _mean_ratio(node, ours, "repacking (ref.)")
    lines.append(
        f"{ours} / LP upper bound (8 cards, long streams; loose), mean over cells: {to_bound:.4f}"
    )
    lines.append(f"{ours} / repacking reference (8 cards, not a bound): {to_repack:.4f}")
    lines += _online_optimum_verdicts(*best_online, exact_node, ours)
    return lines + _lookahead_verdicts(exact_node, online, ours)


def _section(heading: str, body: str) -> list[str]:
    return ["", heading, body]


def run(
    quick: bool = False, extra: dict[str, Policy] | None = None, scale: Scale | None = None
) -> str:
    scale = scale or (QUICK if quick else FULL)
    policies = dict(POLICIES) | (extra or {})
    out = [
        "== placement quality ==",
        f"offered load {scale.load:.2f} (mean slices asked for / node slices); mixes by "
        "profile width rank; stranded = slice-time refused while enough slices were free",
    ]
    for model in MODELS:
        out.append("  " + discover(model).describe())
    node = node_cells(scale, policies)
    out += _section(
        f"8-card nodes: {scale.node_streams} stream(s) x {scale.node_requests} requests per cell",
        node_table(node),
    )
    best_online = online_cells(scale, policies)
    rules = {(c.model, c.mix): c.rule for c in best_online[0] if c.cards == 8}
    exact_node = exact_node_cells(scale, policies, rules)
    if exact_node:
        out += _section(
            f"8-card nodes against the exact clairvoyant optimum (integer program, "
            f"{scale.exact_streams} stream(s) x {scale.exact_requests} requests per cell, "
            f"at most {NODE_LIMIT} branch-and-bound nodes each)",
            exact_node_table(exact_node),
        )
    if best_online[0]:
        out += _section(
            "Nodes against the best online allocator (exact long-run "
            "acceptance: the node as a Markov decision process; mixes with independent "
            "lengths; rules act on the node up to card order)",
            online_table(best_online[0]),
        )
    online = lookahead_cells(scale, policies)
    if online:
        out += _section(
            f"8-card nodes against the {LOOKAHEAD} reference ({scale.lookahead_streams} "
            f"stream(s) x {scale.lookahead_requests} requests per cell; "
            f"{scale.lookahead.futures} sampled futures of {scale.lookahead.horizon} requests "
            "per decision)",
            lookahead_table(online),
        )
    small = small_cells(scale, policies)
    sizes = ", ".join(f"{c} card: {n} x {r} requests" for c, n, r in scale.small)
    out += _section(
        f"small nodes against the exact clairvoyant optimum ({sizes})", small_table(small)
    )
    out.append("")
    for name in policies:
        if name == OURS or name not in POLICIES:
            out.extend(verdicts(node, small, exact_node, name, online, best_online))
    return "\n".join(out)
