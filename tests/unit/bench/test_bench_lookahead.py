"""The online lookahead reference: its base policy is ours, and it decides by simulated outcome."""

from __future__ import annotations

import random

import pytest
from hygon_dcu_plugin.placement import PACK, choose, free_placements

from bench import optimum
from bench.lookahead import (
    Layout,
    Lookahead,
    MemoisedPack,
    Sample,
    decide,
    play_forward,
    replay_lookahead,
)
from bench.policies import OURS, POLICIES
from bench.replay import card_views, replay
from bench.tables import CardModel, discover
from bench.workload import MIXES, Request, seed_for, stream


@pytest.mark.parametrize("model", ["c3000-bw", "hypo-x8"])
def test_the_memoised_base_policy_is_ours(model: str) -> None:
    # Random node states reached by carving random free placements: the memoised ranking
    # must choose exactly what placement.choose chooses, card and slices, for every profile.
    card = discover(model)
    rng = random.Random(seed_for("memo", model))
    memo = MemoisedPack(card)
    for _round in range(200):
        spans: list[dict[int, tuple[int, int]]] = [{} for _ignored in range(4)]
        for rid in range(rng.randint(0, 12)):
            index = rng.randrange(4)
            profile = rng.choice(card.profiles)
            taken = card_views(card, spans)[index].occupied
            free = free_placements(profile, taken)
            if free:
                placement = rng.choice(free)
                spans[index][rid] = (placement.start, placement.size)
        views = card_views(card, spans)
        for profile in card.profiles:
            expected = choose(views, profile.name, PACK)
            got = memo.choose([v.occupied for v in views], profile.name)
            if expected is None:
                assert got is None
            else:
                want = (expected.card.index, expected.placement.start, expected.placement.size)
                assert got == want


def test_playing_forward_from_an_empty_node_is_a_replay_of_ours() -> None:
    card = discover("hypo-x8")
    for mix in MIXES:
        requests = stream(card, 8, mix, 1.0, 300, seed_for("forward", mix))
        empty: Layout = [[] for _ignored in range(8)]
        played = play_forward(MemoisedPack(card), empty, requests)
        assert played == replay(card, 8, requests, POLICIES[OURS]).accepted


def _one(card: CardModel, slices: int) -> str:
    return next(p.name for p in card.profiles if p.slices == slices)


def test_it_leaves_ours_where_the_sampled_future_rewards_it() -> None:
    # Two c3000-bw cards; card 0 runs one 1-slice instance. Ours puts a new 1-slice instance
    # beside it and keeps card 1 whole. The future: a long whole-card request, then four long
    # 1-slice ones. After ours' choice the whole-card request takes card 1 and two 1-slice
    # ones fit (3 accepted); after the other choice it is refused and all four fit (4).
    card = discover("c3000-bw")
    ours = MemoisedPack(card)
    occupied = [frozenset({0}), frozenset()]
    narrow, whole = _one(card, 1), _one(card, 4)
    assert ours.choose(occupied, narrow) == (0, 1, 1)
    future = [Request(1, 1.0, 99.0, whole, 4)] + [
        Request(2 + k, 2.0 + k, 99.0, narrow, 1) for k in range(4)
    ]
    layout: Layout = [[(0, 1, 99.0)], []]

    def rewarding() -> list[Sample]:
        return [(layout, 98.0, future)]

    chosen = decide(card, ours, occupied, narrow, 0.0, rewarding)
    assert chosen is not None and chosen[0] == 1  # the empty card: the whole-card one is refused
    # With nothing to come every choice scores alike, and ours' own choice stands.
    assert decide(card, ours, occupied, narrow, 0.0, list) == (0, 1, 1)
    # Nothing fits: refused, whatever the future.
    full = [frozenset(range(4)), frozenset(range(4))]
    assert decide(card, ours, full, narrow, 0.0, rewarding) is None


@pytest.mark.parametrize("model", ["c3000-bw", "hypo-x8"])
def test_the_lookahead_never_beats_the_optimum_and_repeats(model: str) -> None:
    # It is an online forced-admission rule, so the clairvoyant optimum bounds it; its
    # futures are seeded, so the same stream gives the same outcome.
    card = discover(model)
    sampling = Lookahead(futures=4, horizon=6)
    for mix in MIXES:
        requests = stream(card, 2, mix, 1.0, 8, seed_for("lookahead-test", model, mix))
        online = replay_lookahead(card, 2, requests, mix, 1.0, sampling)
        assert online.accepted <= optimum.exact(card, 2, requests, forced=True)
        assert replay_lookahead(card, 2, requests, mix, 1.0, sampling) == online
