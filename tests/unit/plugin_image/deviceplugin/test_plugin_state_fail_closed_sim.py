"""The plugin's own state fails closed: when its grants or its view of a card cannot be
trusted, no live pod loses its partition and no pod is deleted (docs/dev/runtime.md).

- The grants store missing, not a directory, a symlink, or (after a restart) new or emptied
  while partitions are live: orphan collection stops with one log line, Allocate refuses with
  one line; once no partition is live the plugin starts a store again by itself.
- A card the node layer calls unhealthy (its registry dev<N> files swapped): its grants are
  neither lost (no PartitionLost, no pod deleted) nor reclaimed as stale.
- A card whose registry dev<N> is garbled while a pod finishes: the grant is kept until the
  instance can be destroyed, and then the instance is destroyed and the grant removed.
"""

from __future__ import annotations

import glob
import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import simnode
from ansible_collections.hygon.dcu.plugins.module_utils.node import Node
from hygon_dcu_plugin.deviceplugin.refused import RequestRefused
from plugin_harness import Harness

PASSES = 3
STOPPED = "orphan collection stopped"
UNDECIDED = "grants left undecided"

Break = Callable[[Path], None]


def _remove(grants: Path) -> None:
    shutil.rmtree(grants)


def _regular_file(grants: Path) -> None:
    shutil.rmtree(grants)
    grants.write_text("")


def _symlink_to_empty(grants: Path) -> None:
    shutil.rmtree(grants)
    empty = grants.with_name("grants.elsewhere")
    empty.mkdir(mode=0o700)
    grants.symlink_to(empty.name)


BROKEN_STORE: dict[str, Break] = {
    "missing": _remove,
    "regular-file": _regular_file,
    "symlink-to-empty-dir": _symlink_to_empty,
}


def gpu_instances(harness: Harness) -> set[tuple[int, int]]:
    return {(gi.card, gi.id) for gi in harness.sim.status().gpu_instances}


def two_running_pods(harness: Harness) -> set[tuple[int, int]]:
    for name in ("a", "b"):
        harness.admit(name)
        harness.kube.set_phase("default", name, "Running")
    live = gpu_instances(harness)
    assert len(live) == 2
    return live


def messages(caplog: pytest.LogCaptureFixture, text: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.getMessage() == text]


def passes_destroy_nothing(
    harness: Harness, live: set[tuple[int, int]], caplog: pytest.LogCaptureFixture, path: str
) -> None:
    """Several passes with both pods running: nothing destroyed, the stop logged once."""
    caplog.clear()
    for _pass in range(PASSES):
        report = harness.reclaimer.run_pass()
        assert report.orphans == [] and report.destroyed == [] and report.lost == []
        assert gpu_instances(harness) == live
    stops = messages(caplog, STOPPED)
    assert len(stops) == 1, [r.__dict__.get("why") for r in stops]
    assert path in str(stops[0].__dict__["why"])


def allocate_refused(harness: Harness, name: str, path: str) -> None:
    with pytest.raises(RequestRefused) as refused:
        harness.admit(name)
    assert refused.value.reason == "grants_store"
    text = str(refused.value)
    assert path in text and "\n" not in text


def restart(before: Harness, **settings: object) -> Harness:
    """A new plugin process on the same node: the same API server and kubelet."""
    after = Harness(before.sim, before.state, kube=before.kube, **settings)
    after.kubelet = before.kubelet
    after.runtime.lister = after.runtime.allocator.lister = before.kubelet
    return after


def destroy_by_hand(harness: Harness) -> None:
    """What the operator does once the pods are gone: destroy what is left with the vendor
    tool (here the node layer directly, as hy-smi would)."""
    hand = Node(str(harness.sim.root), str(simnode.LIB_PATH))
    for instance in hand.instances():
        hand.destroy(instance.card_index, instance.gpu_instance_id)


@pytest.fixture(autouse=True)
def plugin_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="hygon_dcu_plugin")


@pytest.mark.parametrize("kind", sorted(BROKEN_STORE))
def test_a_broken_grants_store_destroys_nothing_and_allocate_refuses(
    harness: Harness, caplog: pytest.LogCaptureFixture, kind: str
) -> None:
    live = two_running_pods(harness)
    grants = Path(harness.settings.grants_dir)
    BROKEN_STORE[kind](grants)
    passes_destroy_nothing(harness, live, caplog, str(grants))
    allocate_refused(harness, "c", str(grants))
    assert gpu_instances(harness) == live


@pytest.mark.parametrize("how", ["state-dir-cleaned", "grants-emptied", "grants-dir-changed"])
def test_a_restart_without_the_grants_destroys_nothing_until_the_operator_acts(
    harness: Harness, caplog: pytest.LogCaptureFixture, how: str
) -> None:
    live = two_running_pods(harness)
    grants = Path(harness.settings.grants_dir)
    settings: dict[str, object] = {}
    if how == "state-dir-cleaned":
        shutil.rmtree(grants)
    elif how == "grants-emptied":
        for entry in glob.glob(str(grants / "*")):  # `rm grants/*`: dot files stay
            os.unlink(entry)
    else:
        grants = grants.with_name("grants-new")
        settings["grants_dir"] = str(grants)
    after = restart(harness, **settings)
    passes_destroy_nothing(after, live, caplog, str(grants))
    allocate_refused(after, "c", str(grants))
    # The operator's way out: the pods go, their instances are destroyed by hand; with no
    # partition live the plugin starts the store itself and serves again.
    for name in ("a", "b"):
        after.finish(name)
    destroy_by_hand(after)
    caplog.clear()
    report = after.reclaimer.run_pass()
    assert report.orphan_collection_skipped is None
    assert len(messages(caplog, STOPPED + ": cleared")) == 1
    after.admit("c")
    assert [r.pod_name for r in after.runtime.store.load()] == ["c"]


