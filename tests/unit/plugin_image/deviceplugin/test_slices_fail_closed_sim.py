"""Slices fail closed: a damaged grant, conf or mark, a reused vdev id or a busy vdev never
costs a live pod its slice, and what is left is named (docs/dev/logical-slices.md, "Reclaim").

Two pods hold slices on card 0 and a third vdev there is a true orphan (made by hand).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from ansible_collections.hygon.dcu.plugins.module_utils.vdevs import Vdev
from damage import FILE_DAMAGE
from hygon_dcu_plugin.deviceplugin.refused import RequestRefused
from hygon_dcu_plugin.deviceplugin.slice_grants import SliceGrant
from hygon_dcu_plugin.deviceplugin.slice_marks import MARK_DIR
from plugin_harness import Harness

PASSES = 3
GIB = 1024


class Scene:
    def __init__(self, harness: Harness) -> None:
        self.harness = harness
        harness.admit_slice("a", 8 * GIB)
        harness.admit_slice("b", 8 * GIB)
        made = harness.sim.create_vdevs(0, "4", "1024")
        assert made.returncode == 0, made.stderr
        self.grants = {g.pod_name: g for g in harness.runtime.store.load().slices}
        self.orphan = 2
        assert self.live() == {0, 1, 2}

    def live(self) -> set[int]:
        return {v.id for v in self.harness.sim.status().vdevs}

    def grant_file(self, pod: str) -> Path:
        return Path(str(self.harness.settings.grants_dir), self.grants[pod].file_name)

    def conf(self, vdev_id: int) -> Path:
        return Path(str(self.harness.sim.root), f"etc/vdev/vdev{vdev_id}.conf")


@pytest.fixture
def scene(slice_harness: Harness) -> Scene:
    return Scene(slice_harness)


def test_an_orphan_is_collected_and_the_claimed_slices_kept(scene: Scene) -> None:
    report = scene.harness.runtime.reclaim_slices()
    assert report.orphans == ["vdev 2 on card 0"]
    assert scene.live() == {0, 1}


@pytest.mark.parametrize("kind", sorted(FILE_DAMAGE))
def test_a_damaged_grant_stops_collection_and_destroys_nothing(scene: Scene, kind: str) -> None:
    path = scene.grant_file("a")
    original = path.read_bytes()
    FILE_DAMAGE[kind](path)
    for _pass in range(PASSES):
        report = scene.harness.runtime.reclaim_slices()
        assert report.orphans == [] and report.destroyed == []
        assert report.orphan_collection_skipped is not None
        assert str(path) in report.orphan_collection_skipped
        assert scene.live() == {0, 1, 2}
    # No new slice is placed over what the unreadable grant may hold: the driver's view
    # decides placement, and the count still includes vdev 0.
    scene.harness.admit_slice("c", 8 * GIB)
    assert len(scene.live()) == 4
    if path.is_dir() and not path.is_symlink():
        path.rmdir()
    else:
        path.unlink()
    path.write_bytes(original)
    report = scene.harness.runtime.reclaim_slices()
    assert report.orphans == ["vdev 2 on card 0"]
    assert scene.live() == {0, 1, 3}


@pytest.mark.parametrize("kind", sorted(FILE_DAMAGE))
def test_a_damaged_conf_keeps_a_finished_pods_slice_until_it_reads(scene: Scene, kind: str) -> None:
    conf = scene.conf(0)
    original = conf.read_bytes()
    FILE_DAMAGE[kind](conf)
    scene.harness.finish("a", how="Succeeded")
    for _pass in range(PASSES):
        report = scene.harness.runtime.reclaim_slices()
        assert report.destroyed == []
        assert scene.grants["a"].label in report.undecided
        assert 0 in scene.live() and 1 in scene.live()
    if conf.is_dir() and not conf.is_symlink():
        conf.rmdir()
    else:
        conf.unlink()
    conf.write_bytes(original)
    report = scene.harness.runtime.reclaim_slices()
    assert report.destroyed == [scene.grants["a"].label]
    assert 0 not in scene.live() and 1 in scene.live()


def test_a_reused_vdev_id_is_never_destroyed_for_the_old_grant(scene: Scene) -> None:
    # vdev 0 is destroyed by hand and the id taken by a vdev of another size: not a's.
    scene.harness.runtime.vdevs.destroy(0)
    assert scene.harness.sim.create_vdevs(0, "2", "2048").returncode == 0
    assert 0 in scene.live()
    scene.harness.finish("a", how="Succeeded")
    report = scene.harness.runtime.reclaim_slices()
    assert report.destroyed == []
    assert report.stale == [scene.grants["a"].label]
    # The grant is gone, so the stranger at id 0 is an orphan like vdev 2.
    assert sorted(report.orphans) == ["vdev 0 on card 0", "vdev 2 on card 0"]
    assert scene.live() == {1}


def test_a_running_pods_lost_slice_is_said_once(scene: Scene) -> None:
    scene.harness.runtime.vdevs.destroy(0)
    first = scene.harness.runtime.reclaim_slices()
    second = scene.harness.runtime.reclaim_slices()
    assert first.lost == [scene.grants["a"].label] and second.lost == []
    lost = [e for e in scene.harness.kube.kube_events if e[2] == "SliceLost"]
    assert len(lost) == 1 and lost[0][0].name == "a"


def test_a_slice_missing_from_a_read_outside_the_lock_is_confirmed_before_it_is_said_lost(
    scene: Scene, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pass reads the node's slices once, outside the node lock; an Allocate's rollback
    can be between its destroy and its grant's removal then. A fake first read stands for
    that timing (the real library cannot be paused there): nothing is said lost unless the
    read under the lock confirms it."""
    reclaimer = scene.harness.runtime.slice_reclaimer
    real_read = reclaimer._read
    reads: list[int] = []

    def first_read_misses_vdev_0() -> list[Vdev]:
        reads.append(1)
        found = real_read()
        return [v for v in found if v.id != 0] if len(reads) == 1 else found

    monkeypatch.setattr(reclaimer, "_read", first_read_misses_vdev_0)
    report = scene.harness.runtime.reclaim_slices()
    assert report.lost == []
    assert not [e for e in scene.harness.kube.kube_events if e[2] == "SliceLost"]
    assert len(reads) >= 2  # confirmed under the lock


