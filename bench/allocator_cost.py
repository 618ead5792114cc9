"""Allocator cost on the simulator: Allocate latency and throughput through the real gRPC path,
where the time goes (library vs. our code), reclaim-pass cost by grant count, and how long the
kubelet waits for new counts after a change.

Timings vary from run to run; every table also prints ratios to the smallest size measured in
the same process, which is what to compare across machines.
"""

from __future__ import annotations

import statistics
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from hygon_dcu_plugin.deviceplugin.grants import Grant
from hygon_dcu_plugin.vocabulary import FAMILY, profile_resource

from .instrument import CallCost, Ledger
from .plugin_stack import NAMESPACE, PluginStack
from .report import pct, table

MODEL = "c3000-bw"


@dataclass(frozen=True)
class Scale:
    callers: tuple[int, ...]
    rounds: int  # each round fills the node with the narrowest profile, then reclaims
    grants: tuple[int, ...]
    passes: int  # steady passes timed per grant count (median reported)
    watch_rounds: int
    cards: int = 8


FULL = Scale(callers=(1, 8, 32), rounds=8, grants=(10, 100, 1000), passes=5, watch_rounds=3)
QUICK = Scale(callers=(1, 8, 32), rounds=1, grants=(10, 50), passes=1, watch_rounds=1)


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def ms(seconds: float) -> str:
    return f"{1000 * seconds:.2f}"


# Allocate latency -------------------------------------------------------------------------
@dataclass(frozen=True)
class Sample:
    latency: float  # at the caller (the kubelet's side of the RPC)
    cost: CallCost  # inside the plugin


def _round(
    stack: PluginStack, ledger: Ledger, callers: int, profile: str, fill: int
) -> tuple[list[Sample], float]:
    tokens = stack.free_tokens(fill)
    latencies: dict[str, float] = {}

    def one(token: str) -> None:
        stack.new_pod(profile)
        started = time.perf_counter()
        stack.allocate(token)
        latencies[token] = time.perf_counter() - started

    ledger.clear()
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=callers) as pool:
        for future in [pool.submit(one, token) for token in tokens]:
            future.result()
    wall = time.perf_counter() - started
    costs = {next(iter(args[1])): cost for args, cost in ledger.allocates if args[0] == FAMILY}
    samples = [Sample(latencies[t], costs[t]) for t in tokens]
    stack.finish_all()
    stack.runtime.reclaimer.run_pass()
    stack.wait_counts(stack.idle)
    return samples, wall


def allocate_latency(stack: PluginStack, ledger: Ledger, scale: Scale) -> str:
    rows = []
    tails = []
    profile = stack.profiles[0][0]  # the narrowest: the most partitions per node
    fill = stack.idle[profile_resource(profile)]
    base_p50 = 0.0
    for callers in scale.callers:
        samples: list[Sample] = []
        walls = 0.0
        for _ignored in range(scale.rounds):
            got, wall = _round(stack, ledger, callers, profile, fill)
            samples += got
            walls += wall
        latencies = [s.latency for s in samples]
        p50, p99 = percentile(latencies, 50), percentile(latencies, 99)
        base_p50 = base_p50 or p50
        rows.append(
            [
                callers,
                len(samples),
                ms(p50),
                ms(p99),
                f"{len(samples) / walls:.1f}",
                f"{p50 / base_p50:.2f}",
            ]
        )
        tails.append((callers, p99, [s for s in samples if s.latency >= p99]))
    out = [
        f"Allocate ({MODEL}, {stack.cards} cards, profile {profile}: each round carves "
        f"{fill} partitions = a full node, then one reclaim pass empties it; "
        f"{scale.rounds} round(s) per row)",
        table(["callers", "calls", "p50 ms", "p99 ms", "calls/s", "p50 / 1 caller"], rows),
        "",
        "where the slowest 1% of calls spent their time (mean over calls at or above p99):",
        _breakdown(tails),
    ]
    return "\n".join(out)


def _breakdown(tails: list[tuple[int, float, list[Sample]]]) -> str:
    rows = []
    for callers, p99, slow in tails:
        latency = statistics.fmean(s.latency for s in slow)
        server = statistics.fmean(s.cost.total for s in slow)
        library = statistics.fmean(s.cost.library for s in slow)
        wait = statistics.fmean(s.cost.lock_wait for s in slow)
        kubelet = statistics.fmean(s.cost.kubelet for s in slow)
        refresh = statistics.fmean(s.cost.refresh for s in slow)
        ours = statistics.fmean(s.cost.ours for s in slow)
        transport = max(0.0, latency - server)
        calls = statistics.fmean(s.cost.library_calls for s in slow)
        service = server - wait
        rows.append(
            [
                callers,
                ms(p99),
                ms(latency),
                pct(library / latency, 1),
                pct(wait / latency, 1),
                pct(kubelet / latency, 1),
                pct(refresh / latency, 1),
                pct(ours / latency, 1),
                pct(transport / latency, 1),
                pct(1 - library / latency, 1),
                pct((service - library) / service if service else 0.0, 1),
                f"{calls:.0f}",
            ]
        )
    return table(
        [
            "callers",
            "p99 ms",
            "mean ms",
            "library",
            "node-lock wait",
            "kubelet List",
            "counts refresh",
            "our code",
            "gRPC",
            "outside library",
            "ours of service",
            "lib calls",
        ],
        rows,
    )


