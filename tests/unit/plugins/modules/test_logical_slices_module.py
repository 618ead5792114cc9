"""logical_slices, mig_mode and mig_info against a simulated node whose slices the vendor tool
made: check mode predicts, a second run changes nothing, a busy slice is never forced, and the
switch to partition mode is refused while any slice lives."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ansible_collections.hygon.dcu.plugins.modules import logical_slices, mig_info, mig_mode
from simnode import SimNode

if TYPE_CHECKING:
    from collections.abc import Callable

    ModuleRunner = Callable[..., dict[str, Any]]
    HoldFactory = Callable[[Any], Any]
    SimBuild = Any


def carve(sim_node: SimNode, card: int, cus: str, mib: str) -> None:
    made = sim_node.create_vdevs(card, cus, mib)
    assert made.returncode == 0, made.stderr


def enable(sim_node: SimNode, sim_build: SimBuild) -> dict[str, Any]:
    root, tool = str(sim_node.root), str(sim_build.hy_smi)
    return {"state": "enabled", "host_root": root, "hy_smi_path": tool}


def live(sim_node: SimNode, run_module: ModuleRunner) -> list[dict[str, Any]]:
    info = run_module(mig_info, {"host_root": str(sim_node.root)})["mig_info"]
    slices: list[dict[str, Any]] = info["logical_slices"]["vdevs"]
    return slices


def test_check_then_real_then_nothing_left(
    sim_node: SimNode, sim_build: SimBuild, run_module: ModuleRunner
) -> None:
    carve(sim_node, 0, "20,20", "16384,8192")
    carve(sim_node, 1, "40", "32768")
    before = live(sim_node, run_module)
    assert [(s["card"], s["compute_units"], s["memory_mib"]) for s in before] == [
        (0, 20, 16384),
        (0, 20, 8192),
        (1, 40, 32768),
    ]
    wanted = {"host_root": str(sim_node.root)}
    predicted = run_module(logical_slices, wanted, check_mode=True, diff=True)
    assert predicted["changed"] is True and predicted["destroyed"] == before
    assert live(sim_node, run_module) == before  # check mode changed nothing
    real = run_module(logical_slices, wanted, diff=True)
    assert real["changed"] is True and real["destroyed"] == predicted["destroyed"]
    assert real["diff"]["after"] == ""
    assert live(sim_node, run_module) == []
    again = run_module(logical_slices, wanted)
    assert again["changed"] is False and again["destroyed"] == []


def test_cards_limits_what_is_destroyed(
    sim_node: SimNode, sim_build: SimBuild, run_module: ModuleRunner
) -> None:
    carve(sim_node, 0, "20", "16384")
    carve(sim_node, 1, "40", "32768")
    result = run_module(logical_slices, {"host_root": str(sim_node.root), "cards": ["1"]})
    assert [s["card"] for s in result["destroyed"]] == [1]
    assert [s["card"] for s in live(sim_node, run_module)] == [0]
    refused = run_module(logical_slices, {"host_root": str(sim_node.root), "cards": ["one"]})
    assert refused["failed"] is True and "card 'one' is not a card index" in refused["msg"]


def test_a_busy_slice_is_left_and_named_with_its_holder(
    sim_node: SimNode, sim_build: SimBuild, run_module: ModuleRunner, kfd_holder: HoldFactory
) -> None:
    carve(sim_node, 0, "20,20", "16384,16384")
    held, free = live(sim_node, run_module)
    holder = kfd_holder(sim_node.root / held["conf_path"].lstrip("/"))
    result = run_module(logical_slices, {"host_root": str(sim_node.root)})
    assert result["failed"] is True and result["changed"] is True
    assert [s["id"] for s in result["destroyed"]] == [free["id"]]
    (remaining,) = result["remaining"]
    assert remaining["id"] == held["id"] and "DEVICE_BUSY" in remaining["reason"]
    assert any(f"pid {holder.pid}" in line for line in remaining["holders"])
    assert f"vdev {held['id']} on card 0" in result["msg"]
    assert [s["id"] for s in live(sim_node, run_module)] == [held["id"]]


def test_the_switch_to_partition_mode_names_the_slices_in_its_way(
    sim_node: SimNode, sim_build: SimBuild, run_module: ModuleRunner
) -> None:
    carve(sim_node, 1, "40", "32768")
    wanted = enable(sim_node, sim_build)
    for check_mode in (True, False):
        refused = run_module(mig_mode, wanted, check_mode=check_mode)
        assert refused["failed"] is True and refused["changed"] is False
        assert "cannot enable: 1 logical slice(s) still exist: vdev 0 on card 1" in refused["msg"]
        assert "hygon.dcu.logical_slices" in refused["msg"]
    run_module(logical_slices, {"host_root": str(sim_node.root)})
    switched = run_module(mig_mode, wanted)
    assert switched["changed"] is True and switched["mode"] == "enabled"


# Without the library: each module runs in a new process, where no libhydmi.so is loaded.
def test_the_switch_is_refused_when_slices_cannot_be_listed_but_confs_exist(
    sim_node: SimNode, sim_build: SimBuild, run_module_fresh: ModuleRunner
) -> None:
    carve(sim_node, 0, "20", "16384")
    (sim_node.root / "opt/hyhal/lib/libhydmi.so").unlink()
    wanted = enable(sim_node, sim_build)
    refused = run_module_fresh(mig_mode, wanted)
    assert refused["failed"] is True
    assert "cannot enable: the vendor library cannot list logical slices" in refused["msg"]
    assert "/etc/vdev/vdev0.conf say some may live" in refused["msg"]
    info = run_module_fresh(mig_info, {"host_root": str(sim_node.root)})
    slices = info["mig_info"]["logical_slices"]
    assert slices["library"]["usable"] is False
    assert "LIBRARY_NOT_FOUND" in slices["library"]["error"]
    assert slices["conf_paths"] == ["/etc/vdev/vdev0.conf"] and slices["vdevs"] == []


def test_a_node_without_the_library_or_confs_switches(
    sim_node: SimNode, sim_build: SimBuild, run_module_fresh: ModuleRunner
) -> None:
    (sim_node.root / "opt/hyhal/lib/libhydmi.so").unlink()
    wanted = enable(sim_node, sim_build)
    switched = run_module_fresh(mig_mode, wanted)
    assert switched["changed"] is True and switched["mode"] == "enabled"


def test_slices_that_cannot_be_listed_are_reported_not_a_crash(
    sim_node: SimNode, sim_build: SimBuild, run_module: ModuleRunner
) -> None:
    carve(sim_node, 0, "20", "16384")
    info = run_module(mig_info, {"host_root": str(sim_node.root)})["mig_info"]["logical_slices"]
    assert info["conf_paths"] == ["/etc/vdev/vdev0.conf"] and info["stray_confs"] == []
    # The conf directory replaced by something that is not one: mig_info still answers.
    vdev_dir = sim_node.root / "etc/vdev"
    for conf in vdev_dir.iterdir():
        conf.unlink()
    vdev_dir.rmdir()
    vdev_dir.write_text("not a directory\n")
    info = run_module(mig_info, {"host_root": str(sim_node.root)})["mig_info"]["logical_slices"]
    assert info["library"]["usable"] is False and info["vdevs"] == []
    assert info["library"]["error"].count("cannot read /etc/vdev") == 2
    refused = run_module(mig_mode, enable(sim_node, sim_build))
    assert refused["failed"] is True and "cannot read /etc/vdev" in refused["msg"]
