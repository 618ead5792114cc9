"""Smoke and soundness tests for the placement benchmark (tiny sizes, nothing timed)."""

from __future__ import annotations

import pytest

from bench import placement_quality
from bench.placement_quality import Cell, Tally
from bench.policies import BASELINE, OURS, POLICIES, first_fit
from bench.replay import replay
from bench.tables import CardModel, discover
from bench.workload import MIXES, Request, stream


@pytest.fixture(scope="module")
def bw() -> CardModel:
    return discover("c3000-bw")


@pytest.fixture(scope="module")
def hypo() -> CardModel:
    return discover("hypo-x8")


def test_tables_are_read_from_the_simulated_driver(bw: CardModel, hypo: CardModel) -> None:
    # The measured BW table (docs/dev/hardware.md), as the node layer reads it from the simulator.
    assert bw.slice_count == 4
    assert [(p.name, p.slices, [q.start for q in p.placements]) for p in bw.profiles] == [
        ("2g.15gb", 1, [0, 1, 2, 3]),
        ("4g.31gb", 2, [0, 2]),
        ("8g.63gb", 4, [0]),
    ]
    # The hypothetical model really is another table: more slices and a 3-slice profile.
    assert hypo.slice_count == 8
    assert 3 in {p.slices for p in hypo.profiles}


def _req(rid: int, arrive: float, depart: float, card: CardModel, slices: int) -> Request:
    profile = next(p for p in card.profiles if p.slices == slices)
    return Request(rid, arrive, depart, profile.name, slices)


def test_ours_packs_narrow_requests_and_keeps_a_card_whole(bw: CardModel) -> None:
    # Two cards. Two long 1-slice requests, then a long whole-card one, then six long 1-slice
    # ones. Ours packs the second 1-slice request next to the first, so the whole-card request
    # fits on the empty card and takes it: only 2 of the 6 later ones fit (forced admission: a
    # request that fits somewhere is placed).
    requests = [_req(0, 0.0, 10.0, bw, 1), _req(1, 0.5, 10.0, bw, 1), _req(2, 1.0, 10.0, bw, 4)]
    requests += [_req(3 + i, 2.0 + i / 10, 10.0, bw, 1) for i in range(6)]
    ours = replay(bw, 2, requests, POLICIES[OURS])
    assert (ours.accepted, dict(ours.refused)) == (5, {"2g.15gb": 4})
    # Spread puts the second 1-slice request on the other card: the whole-card one is refused
    # and all six later ones fit.
    spread = replay(bw, 2, requests, POLICIES["spread"])
    assert (spread.accepted, dict(spread.refused)) == (8, {"8g.63gb": 1})


def test_stranded_slices_and_the_repacking_reference(bw: CardModel) -> None:
    # Three 1-slice instances on slices 0, 1, 2; the first two leave, so only slice 2 is
    # taken. Lowest-start puts the next 1-slice instance on slice 0, leaving slices 1 and 3
    # free but no aligned pair: the 2-slice request is refused with 2 free slices (stranded:
    # 2 slices x 1 time unit). Ours completes the pair on slice 3 and keeps 0:2 free.
    requests = [
        _req(0, 0.0, 1.0, bw, 1),
        _req(1, 0.0, 1.0, bw, 1),
        _req(2, 0.0, 10.0, bw, 1),
        _req(3, 2.0, 10.0, bw, 1),
        _req(4, 3.0, 4.0, bw, 2),
    ]
    outcome = replay(bw, 1, requests, first_fit)
    assert outcome.accepted == 4
    assert outcome.stranded_slice_time == pytest.approx(2.0)
    assert outcome.stranded_refusals == 1
    ours = replay(bw, 1, requests, POLICIES[OURS])
    assert (ours.accepted, ours.stranded_slice_time) == (5, 0.0)


def test_streams_are_seeded_and_match_the_offered_load(bw: CardModel) -> None:
    first = stream(bw, 8, "uniform", 1.0, 3000, 7)
    assert first == stream(bw, 8, "uniform", 1.0, 3000, 7)
    assert first != stream(bw, 8, "uniform", 1.0, 3000, 8)
    horizon = first[-1].arrive
    busy = sum(r.slices * r.duration for r in first)
    # Offered load 1.0 on 32 slices: about 32 slices asked for at once on average.
    assert 0.85 < busy / horizon / 32 < 1.15


def test_same_command_prints_the_same_placement_results_twice() -> None:
    tiny = placement_quality.Scale(
        load=1.0, node_streams=2, node_requests=40, online_cards=(1,), online_max_states=300
    )
    first = placement_quality.run(scale=tiny)
    assert first == placement_quality.run(scale=tiny)
    assert "ours (pack) >= baseline on every mix (8-card nodes, long streams): " in first
    for model in ("c3000-bw", "hypo-x8"):
        for mix in MIXES:
            for policy in POLICIES:
                assert f"{model} {mix} | {policy}" in first
    assert "1 card hypo-x8 uniform" in first  # the online optimum's table ran
    assert "ours (pack) / online optimum (exact long run; 1 cards, c3000-bw, hypo-x8;" in first


def _cell(mix: str, ours: list[float], baseline: list[float]) -> Cell:
    tallies = {OURS: Tally(), BASELINE: Tally()}
    tallies[OURS].per_stream, tallies[BASELINE].per_stream = ours, baseline
    return Cell("c3000-bw", mix, tallies)


def test_the_baseline_verdict_fails_on_any_cell_where_ours_is_behind() -> None:
    ahead = _cell("uniform", [0.8, 0.9], [0.8, 0.8])
    assert placement_quality.baseline_verdict([ahead], OURS)[0].endswith(": HOLDS")
    # Behind by 0.5 points with a standard error of 0.5: behind, but not significantly.
    slightly = _cell("bursty", [0.80, 0.80], [0.80, 0.81])
    far = _cell("wide-heavy", [0.7, 0.7, 0.7], [0.8, 0.8, 0.8])
    lines = placement_quality.baseline_verdict([ahead, slightly, far], OURS)
    assert lines[0].endswith(
        ": FAILS on c3000-bw bursty (-0.500 pts), c3000-bw wide-heavy (-10.000 pts)"
    )
    assert lines[1] == "  8-card cells behind by more than 2 standard errors: c3000-bw wide-heavy"
    assert lines[2] == "  8-card c3000-bw uniform: ours (pack) - baseline = +5.000 pts (s.e. 5.000)"
