"""Reclaim against the simulated node."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import simnode
from ansible_collections.hygon.dcu.plugins.module_utils.cards import Card
from ansible_collections.hygon.dcu.plugins.module_utils.node import Node
from hygon_dcu_plugin.deviceplugin.reclaimer import PassReport
from hygon_dcu_plugin.kube import PodEvent
from plugin_harness import Harness


def carve(harness: Harness, card: int = 7, profile_id: int = 3, start: int = 0) -> str:
    """An instance carved behind the plugin's back (an operator, or a crash before the grant)."""
    instance = Node(str(harness.sim.root), str(simnode.LIB_PATH)).create(card, profile_id, start)
    assert instance.uuid
    return instance.uuid


def test_deleted_pod_is_reclaimed_ci_then_gi(harness: Harness) -> None:
    harness.admit("a")
    (instance,) = harness.node.instances()
    harness.finish("a")
    report = harness.reclaimer.run_pass()
    assert report.destroyed == [instance.uuid]
    assert harness.node.instances() == []
    assert harness.runtime.store.load().grants == []
    assert [op.split()[0] for op in harness.sim.ops()[-2:]] == ["destroy_ci", "destroy_gi"]
    assert (
        harness.runtime.metrics.sample("hygon_dcu_reclaim_actions_total", action="destroyed") == 1
    )


def test_succeeded_failed_and_terminating_pods_are_reclaimed_running_kept(
    harness: Harness,
) -> None:
    for name in ("ok", "bad", "running", "leaving"):
        harness.admit(name)
    harness.finish("ok", how="Succeeded")
    harness.finish("bad", how="Failed")
    harness.kube.set_phase("default", "running", "Running")
    harness.kube.mark_deleting("default", "leaving")  # nothing holds its partition: it goes
    report = harness.reclaimer.run_pass()
    assert len(report.destroyed) == 3
    assert [r.pod_name for r in harness.runtime.store.load()] == ["running"]
    assert len(harness.node.instances()) == 1


def test_a_terminating_pod_still_using_its_partition_keeps_it_until_it_stops(
    harness: Harness,
) -> None:
    response = harness.admit("leaving")
    (instance,) = harness.node.instances()
    with holding(harness, response.envs["DMI_MIG_VISIBLE_DEVICE"]):
        harness.kube.mark_deleting("default", "leaving")
        for _pass in range(2):
            report = harness.reclaimer.run_pass()
            assert report.in_use == [instance.uuid]
        assert len(harness.node.instances()) == 1
        # Stopping inside its grace is not a stuck reclaim: no Warning for it.
        harness.runtime.events.drain()
        assert "PartitionReclaimStuck" not in harness.kube.reasons("leaving")
    assert harness.reclaimer.run_pass().destroyed == [instance.uuid]
    assert harness.runtime.store.load().grants == []


def test_grace_protects_only_a_grant_whose_pod_cannot_be_seen(
    bw_node: simnode.SimNode, tmp_path: Path
) -> None:
    harness = Harness(bw_node, tmp_path / "state", grace_seconds=3600.0)
    harness.admit("done")
    harness.admit("unseen")
    harness.admit("deleted")
    harness.finish("done", how="Failed")
    # The API server does not show "unseen" (no deletion was watched): it may be lag.
    unseen = harness.kube.pods["default/unseen"]
    harness.kube.pods.pop("default/unseen")
    deleted = harness.kube.pods["default/deleted"]
    harness.finish("deleted")
    harness.reclaimer.pod_event(PodEvent("DELETED", "default", "deleted", deleted.uid))
    report = harness.reclaimer.run_pass()
    assert len(report.destroyed) == 2
    assert [r.pod_name for r in harness.runtime.store.load()] == ["unseen"]
    assert unseen.uid == harness.runtime.store.load().grants[0].pod_uid


@pytest.mark.parametrize("how", ["deletion started", "delete", "Succeeded", "Failed"])
def test_a_pod_that_ends_a_second_after_its_grant_is_reclaimed_at_the_event(
    bw_node: simnode.SimNode, tmp_path: Path, how: str
) -> None:
    # Default grace, and a resync far away: only the watch event can trigger this reclaim.
    harness = Harness(bw_node, tmp_path / "state", grace_seconds=30.0, resync_seconds=3600.0)
    harness.runtime.start()
    try:
        time.sleep(0.5)  # the start-up pass is over
        passes = harness.reclaimer.passes
        harness.admit("quick")
        time.sleep(1.0)
        if how == "deletion started":
            harness.kube.mark_deleting("default", "quick")
        else:
            harness.finish("quick", how=how)
        deadline = time.monotonic() + 20
        while harness.node.instances() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert harness.node.instances() == []
        assert harness.reclaimer.passes > passes
    finally:
        harness.runtime.stop()


