"""Multi-node replay of the scheduler extender against the count-only scheduler of today
(docs/dev/extender.md). What one decision costs over the wire is ``extender_http.py``'s.

    .venv/bin/python bench/multinode.py [--quick]

Replay: a cluster of nodes of both simulated card models (each node's empty geometry is what
its plugin publishes: ``geometry.of_cards`` over the node layer's cards), the single-node
replay's seeded streams (``workload.stream``, one per model, merged), three schedulers:

- ``count-only``: the scheduler sees per node what ``advertise.free_capacity`` says (each
  count is what fits if nothing else is carved) and, within one scheduling round, subtracts a
  bound pod from its own profile's count and from the family count only; the node's allocator
  then places in bind order with ``placement.choose`` and fails what does not fit (final).
- ``extender binpack`` / ``extender spread``: ``decide.place`` on every node, ``decide.score``,
  and the bind's ``decide.place`` on the chosen node, which reserves what it placed; the
  node's allocator carves exactly at the reservation (a reservation over a carved slice fails).

A round is one instant: departures first, then every pending pod and every arrival of that
instant in arrival order, all bound before any is carved (a job's pods are created together,
and carving takes longer than their creation). A pod no node takes stays pending and is
tried again in every later round. Ties between nodes go to the default scheduler's choice,
modelled as the node with the fewest partition pods, then a seeded random one.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import heapq
import math
import random
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# The same import roots pytest gets from pyproject.toml, so the script runs outside pytest.
for _extra in ("tests/simulator", "plugin_image/src", ".venv/collections", "."):
    if str(REPO / _extra) not in sys.path:
        sys.path.insert(0, str(REPO / _extra))

from ansible_collections.hygon.dcu.plugins.module_utils.node import Node  # noqa: E402
from hygon_dcu_plugin.deviceplugin.advertise import free_capacity  # noqa: E402
from hygon_dcu_plugin.extender.decide import (  # noqa: E402
    BINPACK,
    SPREAD,
    NodeState,
    NotPlaced,
    Placed,
    place,
    score,
)
from hygon_dcu_plugin.geometry import GeoCard, Geometry, GeoProfile, card_views, of_cards  # noqa: E402
from hygon_dcu_plugin.placement import PACK, choose, slices_of  # noqa: E402
from hygon_dcu_plugin.request import PartitionRequest, ProfileRequest  # noqa: E402
from hygon_dcu_plugin.vocabulary import (  # noqa: E402
    COMPUTE_UNITS,
    FAMILY,
    MEMORY_MIB,
    profile_resource,
)

from bench.report import pct, table  # noqa: E402
from bench.tables import LIBRARY, SIMULATOR, discover, simulated_node  # noqa: E402
from bench.workload import MIXES, arrival_rate, seed_for, stream  # noqa: E402

MODELS = ("c3000-bw", "hypo-x8")
Requests = tuple[tuple[str, PartitionRequest], ...]  # one pod's (container, request) pairs
COUNT_ONLY = "count-only"
EXTENDER_BINPACK = "extender binpack"
EXTENDER_SPREAD = "extender spread"
SCHEDULERS = (COUNT_ONLY, EXTENDER_BINPACK, EXTENDER_SPREAD)
_NODE_POLICY = {EXTENDER_BINPACK: BINPACK, EXTENDER_SPREAD: SPREAD}
CONTAINER = "main"  # every replayed pod has one partition container
FAILED_NO_FIT = "no free placement"  # count-only: Allocate's no_capacity
FAILED_TAKEN = "reservation taken"  # extender: Allocate's reservation_taken
_MEMO_LIMIT = 200_000  # place results kept per replay (bounded memory)


@dataclass(frozen=True)
class Scale:
    nodes_per_model: int
    cards: int
    load: float
    pods: int  # about this many arrivals per mix (both models together)
    mixes: tuple[str, ...]


BIG_BURSTS = "bursty x4"  # four jobs at one instant: 4-24 pods
FULL = Scale(8, 8, 0.9, 4000, (*MIXES, BIG_BURSTS))
QUICK = Scale(2, 8, 0.9, 120, ("uniform", BIG_BURSTS))


@functools.cache
def node_geometry(model: str) -> Geometry:
    """An empty 8-card node of the model as its plugin publishes it: the node layer's cards of
    a simulated node in partition mode, through ``geometry.of_cards``."""
    with simulated_node(model, 8) as root:
        subprocess.run(
            [str(SIMULATOR / "build" / "hy-smi"), "-mig", "1"], check=True, capture_output=True
        )
        cards = Node(host_root=root, library_path=str(LIBRARY)).cards()
    geometry = of_cards(cards, (), 0)
    table_ = discover(model)
    shown = {(p.name, p.slices) for c in geometry.cards for p in c.profiles}
    if len(geometry.cards) != 8 or shown != {(p.name, p.slices) for p in table_.profiles}:
        raise RuntimeError(f"simulated {model} node: geometry and profile table disagree")
    return geometry


# The stream ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pod:
    id: int
    arrive: float
    duration: float
    model: str  # whose stream it came from (profile requests name that model's profiles)
    request: PartitionRequest

    @property
    def requests(self) -> Requests:
        return ((CONTAINER, self.request),)


def cluster_stream(
    nodes_per_model: int, cards: int, mix: str, load: float, pods: int, seed: int = 0
) -> list[Pod]:
    """One ``workload.stream`` per model, at offered load ``load`` on that model's nodes, cut
    at the same horizon (about ``pods`` arrivals in all) and merged in arrival order. A mix
    "bursty xN" is the bursty mix with N jobs arriving together (``gathered``)."""
    mix, _x, times = mix.partition(" x")
    jobs = int(times) if times else 1
    rates = {m: arrival_rate(discover(m), nodes_per_model * cards, mix, load) for m in MODELS}
    horizon = pods / sum(rates.values())
    merged = []
    for order, model in enumerate(MODELS):
        wanted = math.ceil(rates[model] * horizon * 1.5) + 20  # enough to pass the horizon
        for r in stream(
            discover(model),
            nodes_per_model * cards,
            mix,
            load,
            wanted,
            seed_for("multinode", model, mix, seed),
        ):
            if r.arrive < horizon:
                merged.append((r.arrive, order, r.id, model, r.duration, r.profile))
    merged.sort()
    found = [
        Pod(n, arrive, duration, model, ProfileRequest(profile))
        for n, (arrive, _order, _rid, model, duration, profile) in enumerate(merged)
    ]
    return gathered(found, jobs) if jobs > 1 else found


def gathered(pods: Sequence[Pod], jobs: int) -> list[Pod]:
    """The same pods with every ``jobs`` consecutive arrival instants moved to the first of
    them: bursts ``jobs`` times as large at the same offered load."""
    instants = sorted({p.arrive for p in pods})
    moved = {t: instants[(n // jobs) * jobs] for n, t in enumerate(instants)}
    return [dataclasses.replace(p, arrive=moved[p.arrive]) for p in pods]


# The cluster -----------------------------------------------------------------------------


def _profiles(cards: Sequence[GeoCard]) -> dict[str, GeoProfile]:
    return {p.name: p for c in cards for p in c.profiles}


def needs(request: PartitionRequest) -> dict[str, int]:
    """The extended resources the scheduler counts for one container (docs/dev/kubernetes.md:
    the size resources are advertised by no node, so without an extender that ignores them
    a size request stays Pending)."""
    if isinstance(request, ProfileRequest):
        return {request.resource: 1, FAMILY: 1}
    asked = {FAMILY: 1, MEMORY_MIB: request.memory_mib}
    if request.min_cu is not None:
        asked[COMPUTE_UNITS] = request.min_cu
    return asked


def covering(request: PartitionRequest, profiles: Mapping[str, GeoProfile]) -> list[GeoProfile]:
    """The node's profiles that serve the request, in the order the node tries them."""
    if isinstance(request, ProfileRequest):
        found = profiles.get(request.profile)
        return [found] if found else []
    return request.smallest(profiles.values())


