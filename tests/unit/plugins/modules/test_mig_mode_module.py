"""mig_mode against a simulated node: check mode, the switch, and every refusal for real."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from ansible_collections.hygon.dcu.plugins.module_utils.node import Node
from ansible_collections.hygon.dcu.plugins.modules import mig_mode
from simnode import SimNode

if TYPE_CHECKING:
    from collections.abc import Callable

    ModuleRunner = Callable[..., dict[str, Any]]
    HoldFactory = Callable[[Any], Any]
    SimBuild = Any
    SimNodeFactory = Callable[..., SimNode]


def args(sim_node: SimNode, sim_build: SimBuild, state: str, **extra: Any) -> dict[str, Any]:
    return {
        "state": state,
        "host_root": str(sim_node.root),
        "hy_smi_path": str(sim_build.hy_smi),
        **extra,
    }


def current_mode(sim_node: SimNode) -> bool | None:
    return Node(str(sim_node.root)).mode().current


def test_enable_check_real_check_real(
    sim_node: SimNode, sim_build: SimBuild, run_module: ModuleRunner
) -> None:
    wanted = args(sim_node, sim_build, "enabled")
    predicted = run_module(mig_mode, wanted, check_mode=True, diff=True)
    assert predicted["changed"] is True and "failed" not in predicted
    assert predicted["diff"] == {"before": {"mode": "disabled"}, "after": {"mode": "enabled"}}
    assert current_mode(sim_node) is False  # check mode changed nothing

    done = run_module(mig_mode, wanted, diff=True)
    assert done["changed"] is True
    assert (done["previous_mode"], done["mode"]) == ("disabled", "enabled")
    assert done["vendor_output"] == "Enabled mig mode successful."
    assert "warnings" not in done
    assert current_mode(sim_node) is True

    assert run_module(mig_mode, wanted, check_mode=True)["changed"] is False
    again = run_module(mig_mode, wanted)
    assert again["changed"] is False and "vendor_output" not in again


def test_kfd_holder_blocks_before_hy_smi_is_called(
    sim_node: SimNode, sim_build: SimBuild, run_module: ModuleRunner, kfd_holder: HoldFactory
) -> None:
    holder = kfd_holder(sim_node.kfd)
    kfd_holder(sim_node.mkfd)  # the vendor daemon's device does not block
    # Were hy-smi called, this answer would switch the mode: it must stay off.
    sim_node.hysmi_output("Enabled mig mode successful.", exit_code=0, apply=True)
    for check_mode in (True, False):
        result = run_module(mig_mode, args(sim_node, sim_build, "enabled"), check_mode=check_mode)
        assert result["failed"] is True
        assert f"pid {holder.pid} (" in result["msg"]
        assert "import os, sys" in result["msg"]  # the holder's command line
        assert "park the device plugin" in result["msg"]
        assert "vendor_output" not in result
    assert current_mode(sim_node) is False
    holder.release()
    sim_node.clear_faults()
    assert run_module(mig_mode, args(sim_node, sim_build, "enabled"))["changed"] is True


def test_a_host_root_without_dev_kfd_refuses_before_hy_smi_is_called(
    sim_node: SimNode, sim_build: SimBuild, run_module: ModuleRunner, tmp_path: Path
) -> None:
    # A mistyped host_root: the library and hy-smi still reach the node, but the holder scan has
    # no /dev/kfd to compare with, so "nobody holds it" would be a guess.
    wrong_root = tmp_path / "not-the-node"
    wrong_root.mkdir()
    wanted = {
        **args(sim_node, sim_build, "enabled"),
        "host_root": str(wrong_root),
        "library_path": str(sim_build.library),
    }
    for check_mode in (True, False):
        result = run_module(mig_mode, wanted, check_mode=check_mode)
        assert result.get("failed") is True, result
        assert result["msg"].startswith(
            f"whether anything holds {wrong_root}/dev/kfd is unknown, so the switch was not "
            f"tried: {wrong_root}/dev/kfd does not exist"
        )
        assert "point host_root at the node's root directory" in result["msg"]
        assert result["changed"] is False
        assert "vendor_output" not in result
    assert current_mode(sim_node) is False


def test_disable_refused_while_instances_exist(
    sim_node: SimNode, sim_build: SimBuild, run_module: ModuleRunner
) -> None:
    node = Node(str(sim_node.root))
    sim_node.switch_mode()
    created = node.create(1, 1, 2)
    result = run_module(mig_mode, args(sim_node, sim_build, "disabled"))
    assert result["failed"] is True
    assert f"card 1 ({sim_node.pci(1)}) GPU instance 3 4g.31gb at placement 2:2" in result["msg"]
    assert str(created.uuid) in result["msg"]
    assert "hygon.dcu.mig_instances" in result["msg"]
    assert current_mode(sim_node) is True
    node.destroy(1, created.gpu_instance_id)
    done = run_module(mig_mode, args(sim_node, sim_build, "disabled"))
    assert done["changed"] is True and done["mode"] == "disabled"
    assert done["vendor_output"] == "Disabled mig mode successful."


def test_missing_hy_smi(
    sim_node: SimNode,
    sim_build: SimBuild,
    run_module: ModuleRunner,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    missing = str(sim_node.root / "no" / "hy-smi")
    result = run_module(mig_mode, args(sim_node, sim_build, "enabled", hy_smi_path=missing))
    assert result["failed"] is True and missing in result["msg"]
    assert "is not an executable file" in result["msg"]
    monkeypatch.setenv("PATH", str(sim_node.root / "empty-bin"))
    plain = {"state": "enabled", "host_root": str(sim_node.root)}
    result = run_module(mig_mode, plain)
    assert result["failed"] is True and "hy-smi was not found on PATH" in result["msg"]
    assert current_mode(sim_node) is False


def test_hy_smi_found_on_path(
    sim_node: SimNode, run_module: ModuleRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", f"{sim_node.root}/opt/hyhal/bin:/usr/bin:/bin")
    result = run_module(mig_mode, {"state": "enabled", "host_root": str(sim_node.root)})
    assert result["changed"] is True and result["mode"] == "enabled"


@pytest.mark.parametrize(
    ("text", "exit_code", "expected"),
    [
        (
            "Error: Set system level mig mode failed. The device is exist and may be in use.",
            1,
            "hygon.dcu.kfd_holders_info",
        ),
        ("Invlaid arguments", 1, "rejected its arguments"),
        ("Segmentation fault in hyperdrive", 139, "'Segmentation fault in hyperdrive'"),
    ],
)
def test_vendor_messages_are_mapped_or_shown_verbatim(
    sim_node: SimNode,
    sim_build: SimBuild,
    run_module: ModuleRunner,
    text: str,
    exit_code: int,
    expected: str,
) -> None:
    sim_node.hysmi_output(text, exit_code=exit_code)
    result = run_module(mig_mode, args(sim_node, sim_build, "enabled"))
    assert result["failed"] is True
    assert expected in result["msg"]
    assert result["vendor_output"] == text
    assert result["mode"] == "disabled"


def test_success_text_without_a_switch_fails_verification(
    sim_node: SimNode, sim_build: SimBuild, run_module: ModuleRunner
) -> None:
    sim_node.hysmi_output("Enabled mig mode successful.", exit_code=0, apply=False)
    result = run_module(mig_mode, args(sim_node, sim_build, "enabled"))
    assert result["failed"] is True
    assert "but the mode still reads disabled" in result["msg"]


def test_missing_library_reads_mode_from_registry(
    sim_node: SimNode, sim_build: SimBuild, run_module: ModuleRunner
) -> None:
    bogus = str(sim_node.root / "missing" / "libhydmi_mig.so.1")
    node = Node(str(sim_node.root))
    sim_node.switch_mode()
    node.create(0, 3, 0)
    result = run_module(mig_mode, args(sim_node, sim_build, "enabled", library_path=bogus))
    assert result["changed"] is False and result["mode_source"] == "registry"
    refused = run_module(mig_mode, args(sim_node, sim_build, "disabled", library_path=bogus))
    assert refused["failed"] is True
    # Without the library the blockers are named from the registry's conf files.
    assert "/etc/dmi_mig_config/ci/dev0gi3ci0.conf" in refused["msg"]


def test_enable_without_virtualization_warns(
    sim_node_factory: SimNodeFactory, sim_build: SimBuild, run_module: ModuleRunner
) -> None:
    plain = sim_node_factory(virtualization=False)
    result = run_module(mig_mode, args(plain, sim_build, "enabled"))
    assert result["changed"] is True
    assert "without virtualization support" in str(result["warnings"])
