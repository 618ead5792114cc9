"""Slice placement quality: our slice placement (``slice_placement.choose_slice_card``, pack)
against first-fit and the baseline "fullest card that fits", on the same seeded streams.

The streams are the partition benchmark's (``workload.py``: Poisson arrivals, exponential or
bursty lengths, offered load 1.0), each request asking one logical slice with the memory of the
profile it names and no compute units (so the card's in proportion to the memory). Card sizes
and the profiles' memory are read through the node layer from a simulated 8-card node of each
model. A card holds at most four slices.

For each policy: requests accepted, those refused while the node had enough memory and compute
units free in total ("refused with room"), and the memory-time of those refusals as a share of
the memory-time offered ("stranded"). Deterministic: fixed seeds, nothing timed.
"""

from __future__ import annotations

import functools
import heapq
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ansible_collections.hygon.dcu.plugins.module_utils.node import Node
from hygon_dcu_plugin.request import SliceRequest
from hygon_dcu_plugin.slice_placement import SliceCard, choose_slice_card, slice_size
from hygon_dcu_plugin.vocabulary import PACK, SPREAD

from .report import pct, ratio, table
from .tables import LIBRARY, CardModel, discover, simulated_node
from .workload import MIXES, Request, seed_for, stream

MODELS = ("c3000-bw", "hypo-x8")
CARDS = 8

# A policy sees each card's live slices and answers the card index, or None to refuse.
SlicePolicy = Callable[[Sequence[SliceCard], SliceRequest], int | None]


@dataclass(frozen=True)
class SliceModel:
    """A card of a model as slices see it, and the memory of each of its profiles."""

    card: CardModel
    compute_units: int
    memory_mib: int
    profile_memory: dict[str, int]


@functools.cache
def slice_model(model: str) -> SliceModel:
    """Read through the node layer, as the plugin reads it."""
    with simulated_node(model, CARDS) as root:
        cards = Node(host_root=root, library_path=str(LIBRARY)).cards()
    first = cards[0]
    return SliceModel(
        discover(model),
        first.cu_count,
        first.memory_mib,
        {profile.name: profile.memory_mib for profile in first.profiles},
    )


def _ours(policy: str) -> SlicePolicy:
    def decide(cards: Sequence[SliceCard], request: SliceRequest) -> int | None:
        chosen = choose_slice_card(cards, request, policy)
        return None if chosen is None else chosen[0].index

    return decide


def _fitting(cards: Sequence[SliceCard], request: SliceRequest) -> list[SliceCard]:
    return [card for card in cards if card.fits(*slice_size(request, card))]


def fullest_that_fits(cards: Sequence[SliceCard], request: SliceRequest) -> int | None:
    """The baseline: the card with the least memory free that fits, lowest index on ties."""
    fitting = _fitting(cards, request)
    best = min(fitting, key=lambda card: (card.free_memory_mib, card.index), default=None)
    return None if best is None else best.index


def first_fit(cards: Sequence[SliceCard], request: SliceRequest) -> int | None:
    fitting = _fitting(cards, request)
    return min((card.index for card in fitting), default=None)


OURS = "ours (pack)"
BASELINE = "fullest that fits"
POLICIES: dict[str, SlicePolicy] = {
    OURS: _ours(PACK),
    BASELINE: fullest_that_fits,
    "first-fit": first_fit,
    "spread": _ours(SPREAD),
}


@dataclass
class Tally:
    requests: int = 0
    accepted: int = 0
    refused_with_room: int = 0
    offered_memory_time: float = 0.0
    stranded_memory_time: float = 0.0

    @property
    def acceptance(self) -> float:
        return self.accepted / self.requests if self.requests else 1.0

    @property
    def stranded_share(self) -> float:
        offered = self.offered_memory_time
        return self.stranded_memory_time / offered if offered else 0.0


def replay(
    model: SliceModel, requests: Sequence[Request], policy: SlicePolicy, tally: Tally
) -> None:
    """Departures at an instant before arrivals (half-open intervals); the policy's card is
    checked to fit before the slice is placed."""
    live: list[dict[int, tuple[int, int]]] = [{} for _index in range(CARDS)]
    departures: list[tuple[float, int, int]] = []
    for request in sorted(requests, key=lambda r: (r.arrive, r.id)):
        while departures and departures[0][0] <= request.arrive:
            _time, rid, index = heapq.heappop(departures)
            live[index].pop(rid)
        cards = [
            SliceCard(index, model.compute_units, model.memory_mib, tuple(slices.values()))
            for index, slices in enumerate(live)
        ]
        asked = SliceRequest(model.profile_memory[request.profile])
        tally.requests += 1
        tally.offered_memory_time += asked.memory_mib * request.duration
        chosen = policy(cards, asked)
        if chosen is None:
            cus, mib = slice_size(asked, cards[0])
            free_cus = sum(card.free_compute_units for card in cards)
            free_mib = sum(card.free_memory_mib for card in cards)
            if free_cus >= cus and free_mib >= mib:
                tally.refused_with_room += 1
                tally.stranded_memory_time += mib * request.duration
            continue
        size = slice_size(asked, cards[chosen])
        if not cards[chosen].fits(*size):
            raise AssertionError(f"policy put {size} on card {chosen}, which cannot hold it")
        live[chosen][request.id] = size
        tally.accepted += 1
        heapq.heappush(departures, (request.depart, request.id, chosen))


def run(quick: bool = False, streams: int | None = None, requests: int | None = None) -> str:
    streams = streams if streams is not None else (1 if quick else 10)
    requests = requests if requests is not None else (200 if quick else 1500)
    rows: list[list[object]] = []
    verdicts: list[str] = []
    for name in MODELS:
        model = slice_model(name)
        for mix in MIXES:
            print(f"  slices: {name} {mix}", file=sys.stderr, flush=True)
            tallies = {policy: Tally() for policy in POLICIES}
            for replica in range(streams):
                seed = seed_for("slices", name, CARDS, mix, replica)
                stream_ = stream(model.card, CARDS, mix, 1.0, requests, seed)
                for policy, decide in POLICIES.items():
                    replay(model, stream_, decide, tallies[policy])
            base = tallies[BASELINE].acceptance
            for policy, tally in tallies.items():
                rows.append(
                    [
                        f"{name} {mix} | {policy}",
                        pct(tally.acceptance),
                        ratio(tally.acceptance, base),
                        tally.refused_with_room,
                        pct(tally.stranded_share),
                    ]
                )
            ours, baseline = tallies[OURS], tallies[BASELINE]
            verdicts.append(
                f"{name} {mix}: ours {'>=' if ours.accepted >= baseline.accepted else '<'} "
                f"baseline ({ours.accepted} vs {baseline.accepted} of {ours.requests})"
            )
    header = (
        f"== slice placement ==\n{CARDS}-card nodes, {streams} stream(s) x {requests} requests "
        "per cell; a request = one slice of its profile's memory, compute units by memory; "
        "stranded = memory-time refused while enough memory and CUs were free in total"
    )
    body = table(
        ["model mix | policy", "accepted", "/baseline", "refused with room", "stranded"], rows
    )
    return "\n".join([header, body, *verdicts])