# reclaim ----------------------------------------------------------------------------------
def _synthetic_grants(stack: PluginStack, count: int, profile: str) -> None:
    """Grants of running pods that own no live instance: the node cannot hold 1,000 live
    partitions, but a pass still reads, checks and re-reads every grant."""
    cards = [c for c in stack.node.cards() if c.pci]
    for i in range(count):
        card = cards[i % len(cards)]
        pod = stack.kube.add_pod(
            NAMESPACE, f"synthetic-{i:05d}", {"main": {FAMILY: "1", profile_resource(profile): "1"}}
        )
        stack.runtime.store.write(
            Grant(
                uuid=str(uuid.uuid4()),
                card_pci=card.pci or "",
                card_index=card.index,
                gpu_instance_id=10_000 + i,
                compute_instance_id=0,
                profile=profile,
                placement_start=0,
                placement_size=1,
                conf_path=f"/etc/dmi_mig_config/ci/dev{card.index}gi{10_000 + i}ci0.conf",
                namespace=NAMESPACE,
                pod_name=pod.name,
                pod_uid=pod.uid,
                containers=("main",),
                device_ids=(f"synthetic-{i:05d}",),
                created_at=time.time(),
            )
        )


def reclaim_cost(stack: PluginStack, ledger: Ledger, scale: Scale) -> str:
    rows = []
    base: tuple[float, float] | None = None
    profile = stack.profiles[0][0]
    capacity = stack.idle[profile_resource(profile)]
    for count in scale.grants:
        live = min(count, capacity)
        for token in stack.free_tokens(live):
            stack.new_pod(profile)
            stack.allocate(token)
        _synthetic_grants(stack, count - live, profile)
        ledger.clear()
        for _ignored in range(scale.passes):
            report = stack.runtime.reclaimer.run_pass()
            if report.destroyed or report.orphans or report.stale or report.errors:
                raise RuntimeError(f"a steady pass changed something: {report}")
        steady = sorted(ledger.passes, key=lambda item: item[1].total)
        steady_cost = steady[len(steady) // 2][1]
        stack.finish_all()
        for pod in list(stack.kube.pods.values()):
            stack.kube.delete_pod(pod.namespace, pod.name)
        ledger.clear()
        report = stack.runtime.reclaimer.run_pass()
        teardown = ledger.passes[-1][1]
        if len(report.destroyed) != live or len(report.stale) != count - live:
            raise RuntimeError(f"teardown pass did not reclaim everything: {report}")
        stack.wait_counts(stack.idle)
        base = base or (steady_cost.total, teardown.total)
        rows.append(
            [
                count,
                live,
                ms(steady_cost.total),
                pct(steady_cost.library / steady_cost.total, 0),
                f"{steady_cost.total / base[0]:.1f}",
                ms(teardown.total),
                f"{len(report.destroyed)}+{len(report.stale)}",
                pct(teardown.library / teardown.total, 0),
                f"{teardown.total / base[1]:.1f}",
            ]
        )
    return "\n".join(
        [
            f"reclaim pass ({MODEL}, {stack.cards} cards; grants beyond the node's "
            f"{capacity} live partitions are synthetic grants of running pods that own "
            "no instance)",
            table(
                [
                    "grants",
                    "live",
                    "steady ms",
                    "library",
                    "x smallest",
                    "teardown ms",
                    "destroyed+stale",
                    "library",
                    "x smallest",
                ],
                rows,
            ),
            "steady = every pod running (median of the timed passes); teardown = every pod deleted",
        ]
    )


# ListAndWatch -----------------------------------------------------------------------------
def _delay_after(
    stack: PluginStack, ledger: Ledger, what: str, since: int, resource: str, before: int
) -> float:
    """Seconds from the last `what` change to the first ListAndWatch message that shows
    the resource's count different from `before`."""
    stack.kubelet.wait_for(lambda: stack.kubelet.counts().get(resource) != before, timeout=30)
    changed = [t for kind, t in ledger.changes[since:] if kind == what]
    with stack.kubelet.lock:
        arrival = next(
            t for t, counts in stack.updates if t >= changed[-1] and counts.get(resource) != before
        )
    return arrival - changed[-1]


def watch_delay(stack: PluginStack, ledger: Ledger, scale: Scale) -> str:
    after_create: list[float] = []
    after_destroy: list[float] = []
    widest = stack.profiles[-1][0]
    narrowest = profile_resource(stack.profiles[0][0])
    for _ignored in range(scale.watch_rounds):
        pods = []
        for token in stack.free_tokens(stack.idle[profile_resource(widest)]):
            since, before = len(ledger.changes), stack.kubelet.counts()[narrowest]
            pods.append(stack.new_pod(widest))
            stack.allocate(token)
            after_create.append(_delay_after(stack, ledger, "create", since, narrowest, before))
        for pod in pods:
            since, before = len(ledger.changes), stack.kubelet.counts()[narrowest]
            stack.kube.delete_pod(pod.namespace, pod.name)
            stack.kubelet.remove_pod(pod.namespace, pod.name)
            stack.runtime.reclaimer.run_pass()
            after_destroy.append(_delay_after(stack, ledger, "destroy", since, narrowest, before))
    rows = [
        [name, len(values), ms(percentile(values, 50)), ms(max(values))]
        for name, values in (
            ("create -> count update", after_create),
            ("destroy -> count update", after_destroy),
        )
    ]
    return "\n".join(
        [
            f"ListAndWatch delay ({MODEL}: one {widest} partition at a time; time from the "
            "library call returning to the kubelet receiving the changed count)",
            table(["change", "samples", "p50 ms", "max ms"], rows),
        ]
    )


def run(quick: bool = False, scale: Scale | None = None) -> str:
    scale = scale or (QUICK if quick else FULL)
    ledger = Ledger()
    with ledger.installed(), PluginStack(MODEL, scale.cards) as stack:
        parts = [
            allocate_latency(stack, ledger, scale),
            reclaim_cost(stack, ledger, scale),
            watch_delay(stack, ledger, scale),
        ]
    return "\n\n".join(["== allocator cost ==", *parts])