def test_a_store_without_its_mark_is_accepted_only_when_its_grants_name_every_live_partition(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    # An unmarked store (an upgrade from a plugin that wrote none, or one put back by hand)
    # is trusted only when every live instance is named, by uuid, by one of its grants.
    live = two_running_pods(harness)
    grants = Path(harness.settings.grants_dir)
    missing = next(r for r in harness.runtime.store.load() if r.pod_name == "b")
    aside = grants.with_name("b.json")
    (grants / missing.file_name).rename(aside)
    for entry in grants.iterdir():
        if not entry.name.endswith(".json"):
            entry.unlink()  # the mark, whatever it is called
    after = restart(harness)
    passes_destroy_nothing(after, live, caplog, str(grants))
    aside.rename(grants / missing.file_name)
    report = after.reclaimer.run_pass()
    assert report.orphan_collection_skipped is None and report.orphans == []
    after.admit("c")
    assert gpu_instances(after) > live


def test_swapped_registry_dev_files_neither_lose_nor_reclaim_the_cards_grants(
    bw_node: simnode.SimNode, short_tmp: Path, caplog: pytest.LogCaptureFixture
) -> None:
    harness = Harness(bw_node, short_tmp, delete_pods_with_lost_partitions=True)
    live = two_running_pods(harness)
    harness.admit("done")
    harness.finish("done", how="Succeeded")
    grants = {r.pod_name: r for r in harness.runtime.store.load()}
    assert {r.card_index for r in grants.values()} == {0}  # pack: all on card 0
    dev0, dev1 = bw_node.registry_dir / "dev0", bw_node.registry_dir / "dev1"
    text0, text1 = dev0.read_text(), dev1.read_text()
    dev0.write_text(text1)
    dev1.write_text(text0)
    cards = harness.node.cards()
    assert not cards[0].healthy and not cards[1].healthy
    everything = gpu_instances(harness)
    caplog.clear()
    for _pass in range(PASSES):
        report = harness.reclaimer.run_pass()
        assert report.lost == [] and report.stale == [] and report.destroyed == []
        assert gpu_instances(harness) == everything
    assert harness.kube.deleted_by_plugin == []
    assert harness.runtime.events.drain()
    assert "PartitionLost" not in harness.kube.reasons("a") + harness.kube.reasons("b")
    assert {r.pod_name for r in harness.runtime.store.load()} == set(grants)
    (undecided,) = messages(caplog, UNDECIDED)
    assert grants["a"].card_pci in str(undecided.__dict__["why"])
    # Restored: the finished pod's partition is reclaimed, the running pods keep theirs.
    dev0.write_text(text0)
    dev1.write_text(text1)
    report = harness.reclaimer.run_pass()
    assert report.destroyed == [grants["done"].uuid] and report.lost == []
    assert gpu_instances(harness) == live
    assert harness.kube.deleted_by_plugin == []


def test_a_garbled_dev_file_keeps_a_finished_pods_grant_until_its_instance_is_destroyed(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    live = two_running_pods(harness)
    harness.admit("done")
    done = next(r for r in harness.runtime.store.load() if r.pod_name == "done")
    assert done.card_index == 0
    dev0 = harness.sim.registry_dir / "dev0"
    original = dev0.read_bytes()
    dev0.write_text("garbage\n")
    harness.finish("done")
    caplog.clear()
    for _pass in range(PASSES):
        report = harness.reclaimer.run_pass()
        assert report.stale == [] and report.destroyed == [] and report.orphans == []
    assert done in harness.runtime.store.load().grants
    assert len(gpu_instances(harness)) == 3
    assert len(messages(caplog, UNDECIDED)) == 1
    dev0.write_bytes(original)
    report = harness.reclaimer.run_pass()
    assert report.destroyed == [done.uuid] and report.orphans == [] and report.stale == []
    assert done not in harness.runtime.store.load().grants
    assert gpu_instances(harness) == live


def test_a_finished_pods_grant_is_kept_while_its_instances_uuid_cannot_be_read(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    # The conf file lost its mig_uuid line: the uuid guard refuses the destroy, and that is
    # no proof the instance is gone. The grant stays until the file reads cleanly again.
    live = two_running_pods(harness)
    harness.admit("done")
    done = next(r for r in harness.runtime.store.load() if r.pod_name == "done")
    conf = Path(harness.node.host_path(done.conf_path))
    original = conf.read_text()
    conf.write_text("".join(ln for ln in original.splitlines(True) if "mig_uuid" not in ln))
    harness.finish("done")
    caplog.clear()
    for _pass in range(PASSES):
        report = harness.reclaimer.run_pass()
        assert report.stale == [] and report.destroyed == [] and report.orphans == []
    assert done in harness.runtime.store.load().grants
    (undecided,) = messages(caplog, UNDECIDED)
    assert done.conf_path in str(undecided.__dict__["why"])
    conf.write_text(original)
    report = harness.reclaimer.run_pass()
    assert report.destroyed == [done.uuid] and report.orphans == []
    assert gpu_instances(harness) == live