@dataclass
class SimNode:
    """One node: its cards, what is carved (by pod) and reserved, as the replay moves it."""

    name: str
    model: str
    cards: tuple[GeoCard, ...]
    occupied: list[frozenset[int]] = field(default_factory=list)
    running: dict[int, list[tuple[int, int, int]]] = field(default_factory=dict)
    # This round's bound pods in bind order, each with its reservation (card, start, size).
    bound: list[tuple[Pod, tuple[tuple[int, int, int], ...]]] = field(default_factory=list)
    used: Counter[str] = field(default_factory=Counter)  # count-only: this round's decrements

    def __post_init__(self) -> None:
        self.occupied = [c.occupied for c in self.cards]
        self.index = {c.pci: i for i, c in enumerate(self.cards)}
        self.profiles = _profiles(self.cards)
        self.total = sum(c.slice_count for c in self.cards)

    def geometry(self) -> Geometry:
        cards = tuple(
            dataclasses.replace(c, occupied=o)
            for c, o in zip(self.cards, self.occupied, strict=True)
        )
        return Geometry(0, cards)

    def reserved(self) -> dict[str, tuple[tuple[int, int], ...]]:
        spans: dict[str, list[tuple[int, int]]] = {}
        for _pod, taken in self.bound:
            for card, start, size in taken:
                spans.setdefault(self.cards[card].pci, []).append((start, size))
        return {pci: tuple(sorted(s)) for pci, s in spans.items()}

    def state(self) -> NodeState:
        """The node as the extender sees it: published geometry plus its reservations."""
        return NodeState(self.name, self.geometry(), reserved=self.reserved())

    def key(self) -> tuple[object, ...]:
        """Everything ``decide.place`` reads of this node (nodes of one model share cards)."""
        return (
            self.model,
            len(self.cards),
            tuple(self.occupied),
            tuple(sorted(self.reserved().items())),
        )

    def free(self) -> int:
        return self.total - sum(len(o) for o in self.occupied)

    def pods(self) -> int:
        return len(self.running) + len(self.bound)


