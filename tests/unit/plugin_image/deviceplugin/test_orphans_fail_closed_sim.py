"""Orphan collection fails closed: a damaged registry never costs a live pod its partition.

Two pods hold partitions on one card and a third instance on that card is a true orphan.
Then one pod's conf file (or the whole ci/ directory) is damaged, and several reclaim passes
run with both pods alive: every partition (and the orphan: collection is stopped on the card)
must survive, and the reason must be logged once, naming the file. After the repair the orphan
is collected and the stop is logged as cleared.
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
import simnode
from ansible_collections.hygon.dcu.plugins.module_utils import registry as registry_module
from ansible_collections.hygon.dcu.plugins.module_utils.node import Node
from damage import FILE_DAMAGE, Damage, drop_lines_with
from plugin_harness import Harness

PASSES = 3
STOPPED = "orphan collection stopped"

DAMAGE: dict[str, Damage] = {**FILE_DAMAGE, "no-mig-uuid": drop_lines_with("mig_uuid")}


class Scene:
    def __init__(self, harness: Harness) -> None:
        self.harness = harness
        harness.admit("a")
        harness.admit("b")
        grants = {r.pod_name: r for r in harness.runtime.store.load()}
        self.grant = grants["a"]
        assert grants["b"].card_pci == self.grant.card_pci  # pack: same card
        self.card = self.grant.card_index
        self.conf = Path(harness.node.host_path(self.grant.conf_path))
        self.original = self.conf.read_bytes()
        card = harness.node.cards()[self.card]
        profile = card.profile("2g.15gb")
        assert profile is not None
        free = card.free_placements(profile)
        orphan = Node(str(harness.sim.root), str(simnode.LIB_PATH)).create(
            self.card, profile.id, free[-1].start
        )
        self.orphan_gi = orphan.gpu_instance_id
        self.partitions = self.gpu_instances()
        assert len(self.partitions) == 3

    def gpu_instances(self) -> set[tuple[int, int]]:
        return {(gi.card, gi.id) for gi in self.harness.sim.status().gpu_instances}

    def repair(self) -> None:
        if self.conf.is_dir() and not self.conf.is_symlink():
            self.conf.rmdir()
        elif self.conf.exists() or self.conf.is_symlink():
            self.conf.unlink()
        self.conf.write_bytes(self.original)

    def passes_keep_everything(self, caplog: pytest.LogCaptureFixture, where: str) -> None:
        caplog.clear()
        for _pass in range(PASSES):
            report = self.harness.reclaimer.run_pass()
            assert report.orphans == [] and report.destroyed == []
            assert self.gpu_instances() == self.partitions
        stops = [r for r in caplog.records if r.getMessage() == STOPPED]
        assert len(stops) == 1, [r.__dict__.get("why") for r in stops]
        assert where in str(stops[0].__dict__["why"])
        assert self.harness.runtime.metrics.sample(
            "hygon_dcu_orphan_collection_stopped", card=self.grant.card_pci
        )

    def repaired_collects_only_the_orphan(self, caplog: pytest.LogCaptureFixture) -> None:
        caplog.clear()
        report = self.harness.reclaimer.run_pass()
        assert len(report.orphans) == 1 and f"gi{self.orphan_gi} " in report.orphans[0]
        assert self.gpu_instances() == self.partitions - {(self.card, self.orphan_gi)}
        assert [r.getMessage() for r in caplog.records].count(STOPPED + ": cleared") == 1


@pytest.fixture
def scene(harness: Harness, caplog: pytest.LogCaptureFixture) -> Iterator[Scene]:
    caplog.set_level(logging.INFO, logger="hygon_dcu_plugin")
    yield Scene(harness)


@pytest.mark.parametrize("kind", sorted(DAMAGE))
def test_a_damaged_conf_file_stops_collection_on_its_card(
    scene: Scene, caplog: pytest.LogCaptureFixture, kind: str
) -> None:
    DAMAGE[kind](scene.conf)
    scene.passes_keep_everything(caplog, scene.grant.conf_path)
    scene.repair()
    scene.repaired_collects_only_the_orphan(caplog)


def test_ci_replaced_by_a_symlink_destroys_nothing(
    scene: Scene, caplog: pytest.LogCaptureFixture
) -> None:
    ci = scene.harness.sim.ci_dir
    real = ci.with_name("ci.moved")
    ci.rename(real)
    ci.symlink_to(real.name)
    scene.passes_keep_everything(caplog, "/etc/dmi_mig_config/ci")
    ci.unlink()
    real.rename(ci)
    scene.repaired_collects_only_the_orphan(caplog)


@pytest.mark.parametrize("failing_read", range(1, 7))
def test_a_one_off_read_error_destroys_no_live_partition(
    scene: Scene, monkeypatch: pytest.MonkeyPatch, failing_read: int
) -> None:
    # The n-th read of pod a's conf file fails once (EIO), whichever step of the pass does it.
    real_read = registry_module.read_file_at
    reads = [0]
    name = scene.conf.name

    def flaky(directory_fd: int, entry: str) -> bytes:
        if entry == name:
            reads[0] += 1
            if reads[0] == failing_read:
                raise OSError(errno.EIO, "Input/output error")
        return real_read(directory_fd, entry)

    monkeypatch.setattr(registry_module, "read_file_at", flaky)
    scene.harness.reclaimer.run_pass()
    assert reads[0] >= failing_read
    survivors = scene.gpu_instances()
    # The orphan may go (when the failing read was not the one deciding); a pod's never.
    assert survivors >= scene.partitions - {(scene.card, scene.orphan_gi)}


def test_a_swept_poison_directory_never_costs_the_claimed_instance(
    scene: Scene, caplog: pytest.LogCaptureFixture
) -> None:
    # Poison semantics kept: the directory is swept (rmdir), and the live instance whose file
    # it replaced is neither destroyed nor treated as nobody's.
    FILE_DAMAGE["directory"](scene.conf)
    report = scene.harness.reclaimer.run_pass()
    assert report.swept == [scene.grant.conf_path]
    assert not scene.conf.exists()
    assert scene.gpu_instances() == scene.partitions


def test_an_instance_at_a_claimed_gpu_instance_is_never_an_orphan(harness: Harness) -> None:
    # The grant's uuid differs from the live one (id reused) while the pod is alive.
    harness.admit("a")
    (grant,) = harness.runtime.store.load()
    harness.node.destroy(grant.card_index, grant.gpu_instance_id)
    profile = harness.node.cards()[grant.card_index].profile(grant.profile)
    assert profile is not None
    theirs = Node(str(harness.sim.root), str(simnode.LIB_PATH)).create(
        grant.card_index, profile.id, grant.placement_start
    )
    assert theirs.gpu_instance_id == grant.gpu_instance_id and theirs.uuid != grant.uuid
    for _pass in range(PASSES):
        assert harness.reclaimer.run_pass().orphans == []
    assert [i.uuid for i in harness.node.instances(grant.card_index)] == [theirs.uuid]
