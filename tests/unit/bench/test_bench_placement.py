"""Smoke and soundness tests for the placement benchmark (tiny sizes, nothing timed)."""

from __future__ import annotations

import pytest

from bench import milp_optimum, optimum, placement_quality
from bench.policies import POLICIES, first_fit
from bench.replay import replay
from bench.tables import CardModel, discover
from bench.workload import MIXES, Request, seed_for, stream


@pytest.fixture(scope="module")
def bw() -> CardModel:
    return discover("c3000-bw")


@pytest.fixture(scope="module")
def hypo() -> CardModel:
    return discover("hypo-x8")


def test_tables_are_read_from_the_simulated_driver(bw: CardModel, hypo: CardModel) -> None:
    # The measured BW table (hardware.md), as the node layer reads it from the simulator.
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


def test_bounds_on_a_hand_worked_stream(bw: CardModel) -> None:
    # One card: a whole-card request arrives first and lives long; two 1-slice requests
    # come while it runs. Forced admission must take the wide one (it fits) and then
    # refuse both narrow ones; turning it away would accept two. LP: 4x + 1 <= 4 twice,
    # so x = 3/4 and the value 2.75 rounds down to 2.
    requests = [_req(0, 0.0, 10.0, bw, 4), _req(1, 1.0, 2.0, bw, 1), _req(2, 3.0, 4.0, bw, 1)]
    assert optimum.exact(bw, 1, requests, forced=True) == 1
    assert milp_optimum.solve(bw, 1, requests, node_limit=100).accepted == 1
    assert optimum.exact(bw, 1, requests, forced=False) == 2
    assert optimum.lp_bound(bw, 1, requests) == 2


def test_the_optimum_turns_a_whole_card_request_away_by_occupying_every_card(
    bw: CardModel,
) -> None:
    # Two cards. Two long 1-slice requests, then a long whole-card one, then six long 1-slice
    # ones. Ours packs the second 1-slice request next to the first, so the whole-card request
    # fits on the empty card and takes it: only 2 of the 6 later ones fit. The optimum puts the
    # second one on the other card, so the whole-card request is refused (forced admission
    # allows that: it fits nowhere) and all 6 later ones fit.
    requests = [_req(0, 0.0, 10.0, bw, 1), _req(1, 0.5, 10.0, bw, 1), _req(2, 1.0, 10.0, bw, 4)]
    requests += [_req(3 + i, 2.0 + i / 10, 10.0, bw, 1) for i in range(6)]
    ours = replay(bw, 2, requests, POLICIES["ours (pack)"])
    assert (ours.accepted, dict(ours.refused)) == (5, {"2g.15gb": 4})
    solved = milp_optimum.solve(bw, 2, requests, node_limit=1000)
    assert (solved.accepted, solved.proven, dict(solved.refused)) == (8, True, {"8g.63gb": 1})
    assert optimum.exact(bw, 2, requests, forced=True) == 8


@pytest.mark.parametrize("model", ["c3000-bw", "hypo-x8"])
def test_the_integer_program_agrees_with_the_exhaustive_search(model: str) -> None:
    # Two independent methods for the same optimum: memoised search and HiGHS.
    card = discover(model)
    for cards in (1, 2):
        for mix in MIXES:
            size = 8 if (cards, card.slice_count) == (2, 8) else 10
            requests = stream(card, cards, mix, 1.0, size, seed_for("milp", model, cards, mix))
            solved = milp_optimum.solve(card, cards, requests, node_limit=10_000)
            assert solved.proven, (cards, mix)
            assert solved.accepted == optimum.exact(card, cards, requests, forced=True), (
                cards,
                mix,
            )
            assert sum(solved.refused.values()) == len(requests) - solved.accepted


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
    assert optimum.repacking_acceptance(bw, 1, requests) == 5
    ours = replay(bw, 1, requests, POLICIES["ours (pack)"])
    assert (ours.accepted, ours.stranded_slice_time) == (5, 0.0)


@pytest.mark.parametrize("model", ["c3000-bw", "hypo-x8"])
@pytest.mark.parametrize("cards", [1, 2])
def test_no_policy_beats_the_optimum_and_the_bounds_are_ordered(model: str, cards: int) -> None:
    card = discover(model)
    for mix in MIXES:
        for replica in range(2):
            # Short streams: the exact search grows fast with cards and slices.
            size = 6 if (cards, card.slice_count) == (2, 8) else 8
            requests = stream(card, cards, mix, 1.0, size, seed_for("test", model, mix, replica))
            forced = optimum.exact(card, cards, requests, forced=True)
            bound = optimum.lp_bound(card, cards, requests)
            if cards == 1:  # turning requests away multiplies the search: one card only
                free = optimum.exact(card, cards, requests, forced=False)
                assert forced <= free <= bound
            assert forced <= bound <= len(requests)
            for name, policy in POLICIES.items():
                assert replay(card, cards, requests, policy).accepted <= forced, (name, mix)


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
        load=1.0,
        node_streams=1,
        node_requests=40,
        small=((1, 2, 6),),
        exact_streams=1,
        exact_requests=14,
    )
    first = placement_quality.run(scale=tiny)
    assert first == placement_quality.run(scale=tiny)
    assert "ours (pack) >= baseline on every mix" in first
    assert "8 card hypo-x8 bursty" in first  # the integer-program table ran
    for model in ("c3000-bw", "hypo-x8"):
        for mix in MIXES:
            assert f"{model} {mix} | LP bound" in first
