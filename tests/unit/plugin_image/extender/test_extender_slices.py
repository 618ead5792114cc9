"""Logical slices through the extender (docs/dev/extender.md, "Logical slices"): filter and
bind count each card's free compute units, memory and slice count in the geometry a real
device plugin publishes on a simulated node with the mode off, plus the slices reserved and
not yet created; the plugin's slice allocator then creates exactly the reserved slice, and its
next geometry releases the reservation."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import simnode
from fake_kube import slice_limits
from hygon_dcu_plugin.deviceplugin.refused import RequestRefused
from hygon_dcu_plugin.extender.decide import NodeState, NotPlaced, Placed
from hygon_dcu_plugin.extender.slice_decide import NO_SLICES, place_slices
from hygon_dcu_plugin.geometry import decode as decode_geometry
from hygon_dcu_plugin.geometry import encode
from hygon_dcu_plugin.request import SliceRequest
from hygon_dcu_plugin.reservation import Reservation, ReservedSlice
from hygon_dcu_plugin.reservation import decode as decode_reservation
from hygon_dcu_plugin.reservation import encode as encode_reservation
from hygon_dcu_plugin.vocabulary import RESERVATION_ANNOTATION
from plugin_harness import Harness
from webhook_support import Authority

from .fake_cluster import FakeCluster
from .support import T0, Geometries, Running, serving

GIB = 1024
NODE = "node-1"  # the harness's node name


def reservation_of(cluster: FakeCluster, name: str) -> Reservation:
    return decode_reservation(cluster.pod(name)["metadata"]["annotations"][RESERVATION_ANNOTATION])


def admit_bound(harness: Harness, cluster: FakeCluster, name: str, memory_mib: int) -> None:
    """The kubelet admits a pod the extender bound: Allocate reads the pod as the API server
    has it, the reservation annotation included."""
    pod = cluster.pod(name)
    harness.admit_slice(
        name,
        memory_mib,
        namespace="ml",
        uid=pod["metadata"]["uid"],
        annotations={
            RESERVATION_ANNOTATION: pod["metadata"]["annotations"][RESERVATION_ANNOTATION]
        },
    )


def publish(cluster: FakeCluster, harness: Harness) -> None:
    cluster.put_lease(NODE, encode(harness.runtime.geometry()), renewed=T0)


@pytest.fixture
def two_cards(sim_node_factory: Callable[..., simnode.SimNode], short_tmp: Path) -> Harness:
    """A node of two 65520 MiB, 80-compute-unit cards with the mode off."""
    return Harness(sim_node_factory(cards=2), short_tmp)


def test_a_burst_whose_count_fits_but_whose_sizes_do_not_binds_only_what_the_cards_hold(
    tmp_path: Path, authority: Authority, cluster: FakeCluster, two_cards: Harness
) -> None:
    # Eight slice tokens, so the scheduler's count lets all six through; 40 GiB each leaves
    # room for one per card.
    publish(cluster, two_cards)
    with serving(tmp_path, authority, cluster) as running:
        pods = [cluster.add_pod(f"p{i}", {"main": slice_limits(40 * GIB)}) for i in range(6)]
        assert running.filter(pods[0], [NODE])["nodenames"] == [NODE]
        errors = running.bind_all_at_once(pods, NODE)

        bound = sorted(name for name, error in errors.items() if not error)
        assert len(errors) == 6 and len(bound) == 2
        cards = sorted(reservation_of(cluster, name).slices["main"].card for name in bound)
        pcis = [card.pci for card in decode_geometry(encode(two_cards.runtime.geometry())).sliced]
        assert cards == sorted(pcis)  # one on each card
        for name, error in errors.items():
            if name not in bound:
                assert error.startswith(f"node {NODE} cannot place the pod: no card has room")
                assert "24560 MiB free" in error  # 65520 - 40960, counting the reservations
        waiting = next(p for p in pods if p["metadata"]["name"] not in bound)
        answer = running.filter(waiting, [NODE])
        assert answer["nodenames"] == []
        assert "no card has room for a slice of 40960 MiB" in answer["failedNodes"][NODE]

        # The kubelet admits the two bound pods: each slice is created where it was reserved,
        # and the next geometry releases both reservations.
        for name in bound:
            admit_bound(two_cards, cluster, name, 40 * GIB)
        created = {(v.card, v.mem_mib) for v in two_cards.sim.status().vdevs}
        assert created == {(0, 40 * GIB), (1, 40 * GIB)}
        publish(cluster, two_cards)
        released = running.state.refresh()
        assert sorted(r.reservation.pod.name for r in released) == bound
        assert running.state.counts()[0] == 0
        # Still no room: the geometry counts the created slices now.
        assert running.filter(waiting, [NODE])["nodenames"] == []

        # One pod finishes: its slice is destroyed, the geometry shows the room, and a waiting
        # pod binds.
        two_cards.finish(bound[0], namespace="ml")
        two_cards.runtime.reclaim_slices()
        publish(cluster, two_cards)
        running.state.refresh()
        assert running.filter(waiting, [NODE])["nodenames"] == [NODE]
        assert running.bind(waiting, NODE) == ""


def test_the_allocator_creates_the_reserved_card_not_its_own_choice(
    tmp_path: Path, authority: Authority, cluster: FakeCluster, two_cards: Harness
) -> None:
    # Card 0 holds a slice, so pack alone would put the next one there; the extender reserves
    # card 1 for it because card 0's room is reserved for another pod.
    two_cards.admit_slice("first", 16 * GIB)
    publish(cluster, two_cards)
    with serving(tmp_path, authority, cluster) as running:
        big = cluster.add_pod("big", {"main": slice_limits(44 * GIB)})
        small = cluster.add_pod("small", {"main": slice_limits(40 * GIB)})
        assert running.bind(big, NODE) == ""
        assert running.bind(small, NODE) == ""
        pcis = [card.pci for card in decode_geometry(encode(two_cards.runtime.geometry())).sliced]
        assert reservation_of(cluster, "big").slices["main"].card == pcis[0]
        assert reservation_of(cluster, "small").slices["main"].card == pcis[1]
        # "small" is admitted first; without its reservation the allocator would take card 0
        # for it (the fullest that fits), and "big" would then fit nowhere but card 1.
        admit_bound(two_cards, cluster, "small", 40 * GIB)
        admit_bound(two_cards, cluster, "big", 44 * GIB)
        cards = sorted((v.card, v.mem_mib) for v in two_cards.sim.status().vdevs)
        assert cards == [(0, 16 * GIB), (0, 44 * GIB), (1, 40 * GIB)]


def _reserved(harness: Harness, card: int, cus: int, mib: int, name: str = "main") -> str:
    pci = harness.runtime.geometry().sliced[card].pci
    return encode_reservation(Reservation(NODE, T0, {}, {name: ReservedSlice(pci, cus, mib)}))


@pytest.mark.parametrize(
    ("case", "reason", "why"),
    [
        ("no-room", "reservation_taken", "cannot be created: card 0: 3 of 4 slices"),
        ("other-container", "bad_reservation", "no slice entry for container 'main'"),
        ("other-size", "bad_reservation", "which requests 16384 MiB"),
    ],
)
def test_a_reserved_slice_that_cannot_be_created_as_written_is_refused(
    two_cards: Harness, case: str, reason: str, why: str
) -> None:
    two_cards.admit_slice("first", 40 * GIB)  # card 0: 24560 MiB left
    annotation = {
        "no-room": _reserved(two_cards, 0, 40, 30 * GIB),
        "other-container": _reserved(two_cards, 1, 21, 16 * GIB, name="sidecar"),
        "other-size": _reserved(two_cards, 1, 40, 30 * GIB),
    }[case]
    memory = 30 * GIB if case == "no-room" else 16 * GIB
    before = sorted(v.id for v in two_cards.sim.status().vdevs)
    with pytest.raises(RequestRefused) as refused:
        two_cards.admit_slice(
            "second", memory, uid="uid-second", annotations={RESERVATION_ANNOTATION: annotation}
        )
    assert refused.value.reason == reason
    assert why in str(refused.value)
    assert sorted(v.id for v in two_cards.sim.status().vdevs) == before  # nothing created


def test_a_pod_places_its_largest_slice_first_and_skips_cards_held_whole(
    geometries: Geometries, two_cards: Harness
) -> None:
    geometry = two_cards.runtime.geometry()
    requests = [("small", SliceRequest(8 * GIB)), ("large", SliceRequest(60 * GIB))]
    placed = place_slices(NodeState(NODE, geometry), requests)
    assert isinstance(placed, Placed)
    # The large one first, on card 0; 4080 MiB are left there, so the small one takes card 1.
    assert {a.container: a.card for a in placed.slices} == {
        "large": geometry.sliced[0].pci,
        "small": geometry.sliced[1].pci,
    }
    # Reserved slices count: with card 1's memory reserved, the large one fits nowhere.
    full = {geometry.sliced[1].pci: ((80, 65520),), geometry.sliced[0].pci: ((1, 8 * GIB),)}
    refused = place_slices(NodeState(NODE, geometry, reserved_slices=full), requests)
    assert isinstance(refused, NotPlaced)
    assert "no card has room for a slice of 61440 MiB (container large)" in refused.why
    # A partitioned node (schema 1, no slices) offers none.
    partitioned = geometries.empty("c3000-bw", cards=1)
    assert place_slices(NodeState(NODE, partitioned), requests) == NotPlaced(NO_SLICES)


def test_a_finished_slice_pod_releases_its_reservation_before_it_is_created(
    running_slices: Running, cluster: FakeCluster
) -> None:
    pod = cluster.add_pod("gone", {"main": slice_limits(8 * GIB)})
    assert running_slices.bind(pod, NODE) == ""
    uid = pod["metadata"]["uid"]
    assert running_slices.state.reservation_of(uid) is not None
    cluster.set_phase("gone", "Failed")
    released = running_slices.state.refresh()
    assert [(r.reservation.pod.uid, r.why) for r in released] == [(uid, "pod-finished")]


@pytest.fixture
def running_slices(
    tmp_path: Path, authority: Authority, cluster: FakeCluster, two_cards: Harness
) -> Any:
    publish(cluster, two_cards)
    with serving(tmp_path, authority, cluster) as extender:
        yield extender


def test_a_reservation_is_released_only_by_a_slice_of_its_own_pod_and_size(
    running_slices: Running, cluster: FakeCluster, two_cards: Harness
) -> None:
    pod = cluster.add_pod("mine", {"main": slice_limits(8 * GIB)})
    assert running_slices.bind(pod, NODE) == ""
    uid = pod["metadata"]["uid"]
    # Another pod's slice of the same size on the same card does not release it.
    two_cards.admit_slice("other", 8 * GIB)
    publish(cluster, two_cards)
    assert running_slices.state.refresh() == []
    assert running_slices.state.reservation_of(uid) is not None
