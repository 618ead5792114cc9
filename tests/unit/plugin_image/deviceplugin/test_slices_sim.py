"""Logical slices through the device plugin on a simulated node with the mode off: what is
advertised, what Allocate creates and answers, what reclaim destroys, and how a whole card
and a slice of it exclude each other (docs/dev/logical-slices.md)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
import simnode
from fake_kube import slice_limits
from hygon_dcu_plugin.deviceplugin.refused import RequestRefused
from hygon_dcu_plugin.deviceplugin.slice_marks import MARK_DIR
from hygon_dcu_plugin.geometry import decode, encode
from hygon_dcu_plugin.vocabulary import SLICED, WHOLE_CARD, annotation_key
from plugin_harness import Harness

GIB = 1024


def marks(harness: Harness) -> set[str]:
    directory = harness.sim.root / MARK_DIR.lstrip("/")
    return set(os.listdir(directory)) if directory.is_dir() else set()


def live(harness: Harness) -> list[tuple[int, int, int, int]]:
    """(vdev id, card, compute units, MiB) of every live vdev, from the simulator itself."""
    return sorted((v.id, v.card, v.cu_count, v.mem_mib) for v in harness.sim.status().vdevs)


def test_mode_off_advertises_whole_cards_and_four_slices_per_card(
    slice_harness: Harness,
) -> None:
    counts = slice_harness.counts()
    assert counts[WHOLE_CARD] == 8
    assert counts[SLICED] == 32
    assert counts["hygon.com/dcu.partitioned"] == 0


def test_two_slices_share_one_card_each_given_only_its_own(slice_harness: Harness) -> None:
    first = slice_harness.admit_slice("a", 16 * GIB)
    second = slice_harness.admit_slice("b", 24 * GIB)
    vdevs = live(slice_harness)
    # Pack: the second slice goes on the card the first one started.
    assert [(card, cus, mib) for _id, card, cus, mib in vdevs] == [
        # The card's 80 compute units in proportion to its 65520 MiB, rounded up.
        (0, 21, 16 * GIB),  # 80 x 16384 / 65520 = 20.005
        (0, 31, 24 * GIB),  # 80 x 24576 / 65520 = 30.007
    ]
    for response, (vdev_id, *_rest) in zip((first, second), vdevs, strict=True):
        confs = [m for m in response.mounts if m.container_path.startswith("/etc/vdev/")]
        assert [(m.container_path, m.read_only) for m in confs] == [
            (f"/etc/vdev/docker/vdev{vdev_id}.conf", True)
        ]
        assert confs[0].host_path == str(slice_harness.sim.root / f"etc/vdev/vdev{vdev_id}.conf")
        paths = {d.container_path for d in response.devices}
        assert {"/dev/kfd", "/dev/mkfd"} <= paths
        assert any(p.startswith("/dev/dri/renderD") for p in paths)
        assert not response.envs
    store = slice_harness.runtime.store.load()
    assert sorted(g.vdev_id for g in store.slices) == [v[0] for v in vdevs]
    uids = {g.pod_name: g.pod_uid for g in store.slices}
    assert marks(slice_harness) == {
        f"{uids['a']}_main_0_{vdevs[0][0]}",
        f"{uids['b']}_main_0_{vdevs[1][0]}",
    }
    annotation = json.loads(slice_harness.kube.annotations["default/a"][annotation_key("main")])
    assert annotation["slice"] == vdevs[0][0] and annotation["memory_mib"] == 16 * GIB
    counts = slice_harness.counts()
    assert counts[SLICED] == 32  # 2 held + 30 free
    assert counts[WHOLE_CARD] == 7  # card 0 is sliced: not offered whole


@pytest.mark.parametrize("how", ["Succeeded", "Failed", "delete"])
def test_a_finished_pod_has_its_slice_destroyed_mark_and_grant_removed(
    slice_harness: Harness, how: str
) -> None:
    slice_harness.admit_slice("keep", 8 * GIB)
    slice_harness.admit_slice("done", 8 * GIB)
    slice_harness.finish("done", how=how)
    report = slice_harness.runtime.reclaim_slices()
    assert len(report.destroyed) == 1 and not report.orphans
    grants = slice_harness.runtime.store.load().slices
    assert [g.pod_name for g in grants] == ["keep"]
    assert [v[0] for v in live(slice_harness)] == [grants[0].vdev_id]
    assert marks(slice_harness) == {grants[0].mark_name}
    assert slice_harness.counts()[WHOLE_CARD] == 7


def test_the_compute_units_asked_are_given(slice_harness: Harness) -> None:
    slice_harness.admit_slice("a", 4 * GIB, compute_units=40)
    assert live(slice_harness) == [(0, 0, 40, 4 * GIB)]


def test_a_card_held_whole_takes_no_slice(slice_harness: Harness) -> None:
    slice_harness.kube.add_pod("default", "whole", {"main": {WHOLE_CARD: "1"}})
    slice_harness.kubelet.pods["default/whole"] = {"main": {WHOLE_CARD: ["0000:09:00.0"]}}
    slice_harness.allocator.allocate(WHOLE_CARD, ["0000:09:00.0"])
    slice_harness.admit_slice("a", 8 * GIB)
    assert [card for _id, card, _c, _m in live(slice_harness)] == [1]
    assert slice_harness.counts()[SLICED] == 28  # card 0's four are not offered


def test_a_sliced_card_is_refused_whole(slice_harness: Harness) -> None:
    slice_harness.admit_slice("a", 8 * GIB)
    plan = {d.id: d.healthy for d in slice_harness.runtime.plan()[WHOLE_CARD]}
    assert plan["0000:09:00.0"] is False
    slice_harness.kube.add_pod("default", "whole", {"main": {WHOLE_CARD: "1"}})
    slice_harness.kubelet.pods["default/whole"] = {"main": {}}
    with pytest.raises(RequestRefused) as refused:
        slice_harness.allocator.allocate(WHOLE_CARD, ["0000:09:00.0"])
    assert refused.value.reason == "card_sliced"
    assert "vdev 0 (0000:09:00.0)" in str(refused.value)


def test_a_size_no_card_can_hold_is_refused_naming_the_largest(slice_harness: Harness) -> None:
    with pytest.raises(RequestRefused) as refused:
        slice_harness.admit_slice("huge", 70000)
    assert refused.value.reason == "slice_too_large"
    assert "65520 MiB and 80 compute units" in str(refused.value)
    assert live(slice_harness) == []


def test_a_full_node_refuses_with_what_is_free(
    sim_node_factory: Callable[..., simnode.SimNode], short_tmp: Path
) -> None:
    harness = Harness(sim_node_factory(cards=1), short_tmp)
    harness.admit_slice("a", 40 * GIB)
    with pytest.raises(RequestRefused) as refused:
        harness.admit_slice("b", 40 * GIB)
    assert refused.value.reason == "no_capacity"
    # 80 x 40960 / 65520 = 50.01, so 51 compute units are taken.
    assert "card 0: 3 of 4 slices, 29 compute units, 24560 MiB free" in str(refused.value)
    assert len(live(harness)) == 1


def test_a_retried_allocate_answers_the_same_slice(slice_harness: Harness) -> None:
    slice_harness.kube.add_pod("default", "a", {"main": slice_limits(8 * GIB)})
    slice_harness.kubelet.pods["default/a"] = {"main": {}}
    token = slice_harness.free_token(SLICED)
    first = slice_harness.allocator.allocate(SLICED, [token])
    again = slice_harness.allocator.allocate(SLICED, [token])
    assert first == again
    assert len(live(slice_harness)) == 1


def test_two_slices_in_one_container_are_refused(slice_harness: Harness) -> None:
    with pytest.raises(RequestRefused) as refused:
        slice_harness.allocator.allocate(SLICED, ["slice-000", "slice-001"])
    assert refused.value.reason == "too_many"
    assert live(slice_harness) == []


def test_each_granted_slice_is_named_in_the_metrics(slice_harness: Harness) -> None:
    slice_harness.admit_slice("a", 8 * GIB, compute_units=10)
    grant = slice_harness.runtime.store.load().slices[0]
    metrics = slice_harness.runtime.metrics
    holder = {"namespace": "default", "pod": "a", "container": "main", "card": "0000:09:00.0"}
    size = {"compute_units": "10", "memory_mib": "8192"}
    assert metrics.sample("hygon_dcu_slice_info", vdev=str(grant.vdev_id), **holder, **size) == 1
    slice_harness.finish("a")
    slice_harness.runtime.reclaim_slices()
    assert "hygon_dcu_slice_info{" not in slice_harness.runtime.metrics.render()


def test_what_each_card_has_left_for_slices_is_in_the_metrics(slice_harness: Harness) -> None:
    metrics = slice_harness.runtime.metrics

    def free(card: str, resource: str) -> float:
        return float(metrics.sample("hygon_dcu_slice_card_free", card=card, resource=resource))

    def occupancy(card: str) -> float:
        return float(metrics.sample("hygon_dcu_card_occupancy_ratio", card=card))

    slice_harness.admit_slice("a", 8 * GIB, compute_units=10)
    slice_harness.runtime.refresh()
    assert free("0000:09:00.0", "compute_units") == 70
    assert free("0000:09:00.0", "memory_mib") == 65520 - 8 * GIB
    assert free("0000:09:00.0", "slices") == 3
    assert free("0000:0c:00.0", "memory_mib") == 65520
    assert (occupancy("0000:09:00.0"), occupancy("0000:0c:00.0")) == (10 / 80, 0)
    assert metrics.sample("hygon_dcu_mig_mode", mode="off") == 1
    assert metrics.sample("hygon_dcu_mig_mode", mode="on") == 0
    # A card the kubelet holds whole has nothing left for slices.
    slice_harness.kube.add_pod("default", "whole", {"main": {WHOLE_CARD: "1"}})
    slice_harness.kubelet.pods["default/whole"] = {"main": {WHOLE_CARD: ["0000:0c:00.0"]}}
    slice_harness.allocator.allocate(WHOLE_CARD, ["0000:0c:00.0"])
    slice_harness.runtime.refresh()
    assert free("0000:0c:00.0", "memory_mib") == 0
    assert free("0000:0c:00.0", "slices") == 0
    assert occupancy("0000:0c:00.0") == 1


def test_the_geometry_lease_lists_the_cards_offered_for_slices(slice_harness: Harness) -> None:
    slice_harness.admit_slice("a", 16 * GIB)
    uid = slice_harness.runtime.store.load().slices[0].pod_uid
    assert slice_harness.sim.create_vdevs(1, "4", "1024").returncode == 0  # no grant names it
    published = decode(encode(slice_harness.runtime.geometry()))
    assert published.cards == ()  # the mode is off: no partition
    assert len(published.sliced) == 8
    first, second = published.sliced[:2]
    assert (first.pci, first.compute_units, first.memory_mib, first.max_slices) == (
        "0000:09:00.0",
        80,
        65520,
        4,
    )
    assert [(s.compute_units, s.memory_mib, s.pod_uid) for s in first.live] == [(21, 16 * GIB, uid)]
    assert [(s.compute_units, s.memory_mib, s.pod_uid) for s in second.live] == [(4, 1024, "")]
    assert not first.held_whole