def build_cluster(nodes_per_model: int, cards: int) -> list[SimNode]:
    nodes = []
    for model in MODELS:
        template = node_geometry(model).cards[:cards]
        nodes += [SimNode(f"{model}-{n}", model, template) for n in range(nodes_per_model)]
    return nodes


# The replay ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Carved:
    pod: int
    node: str
    card: int
    start: int
    size: int
    began: float
    ended: float  # departure, or the end of the replay for a pod still running


@dataclass
class Result:
    scheduler: str
    arrived: int = 0
    failed: dict[int, str] = field(default_factory=dict)  # pod id -> why (final)
    ran: dict[int, float] = field(default_factory=dict)  # pod id -> wait before it was carved
    pending: int = 0  # at the end
    stranded: float = 0.0  # slice-time, see stranded_slices
    capacity: float = 0.0  # slice-time: cluster slices x replayed time
    rounds: int = 0
    largest_round: int = 0  # pods bound in one round (the largest burst the nodes admitted)
    carved: list[Carved] = field(default_factory=list)

    @property
    def mean_wait(self) -> float:
        return sum(self.ran.values()) / len(self.ran) if self.ran else 0.0


class Replay:
    """One scheduler over one stream on a fresh cluster (use ``run``)."""

    def __init__(self, scheduler: str, nodes: list[SimNode], seed: int) -> None:
        if scheduler not in SCHEDULERS:
            raise ValueError(f"unknown scheduler {scheduler!r}; use one of {SCHEDULERS}")
        self.scheduler = scheduler
        self.nodes = nodes
        self.rng = random.Random(seed)
        self.memo: dict[tuple[object, ...], Placed | NotPlaced] = {}
        self.counted: dict[tuple[object, ...], dict[str, int]] = {}
        self.result = Result(scheduler)
        self.began: dict[int, float] = {}

    # what the schedulers see ---------------------------------------------------------
    def placed(self, node: SimNode, pod: Pod) -> Placed | NotPlaced:
        """``decide.place`` on the node now; memoised on everything it reads, so the answer
        is the one the extender would compute."""
        key = (*node.key(), pod.requests)
        if key not in self.memo:
            if len(self.memo) >= _MEMO_LIMIT:
                self.memo.clear()
            self.memo[key] = place(node.state(), pod.requests)
        return self.memo[key]

    def counts(self, node: SimNode) -> dict[str, int]:
        """What the node's plugin advertises for what is carved (``free_capacity``)."""
        key = (node.model, len(node.cards), tuple(node.occupied))
        if key not in self.counted:
            self.counted[key] = free_capacity(card_views(node.geometry()))
        return self.counted[key]

    def default_pick(self, nodes: Sequence[SimNode]) -> SimNode:
        fewest = min(n.pods() for n in nodes)
        return self.rng.choice([n for n in nodes if n.pods() == fewest])

    # one round ---------------------------------------------------------------------
    def bind(self, pod: Pod) -> bool:
        """Filter, score and bind one pod; False when no node takes it (it stays pending)."""
        if self.scheduler == COUNT_ONLY:
            asked = needs(pod.request)
            fits = [
                n
                for n in self.nodes
                if all(self.counts(n).get(r, 0) - n.used[r] >= k for r, k in asked.items())
            ]
            if not fits:
                return False
            node = self.default_pick(fits)
            node.used.update(asked)  # each resource alone, as the scheduler counts them
            node.bound.append((pod, ()))
            return True
        policy = _NODE_POLICY[self.scheduler]
        scored = []
        for n in self.nodes:
            answer = self.placed(n, pod)
            if isinstance(answer, Placed):
                scored.append((score(answer, policy), n))
        if not scored:
            return False
        best = max(s for s, _n in scored)
        node = self.default_pick([n for s, n in scored if s == best])
        # The bind places again on the chosen node (under its lock) and reserves that.
        bound = self.placed(node, pod)
        if not isinstance(bound, Placed):
            raise AssertionError(f"bind on {node.name} disagrees with its filter")
        taken = tuple((node.index[a.card], a.start, a.size) for a in bound.assignments)
        node.bound.append((pod, taken))
        return True

    def admit(self, node: SimNode, now: float, departures: list[tuple[float, int, int]]) -> None:
        """The node's allocator, pod by pod in bind order: at the reservation when there is
        one (refused when a slice is taken), else ``placement.choose``."""
        index = self.nodes.index(node)
        for pod, reserved in node.bound:
            taken = reserved
            if not taken:
                choice = None
                if isinstance(pod.request, ProfileRequest):
                    choice = choose(card_views(node.geometry()), pod.request.profile, PACK)
                if choice is None:
                    self.result.failed[pod.id] = FAILED_NO_FIT
                    continue
                taken = ((choice.card.index, choice.placement.start, choice.placement.size),)
            elif any(node.occupied[c] & slices_of(s, k) for c, s, k in taken):
                self.result.failed[pod.id] = FAILED_TAKEN
                continue
            for card, start, size in taken:
                node.occupied[card] = node.occupied[card] | slices_of(start, size)
            node.running[pod.id] = list(taken)
            self.result.ran[pod.id] = now - pod.arrive
            self.began[pod.id] = now
            heapq.heappush(departures, (now + pod.duration, pod.id, index))
        node.bound.clear()
        node.used.clear()

    def depart(self, pod_id: int, index: int, now: float) -> None:
        node = self.nodes[index]
        for card, start, size in node.running.pop(pod_id):
            node.occupied[card] = node.occupied[card] - slices_of(start, size)
            self.result.carved.append(
                Carved(pod_id, node.name, card, start, size, self.began[pod_id], now)
            )

    def stranded_slices(self, pending: Sequence[Pod]) -> int:
        """Free slices (all of a node's) on every node where some pending pod asks for no more
        slices than the node has free, of a profile the node offers, and none fits as laid
        out: slices a different packing of that node might have used."""
        total = 0
        for node in self.nodes:
            free = node.free()
            if not free:
                continue
            counts = self.counts(node)
            for pod in pending:
                served = covering(pod.request, node.profiles)
                if (
                    served
                    and min(p.slices for p in served) <= free
                    and not any(counts.get(profile_resource(p.name), 0) for p in served)
                ):
                    total += free
                    break
        return total

    def run(self, pods: Sequence[Pod], until: float | None = None) -> Result:
        """Replay ``pods`` up to ``until`` (default: the last arrival)."""
        arrivals = sorted(pods, key=lambda p: (p.arrive, p.id))
        end = until if until is not None else (arrivals[-1].arrive if arrivals else 0.0)
        departures: list[tuple[float, int, int]] = []
        pending: list[Pod] = []
        result = self.result
        result.capacity = sum(n.total for n in self.nodes) * end
        nxt = 0
        last, rate = 0.0, 0
        while True:
            times = [arrivals[nxt].arrive] if nxt < len(arrivals) else []
            times += [departures[0][0]] if departures else []
            if not times or min(times) > end:
                break
            now = min(times)
            result.stranded += rate * (now - last)
            while departures and departures[0][0] <= now:
                _t, pod_id, index = heapq.heappop(departures)
                self.depart(pod_id, index, now)
            queue = pending
            while nxt < len(arrivals) and arrivals[nxt].arrive <= now:
                queue.append(arrivals[nxt])
                nxt += 1
            pending = [pod for pod in queue if not self.bind(pod)]
            bound = sum(len(n.bound) for n in self.nodes)
            result.rounds += 1
            result.largest_round = max(result.largest_round, bound)
            for node in self.nodes:
                if node.bound:
                    self.admit(node, now, departures)
            rate = self.stranded_slices(pending)
            last = now
        result.stranded += rate * (end - last)
        result.arrived = nxt
        result.pending = len(pending)
        for node in self.nodes:
            for pod_id in list(node.running):
                self.depart(pod_id, self.nodes.index(node), end)
        result.carved.sort(key=lambda c: (c.began, c.pod))
        return result