def test_a_busy_slice_is_kept_and_retried(
    scene: Scene, kfd_holder: Callable[[str | os.PathLike[str]], object]
) -> None:
    holder = kfd_holder(scene.conf(0))
    scene.harness.finish("a", how="Succeeded")
    report = scene.harness.runtime.reclaim_slices()
    assert report.in_use == [scene.grants["a"].label]
    assert 0 in scene.live()
    stuck = [e for e in scene.harness.kube.kube_events if e[2] == "SliceReclaimStuck"]
    assert len(stuck) == 1 and "vdev0.conf" in stuck[0][3]
    holder.release()  # type: ignore[attr-defined]
    report = scene.harness.runtime.reclaim_slices()
    assert report.destroyed == [scene.grants["a"].label]


def test_a_mark_that_cannot_be_removed_keeps_the_grant(scene: Scene) -> None:
    grant: SliceGrant = scene.grants["a"]
    mark = scene.harness.sim.root / MARK_DIR.lstrip("/") / grant.mark_name
    mark.unlink()
    mark.mkdir()
    (mark / "x").write_text("")
    scene.harness.finish("a", how="Succeeded")
    report = scene.harness.runtime.reclaim_slices()
    assert report.destroyed == [grant.label]
    assert any(grant.mark_name in e for e in report.errors)
    assert grant in scene.harness.runtime.store.load().slices
    (mark / "x").unlink()
    mark.rmdir()
    report = scene.harness.runtime.reclaim_slices()
    assert report.stale == [grant.label]
    assert grant not in scene.harness.runtime.store.load().slices


def test_no_slice_is_created_while_the_grants_store_is_missing(scene: Scene) -> None:
    store = Path(scene.harness.settings.grants_dir)
    store.rename(store.with_name("aside"))
    with pytest.raises(RequestRefused) as refused:
        scene.harness.admit_slice("c", 8 * GIB)
    assert refused.value.reason == "grants_store"
    report = scene.harness.runtime.reclaim_slices()
    assert report.orphans == []
    assert scene.live() == {0, 1, 2}


def test_a_world_writable_mark_directory_refuses_the_slice(scene: Scene) -> None:
    directory = scene.harness.sim.root / MARK_DIR.lstrip("/")
    directory.chmod(0o777)
    with pytest.raises(RequestRefused) as refused:
        scene.harness.admit_slice("c", 8 * GIB)
    assert "world-writable" in str(refused.value)
    assert scene.live() == {0, 1, 2}  # the vdev made for c was destroyed again
