"""The node's logical slices through the real binding against the simulated ``libhydmi.so``:
a create found by what is new, the conf file checked against the library, busy slices never
destroyed, and every view that cannot be trusted refused (docs/dev/hardware.md)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from ansible_collections.hygon.dcu.plugins.module_utils import dmi
from ansible_collections.hygon.dcu.plugins.module_utils.dmi import DmiError
from ansible_collections.hygon.dcu.plugins.module_utils.vdevs import (
    VdevError,
    Vdevs,
    conf_path,
)
from simnode import SimNode

COLLECTIONS = Path(__file__).resolve().parents[4] / ".venv" / "collections"

if TYPE_CHECKING:
    from collections.abc import Callable

    HoldFactory = Callable[[Any], Any]
    SimBuild = Any


def _confs(sim_node: SimNode) -> list[str]:
    directory = sim_node.root / "etc/vdev"
    return sorted(os.listdir(directory)) if directory.is_dir() else []


def test_a_fresh_node_has_no_slices(sim_node: SimNode) -> None:
    reading = Vdevs(str(sim_node.root)).read()
    assert reading.vdevs == [] and reading.stray_confs == []


def test_each_create_is_found_with_its_conf_and_disjoint_compute_units(sim_node: SimNode) -> None:
    vdevs = Vdevs(str(sim_node.root))
    first = vdevs.create(0, 20, 16384)
    other_card = vdevs.create(1, 40, 24576)
    second = vdevs.create(0, 20, 8192)
    assert (first.card, first.compute_units, first.memory_mib) == (0, 20, 16384)
    assert (other_card.card, second.card) == (1, 0)
    assert len({first.id, other_card.id, second.id}) == 3
    for vdev in (first, other_card, second):
        assert vdev.conf is not None and vdev.conf_problem is None
        assert vdev.conf.vdev_id == vdev.id and vdev.conf.card == vdev.card
        assert vdev.conf.cu_mask.bit_count() == vdev.compute_units
    assert first.conf is not None and second.conf is not None
    assert first.conf.cu_mask & second.conf.cu_mask == 0
    assert [vdev.id for vdev in vdevs.read().vdevs] == sorted([first.id, other_card.id, second.id])


def test_a_card_takes_four_slices_and_no_more(sim_node: SimNode) -> None:
    vdevs = Vdevs(str(sim_node.root))
    for _slot in range(4):
        vdevs.create(0, 10, 1024)
    with pytest.raises(DmiError) as caught:
        vdevs.create(0, 10, 1024)
    assert caught.value.code == dmi.OUT_OF_RESOURCES
    assert len(vdevs.read().vdevs) == 4


def test_a_missing_or_contradicting_conf_is_named_not_given(sim_node: SimNode) -> None:
    vdevs = Vdevs(str(sim_node.root))
    gone = vdevs.create(0, 20, 16384)
    lying = vdevs.create(0, 20, 16384)
    (sim_node.root / gone.conf_path.lstrip("/")).unlink()
    text_path = sim_node.root / lying.conf_path.lstrip("/")
    text_path.write_text(text_path.read_text().replace("mem: 16384 MiB", "mem: 32768 MiB"))
    by_id = {vdev.id: vdev for vdev in vdevs.read().vdevs}
    assert by_id[gone.id].conf is None
    assert by_id[gone.id].conf_problem == f"{gone.conf_path} is missing"
    assert by_id[lying.id].conf is None
    assert "32768 MiB; the library says" in str(by_id[lying.id].conf_problem)


def test_a_conf_of_no_live_slice_is_stray(sim_node: SimNode) -> None:
    vdevs = Vdevs(str(sim_node.root))
    live = vdevs.create(0, 20, 16384)
    stray = sim_node.root / conf_path(7).lstrip("/")
    stray.write_text((sim_node.root / live.conf_path.lstrip("/")).read_text())
    reading = vdevs.read()
    assert [vdev.id for vdev in reading.vdevs] == [live.id]
    assert reading.stray_confs == [conf_path(7)]


def test_a_held_slice_is_busy_and_stays(sim_node: SimNode, kfd_holder: HoldFactory) -> None:
    vdevs = Vdevs(str(sim_node.root))
    held = vdevs.create(0, 20, 16384)
    holder = kfd_holder(sim_node.root / held.conf_path.lstrip("/"))
    with pytest.raises(dmi.VdevBusy):
        vdevs.destroy(held.id)
    assert [vdev.id for vdev in vdevs.read().vdevs] == [held.id]
    holder.release()
    vdevs.destroy(held.id)
    assert vdevs.read().vdevs == [] and _confs(sim_node) == []
    with pytest.raises(dmi.VdevGone):
        vdevs.destroy(held.id)


def test_no_slice_while_the_partition_mode_is_on(sim_node: SimNode, sim_build: SimBuild) -> None:
    subprocess.run([str(sim_build.hy_smi), "-mig", "1"], check=True, capture_output=True)
    with pytest.raises(DmiError) as caught:
        Vdevs(str(sim_node.root)).create(0, 20, 16384)
    assert caught.value.code == dmi.NOT_SUPPORTED
    assert _confs(sim_node) == []


_BLIND_READ = """
import sys
from ansible_collections.hygon.dcu.plugins.module_utils.dmi import DmiUnusable
from ansible_collections.hygon.dcu.plugins.module_utils.vdevs import Vdevs
vdevs = Vdevs(sys.argv[1])
try:
    vdevs.read()
except DmiUnusable as error:
    print(error.code, *vdevs.conf_paths())
"""


def test_without_the_library_nothing_is_read_but_the_confs_are_seen(sim_node: SimNode) -> None:
    made = Vdevs(str(sim_node.root)).create(0, 20, 16384)
    (sim_node.root / "opt/hyhal/lib/libhydmi.so").unlink()
    # A new process: this one has a libhydmi.so loaded, which dlopen would hand out again.
    seen = subprocess.run(
        [sys.executable, "-c", _BLIND_READ, str(sim_node.root)],
        env={**os.environ, "PYTHONPATH": str(COLLECTIONS), "LD_LIBRARY_PATH": ""},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert seen == [str(dmi.LIBRARY_NOT_FOUND), made.conf_path]


def test_a_count_its_ids_do_not_add_up_to_is_refused(
    sim_node: SimNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A fault: the simulated library's count and ids always agree, so the count is skewed here.
    vdevs = Vdevs(str(sim_node.root))
    vdevs.create(0, 20, 16384)
    monkeypatch.setattr(vdevs.library, "vdev_count", lambda: 2)
    with pytest.raises(VdevError, match=r"counts 2 vdevs but ids 0\.\.7 hold 1"):
        vdevs.read()


def test_a_create_that_cannot_be_told_apart_is_refused(
    sim_node: SimNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Another writer between the two reads (what per-node serialisation prevents): the create
    # of card 1 lands while ours runs, so two slices are new and neither is taken for ours.
    vdevs = Vdevs(str(sim_node.root))
    create = vdevs.library.create_vdev

    def two_writers(card: int, compute_units: int, memory_mib: int) -> None:
        create(1, 10, 1024)
        create(card, compute_units, memory_mib)

    monkeypatch.setattr(vdevs.library, "create_vdev", two_writers)
    with pytest.raises(VdevError, match="2 vdevs are new"):
        vdevs.create(0, 20, 16384)
    assert len(vdevs.read().vdevs) == 2  # nothing destroyed: neither is known to be ours