def replay(
    scheduler: str,
    pods: Sequence[Pod],
    nodes_per_model: int,
    cards: int,
    seed: int = 0,
    until: float | None = None,
    models: Sequence[str] = MODELS,
) -> Result:
    """Replay the stream under one scheduler on a fresh cluster of ``models``."""
    nodes = [n for n in build_cluster(nodes_per_model, cards) if n.model in models]
    return Replay(scheduler, nodes, seed).run(pods, until)


def replay_table(scale: Scale, seed: int = 0) -> str:
    rows = []
    for mix in scale.mixes:
        pods = cluster_stream(scale.nodes_per_model, scale.cards, mix, scale.load, scale.pods, seed)
        base: Result | None = None
        for scheduler in SCHEDULERS:
            _progress(f"replay {mix} {scheduler}")
            r = replay(scheduler, pods, scale.nodes_per_model, scale.cards, seed)
            base = base or r
            rows.append(
                [
                    f"{mix} | {scheduler}",
                    r.arrived,
                    len(r.failed),
                    len(r.ran),
                    f"{len(r.ran) / len(base.ran):.4f}" if base.ran else "-",
                    r.pending,
                    f"{r.mean_wait:.3f}",
                    pct(r.stranded / r.capacity if r.capacity else 0.0),
                    r.largest_round,
                ]
            )
    headers = [
        "mix | scheduler",
        "pods",
        "failed at admission",
        "ran",
        "ran /count-only",
        "pending at end",
        "mean wait",
        "stranded",
        "largest round",
    ]
    return table(headers, rows)


# Output ----------------------------------------------------------------------------------


def _progress(what: str) -> None:
    """Where a long run is (stderr, so stdout holds only the tables)."""
    print(f"  multinode: {what}", file=sys.stderr, flush=True)


def run(quick: bool = False, scale: Scale | None = None) -> str:
    scale = scale or (QUICK if quick else FULL)
    nodes = 2 * scale.nodes_per_model
    out = [
        "== multi-node replay ==",
        f"{nodes} nodes x {scale.cards} cards ({scale.nodes_per_model} of each: "
        f"{', '.join(MODELS)}); offered load {scale.load:.2f} per model (bench/workload.py "
        f"mixes, durations mean 1.0); about {scale.pods} pods per mix; a round binds every pod "
        "of one instant before any is carved",
        "failed at admission = bound, then refused by the node (final); mean wait = mean time "
        "from arrival to carve of the pods that ran; stranded = free slices x time on nodes "
        "where a pending pod asks no more slices than are free yet fits nowhere there, over "
        "cluster slices x time",
        replay_table(scale),
    ]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes (a smoke run)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    print(run(args.quick))
    print(f"(multinode: {time.monotonic() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
