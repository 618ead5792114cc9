"""The multi-node replay (bench/multinode.py) at tiny sizes: the
outcomes a hand count gives, and properties checked from the carve log, never from the
replay's own tallies. Nothing is timed."""

from __future__ import annotations

from collections import defaultdict

import pytest
from hygon_dcu_plugin.request import ProfileRequest

from bench import multinode
from bench.multinode import (
    COUNT_ONLY,
    EXTENDER_BINPACK,
    EXTENDER_SPREAD,
    FAILED_NO_FIT,
    SCHEDULERS,
    Carved,
    Pod,
    Result,
    cluster_stream,
    node_geometry,
    replay,
)

EXTENDERS = (EXTENDER_BINPACK, EXTENDER_SPREAD)
BW = "c3000-bw"


def _pod(pid: int, arrive: float, duration: float, profile: str) -> Pod:
    return Pod(pid, arrive, duration, BW, ProfileRequest(profile))


def _bw_only(scheduler: str, pods: list[Pod], cards: int, until: float) -> Result:
    return replay(scheduler, pods, 1, cards, until=until, models=(BW,))


# The burst of docs/dev/kubernetes.md ("7 pods asking 10 slices on a node of 8"), at the
# measured card: one node of 2 cards of 4 slices, 4 x 2-slice + 3 x 4-slice pods at once.
BURST = [_pod(n, 0.0, 1.0, "4g.31gb") for n in range(4)] + [
    _pod(4 + n, 0.0, 1.0, "8g.63gb") for n in range(3)
]


def test_count_only_binds_a_burst_the_node_cannot_place_and_fails_two_at_admission() -> None:
    result = _bw_only(COUNT_ONLY, BURST, 2, until=3.0)
    # Counts at t=0: 4g.31gb 4, 8g.63gb 2, family 8. Each pod takes one from its own profile
    # and from the family, so six are bound (16 slices' worth on 8); the third 8g.63gb stays
    # pending. The four 2-slice pods fill both cards, so both bound 8g.63gb pods are refused.
    assert result.largest_round == 6
    assert result.failed == {4: FAILED_NO_FIT, 5: FAILED_NO_FIT}
    # The pending one runs when the 2-slice pods leave at t=1.
    assert result.ran == {0: 0.0, 1: 0.0, 2: 0.0, 3: 0.0, 6: 1.0}
    assert result.pending == 0


@pytest.mark.parametrize("scheduler", EXTENDERS)
def test_the_extender_holds_back_what_does_not_fit_and_fails_nothing(scheduler: str) -> None:
    result = _bw_only(scheduler, BURST, 2, until=3.0)
    assert result.failed == {}
    # Only the four 2-slice pods are bound at t=0 (the filter counts the reservations of the
    # same round); two 8g.63gb pods run at t=1, the last at t=2.
    assert result.largest_round == 4
    assert result.ran == {0: 0.0, 1: 0.0, 2: 0.0, 3: 0.0, 4: 1.0, 5: 1.0, 6: 2.0}
    assert result.pending == 0


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_stranded_slice_time_counts_free_slices_a_pending_pod_could_use(scheduler: str) -> None:
    # One card. Three 1-slice pods go to slices 0, 1, 2 (pack); the one on 0 leaves at t=1.
    # From t=1.5 a 2-slice pod is pending with 2 slices free (0 and 3) and no aligned pair:
    # stranded, 2 slices, until the pod on slice 1 leaves at t=4 and it fits on 0:2. The
    # 4-slice pod pending from t=0.5 never has 4 free slices, so it strands nothing.
    pods = [
        _pod(0, 0.0, 1.0, "2g.15gb"),
        _pod(1, 0.0, 4.0, "2g.15gb"),
        _pod(2, 0.0, 10.0, "2g.15gb"),
        _pod(3, 0.5, 1.0, "8g.63gb"),
        _pod(4, 1.5, 1.0, "4g.31gb"),
    ]
    result = _bw_only(scheduler, pods, 1, until=6.0)
    first = [(c.pod, c.start, c.size) for c in result.carved[:3]]
    assert first == [(0, 0, 1), (1, 1, 1), (2, 2, 1)]
    assert result.stranded == 5.0
    assert result.ran[4] == 2.5
    assert (result.pending, result.failed) == (1, {})
    assert result.capacity == 4 * 6.0


