"""A node's placements kept per pod shape (place_memo): the same answers as placing afresh, on
fragmented nodes of both simulated models, and each node placed once per pod across filter,
prioritize and bind."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import hygon_dcu_plugin.extender.decide as decide_module
import pytest
from hygon_dcu_plugin.extender.decide import NodeState, place
from hygon_dcu_plugin.extender.place_memo import PlaceMemo
from hygon_dcu_plugin.geometry import Geometry, card_views
from hygon_dcu_plugin.placement import PACK, choose, slices_of
from hygon_dcu_plugin.request import PartitionRequest, ProfileRequest, SizeRequest
from webhook_support import Authority

from .fake_cluster import FakeCluster
from .support import T0, Geometries, profile_limits, serving, size_limits, text

MODELS = ("c3000-bw", "hypo-x8")


def fragmented(empty: Geometry, rng: random.Random) -> Geometry:
    """The node filled by the allocator's rule to a random share, then a random share of its
    instances removed: free slices between carved ones."""
    cards = list(empty.cards)
    names = sorted({p.name for c in cards for p in c.profiles})
    carved = []
    for _attempt in range(40):
        choice = choose(card_views(Geometry(0, tuple(cards))), rng.choice(names), PACK)
        if choice is not None and rng.random() < 0.8:
            index, spot = choice.card.index, choice.placement
            used = slices_of(spot.start, spot.size)
            cards[index] = dataclasses.replace(cards[index], occupied=cards[index].occupied | used)
            carved.append((index, used))
    for index, used in rng.sample(carved, len(carved) // 2):
        cards[index] = dataclasses.replace(cards[index], occupied=cards[index].occupied - used)
    return Geometry(1, tuple(cards))


def some_pod(geometry: Geometry, rng: random.Random) -> list[tuple[str, PartitionRequest]]:
    """One to three containers, each by profile or by a size (some no profile covers)."""
    profiles = [p for c in geometry.cards for p in c.profiles]
    pod: list[tuple[str, PartitionRequest]] = []
    for n in range(rng.randint(1, 3)):
        profile = rng.choice(profiles)
        request: PartitionRequest = (
            ProfileRequest(profile.name)
            if rng.random() < 0.5
            else SizeRequest(profile.memory_mib - rng.randint(0, 6000) + rng.choice((0, 90000)))
        )
        pod.append((f"c{n}-{rng.randint(0, 9)}", request))
    return pod


def test_the_memo_answers_what_placing_afresh_answers(geometries: Geometries) -> None:
    rng = random.Random(7)
    memo = PlaceMemo(max_shapes=8)  # small, so entries are dropped and made again
    nodes = {}
    for n in range(24):
        empty = geometries.empty(MODELS[n % 2], 4)
        nodes[f"node-{n}"] = fragmented(empty, rng)
    compared = placed = 0
    for _round in range(6):
        # Reservations come and go, as binds and carves move them.
        reserved = {
            name: {geometry.cards[0].pci: ((rng.randrange(8), 1),)} if rng.random() < 0.4 else {}
            for name, geometry in nodes.items()
        }
        for _pod in range(30):
            name = rng.choice(sorted(nodes))
            state = NodeState(name, nodes[name], reserved=reserved[name])
            pod = some_pod(nodes[name], rng)
            expected = place(state, pod)
            assert memo.place(state, pod) == expected
            assert memo.place(state, pod) == expected  # the kept answer, in this pod's names
            compared += 1
            placed += isinstance(expected, decide_module.Placed)
    # Both kinds of answer were compared, many times.
    assert compared == 180
    assert 30 < placed < 170


def test_a_node_without_geometry_is_answered_with_its_reason() -> None:
    memo = PlaceMemo()
    answer = memo.place(NodeState("gone", None, "geometry stale: renewed 90 s ago"), [])
    assert answer == decide_module.NotPlaced("geometry stale: renewed 90 s ago")
    assert len(memo) == 0


def test_the_memo_keeps_a_bounded_number_of_nodes(geometries: Geometries) -> None:
    memo = PlaceMemo(max_nodes=5)
    geometry = geometries.empty("c3000-bw", 2)
    pod: list[tuple[str, PartitionRequest]] = [("main", SizeRequest(1024))]
    for n in range(12):
        memo.place(NodeState(f"node-{n}", geometry), pod)
    assert len(memo) == 5


def test_filter_prioritize_and_bind_place_each_node_once(
    tmp_path: Path,
    authority: Authority,
    cluster: FakeCluster,
    geometries: Geometries,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    nodes = [f"node-{n}" for n in range(6)]
    for node in nodes:
        cluster.put_lease(node, text(geometries.empty("c3000-bw", 2)), renewed=T0)
    chosen: list[str] = []  # what placed one request on one node: choose or choose_size
    for name in ("choose", "choose_size"):
        real = getattr(decide_module, name)

        def counted(*args: object, _real: object = real, _name: str = name) -> object:
            chosen.append(_name)
            return _real(*args)  # type: ignore[operator]

        monkeypatch.setattr(decide_module, name, counted)
    profile = geometries.empty("c3000-bw", 2).cards[0].profiles[0].name
    by_profile = cluster.add_pod("by-profile", {"main": profile_limits(profile)})
    by_size = cluster.add_pod("by-size", {"main": size_limits(1000)})
    with serving(tmp_path, authority, cluster) as running:
        bound = set()
        for pod in (by_profile, by_size):
            chosen.clear()
            passed = running.filter(pod, nodes)["nodenames"]
            assert passed == nodes
            assert len(chosen) == len(nodes)  # one placement per node
            scores = running.prioritize(pod, nodes)
            assert len(chosen) == len(nodes)  # none again
            best = max(sorted(scores), key=lambda node: scores[node])
            assert running.bind(pod, best) == ""
            bound.add(best)
            assert len(chosen) == len(nodes)  # the bind's fresh Lease read: the same content
        # A reservation changes its node: a pod of a shape seen before is placed anew there
        # and nowhere else.
        other = cluster.add_pod("after", {"main": profile_limits(profile)})
        chosen.clear()
        running.filter(other, nodes)
        assert len(chosen) == len(bound)