@contextlib.contextmanager
def holding(harness: Harness, visible_device: str) -> Iterator[None]:
    """The workload: dcu-probe --hold keeps the partition's files open, like a running
    process, until the block ends."""
    holder = subprocess.Popen(
        [str(simnode.PROBE_PATH), "--hold"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env={
            **harness.sim.env(),
            "DMI_MIG_VISIBLE_DEVICE": visible_device,
            "HYDMI_PROBE_VIEW": str(harness.sim.root),
        },
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert "kind=partition" in holder.stdout.readline()
        yield
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)


def test_a_held_instance_is_retried_until_released(harness: Harness) -> None:
    response = harness.admit("a")
    (instance,) = harness.node.instances()
    with holding(harness, response.envs["DMI_MIG_VISIBLE_DEVICE"]):
        harness.finish("a")
        first = harness.reclaimer.run_pass()
        assert first.in_use == [instance.uuid]
        assert len(harness.node.instances()) == 1
        assert len(harness.runtime.store.load().grants) == 1
        harness.reclaimer.run_pass()  # still held: retried, but told only once
        assert harness.runtime.events.drain()
        assert harness.kube.reasons("a").count("PartitionReclaimStuck") == 1
    second = harness.reclaimer.run_pass()
    assert second.destroyed == [instance.uuid]
    assert harness.node.instances() == []


def test_poison_directories_are_swept(harness: Harness) -> None:
    poison = harness.sim.ci_dir / "dev0gi3ci0.conf"
    poison.mkdir()
    report = harness.reclaimer.run_pass()
    assert report.swept == ["/etc/dmi_mig_config/ci/dev0gi3ci0.conf"]
    assert not poison.exists()
    # The id it blocked can be carved again.
    harness.admit("a")
    assert [i.gpu_instance_id for i in harness.node.instances()] == [3]


def test_hand_carved_instance_is_collected(harness: Harness) -> None:
    harness.admit("keep")
    orphan = carve(harness)
    report = harness.reclaimer.run_pass()
    assert report.orphans == [f"0000:cc:00.0 gi3 {orphan}"]
    assert [r.pod_name for r in harness.runtime.store.load()] == ["keep"]
    assert len(harness.node.instances()) == 1


def test_gpu_instance_without_compute_instance_is_collected(harness: Harness) -> None:
    def die_after_gi(step: str) -> None:
        if step == "gpu_instance_created":
            raise KeyboardInterrupt  # stands for the caller dying between GI and CI

    node = Node(str(harness.sim.root), str(simnode.LIB_PATH))
    with contextlib.suppress(KeyboardInterrupt):
        node.create(5, 3, 2, checkpoint=die_after_gi)
    assert [i.compute_instance_id for i in harness.node.instances()] == [None]
    report = harness.reclaimer.run_pass()
    assert len(report.orphans) == 1
    assert harness.node.instances() == []


def test_a_claim_that_appears_mid_sweep_survives(harness: Harness) -> None:
    orphan = carve(harness, card=0, start=3)
    claimed: list[str] = []

    def allocate_now(step: str) -> None:
        # After the reclaimer listed card 0's instances, before it takes the card lock.
        if step == "orphans_listed" and not claimed:
            harness.reclaimer.checkpoint = None
            harness.admit("newcomer")
            claimed.extend(r.uuid for r in harness.runtime.store.load())

    harness.reclaimer.checkpoint = allocate_now
    report = harness.reclaimer.run_pass()
    assert len(claimed) == 1
    assert report.orphans == [f"0000:09:00.0 gi3 {orphan}"]
    assert [i.uuid for i in harness.node.instances()] == claimed


def test_a_corrupt_grant_stops_orphan_collection_and_is_reported(harness: Harness) -> None:
    orphan = carve(harness)
    harness.admit("a")
    bad = Path(harness.settings.grants_dir) / "0123.json"
    bad.write_text("{not json")
    report = harness.reclaimer.run_pass()
    assert report.unreadable and report.unreadable[0][0] == str(bad)
    assert (report.orphan_collection_skipped or "").startswith("skipped: unreadable grants")
    assert orphan in {i.uuid for i in harness.node.instances()}
    assert (
        harness.runtime.metrics.sample("hygon_dcu_reclaim_actions_total", action="corrupt_grant")
        == 1
    )
    bad.unlink()
    assert harness.reclaimer.run_pass().orphans == [f"0000:cc:00.0 gi3 {orphan}"]


def test_an_unreadable_grant_file_fails_closed(harness: Harness) -> None:
    if os.geteuid() == 0:
        # root reads mode-000 files; a directory where a grant file should be is unreadable
        bad = Path(harness.settings.grants_dir) / "4567.json"
        bad.mkdir()
    else:
        bad = Path(harness.settings.grants_dir) / "4567.json"
        bad.write_text("{}")
        bad.chmod(0)
    orphan = carve(harness)
    report = harness.reclaimer.run_pass()
    assert report.unreadable
    assert orphan in {i.uuid for i in harness.node.instances()}


def test_a_uuid_mismatch_is_never_destroyed(harness: Harness) -> None:
    harness.admit("a")
    (mine,) = harness.node.instances()
    # Behind our back: our instance is destroyed and the id handed out again to someone else.
    harness.node.destroy(mine.card_index, mine.gpu_instance_id)
    theirs = carve(harness, card=mine.card_index, start=mine.placement.start)
    harness.finish("a")
    report = harness.reclaimer.run_pass()
    assert report.stale == [mine.uuid]
    assert report.destroyed == []
    # Not destroyed as "ours"; as nobody's it is an orphan in the same pass.
    assert report.orphans == [f"0000:09:00.0 gi3 {theirs}"]
    assert harness.runtime.store.load().grants == []


def test_a_uuid_mismatch_of_a_live_claim_survives(harness: Harness) -> None:
    harness.admit("a")
    (mine,) = harness.node.instances()
    harness.node.destroy(mine.card_index, mine.gpu_instance_id)
    harness.admit("b")  # gets the reused id 3 at the same slot, with a fresh uuid
    (theirs,) = harness.node.instances()
    assert theirs.gpu_instance_id == mine.gpu_instance_id and theirs.uuid != mine.uuid
    harness.finish("a")
    report = harness.reclaimer.run_pass()
    assert report.stale == [mine.uuid]
    assert [i.uuid for i in harness.node.instances()] == [theirs.uuid]


def test_event_driven_reclaim_within_one_resync(harness: Harness) -> None:
    harness.admit("a")
    harness.runtime.start()
    try:
        passes = harness.reclaimer.passes
        harness.finish("a")
        deadline = time.monotonic() + 30
        # The pass counts itself after its orphan collection, a moment after the destroy:
        # wait for both, or the check races the end of the pass.
        while (
            harness.node.instances() or harness.reclaimer.passes == passes
        ) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert harness.node.instances() == []
        assert harness.reclaimer.passes > passes
    finally:
        harness.runtime.stop()


def _enumerations_per_pass(
    harness: Harness, monkeypatch: pytest.MonkeyPatch, seen: Callable[[Card], Card]
) -> list[tuple[int, PassReport, int]]:
    """Finish 1 pod, run a pass, then 3 pods and a pass, with the node's cards as `seen` turns
    them during the passes: (pods finished, the pass's report, card enumerations) per pass."""
    node = harness.reclaimer.node
    sweeps: list[int] = []
    real_cards = node.cards

    def counted_cards() -> list[Card]:
        sweeps.append(1)
        return [seen(card) for card in real_cards()]

    passes = []
    for names in (["a"], ["b", "c", "d"]):
        for name in names:
            harness.admit(name)
            harness.finish(name)
        with monkeypatch.context() as patch:
            patch.setattr(node, "cards", counted_cards)
            sweeps.clear()
            report = harness.reclaimer.run_pass()
        passes.append((len(names), report, len(sweeps)))
    return passes


def test_a_teardown_enumerates_the_cards_once_per_pass(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Enumerating the cards is a sweep of library calls; once per dropped grant made a
    # teardown of N grants cost N sweeps (bench/allocator_cost.py measured it).
    passes = _enumerations_per_pass(harness, monkeypatch, lambda card: card)
    for finished, report, _sweeps in passes:
        assert len(report.destroyed) == finished
    assert harness.node.instances() == []
    assert passes[0][2] == passes[1][2]


def test_a_pass_enumerates_the_cards_once_even_when_no_card_has_an_address(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    # With the registry naming no card (pci None) no grant can be placed: that is the answer
    # for every grant of the pass, not a reason to enumerate again for each. The grants are
    # kept (a card without an address proves no instance gone; docs/dev/runtime.md).
    passes = _enumerations_per_pass(
        harness, monkeypatch, lambda card: dataclasses.replace(card, pci=None)
    )
    for _finished, report, _sweeps in passes:
        assert report.stale == [] and report.destroyed == [] and report.undecided
    assert passes[0][2] == passes[1][2]
    assert len(harness.runtime.store.load().grants) == 4