def _overlaps(log: list[Carved]) -> list[tuple[Carved, Carved]]:
    """Pairs of carved partitions that shared a slice of one card at one time."""
    by_card: dict[tuple[str, int], list[Carved]] = defaultdict(list)
    for c in log:
        by_card[(c.node, c.card)].append(c)
    found = []
    for spans in by_card.values():
        for i, a in enumerate(spans):
            for b in spans[i + 1 :]:
                in_time = a.began < b.ended and b.began < a.ended
                in_space = a.start < b.start + b.size and b.start < a.start + a.size
                if in_time and in_space:
                    found.append((a, b))
    return found


@pytest.fixture(scope="module")
def measured_kind() -> tuple[list[Pod], dict[str, Result]]:
    """A small cluster and stream built like the measured ones (both models, bursts)."""
    pods = cluster_stream(2, 4, "bursty x4", 0.9, 300, seed=3)
    return pods, {s: replay(s, pods, 2, 4, seed=3) for s in SCHEDULERS}


def test_measured_kind_extender_never_fails_and_count_only_does(
    measured_kind: tuple[list[Pod], dict[str, Result]],
) -> None:
    _pods, results = measured_kind
    for scheduler in EXTENDERS:
        assert results[scheduler].failed == {}, scheduler
    assert len(results[COUNT_ONLY].failed) > 0
    # Bursts really happened: rounds bound several pods at once.
    assert results[COUNT_ONLY].largest_round > 4


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_measured_kind_carve_log_is_sound(
    measured_kind: tuple[list[Pod], dict[str, Result]], scheduler: str
) -> None:
    pods, results = measured_kind
    result = results[scheduler]
    by_id = {p.id: p for p in pods}
    log = result.carved
    assert _overlaps(log) == []
    # Every pod that ran was carved once, at a legal placement of its own profile on a card of
    # its own model, not before it arrived, for no longer than it asked.
    assert sorted(c.pod for c in log) == sorted(result.ran)
    for c in log:
        pod = by_id[c.pod]
        assert isinstance(pod.request, ProfileRequest)
        assert c.node.startswith(pod.model + "-")
        card = node_geometry(pod.model).cards[c.card]
        profile = card.profile(pod.request.profile)
        assert profile is not None
        assert (c.start, c.size) in {(q.start, q.size) for q in profile.placements}
        assert c.began == pod.arrive + result.ran[c.pod] >= pod.arrive
        assert c.ended - c.began <= pod.duration + 1e-9
    # Each arrived pod ends up in exactly one of ran, failed, pending.
    assert not set(result.ran) & set(result.failed)
    assert len(result.ran) + len(result.failed) + result.pending == result.arrived
    assert result.arrived == len(pods)


def test_the_replay_is_deterministic(
    measured_kind: tuple[list[Pod], dict[str, Result]],
) -> None:
    pods, results = measured_kind
    again = replay(EXTENDER_BINPACK, pods, 2, 4, seed=3)
    first = results[EXTENDER_BINPACK]
    assert (again.ran, again.carved, again.stranded) == (first.ran, first.carved, first.stranded)


def test_binpack_and_spread_choose_nodes_differently() -> None:
    # Two empty one-card nodes, two 1-slice pods one after the other: binpack puts the second
    # on the node the first made fuller, spread on the other one.
    pods = [_pod(0, 0.0, 5.0, "2g.15gb"), _pod(1, 1.0, 5.0, "2g.15gb")]
    nodes = {}
    for scheduler in EXTENDERS:
        log = replay(scheduler, pods, 2, 1, until=2.0, models=(BW,)).carved
        nodes[scheduler] = [c.node for c in log]
    assert nodes[EXTENDER_BINPACK][0] == nodes[EXTENDER_BINPACK][1]
    assert nodes[EXTENDER_SPREAD][0] != nodes[EXTENDER_SPREAD][1]


def test_the_script_prints_every_mix_and_scheduler_at_a_tiny_size() -> None:
    tiny = multinode.Scale(1, 2, 0.9, 30, ("uniform", "bursty x4"))
    out = multinode.run(scale=tiny)
    for mix in tiny.mixes:
        for scheduler in SCHEDULERS:
            assert f"{mix} | {scheduler} " in out
