"""simnode: the node layout a fresh driver install leaves, reboot, status and fault commands."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest
import simnode


def run_simnode(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(simnode.SIMNODE_PATH), *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        env=env,
    )


def hy_smi(node: simnode.SimNode, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(simnode.HY_SMI_PATH), *args],
        capture_output=True,
        text=True,
        env=node.env(),
        check=False,
        timeout=60,
    )


def test_init_lays_out_a_fresh_node(sim_build: object, tmp_path: Path) -> None:
    root = tmp_path / "n"
    result = run_simnode("init", str(root), "--cards", "3")
    assert result.returncode == 0, result.stderr
    node = simnode.open_node(root)
    assert (node.model.name, node.cards, node.virtualization) == ("c3000-bw", 3, True)
    paths = (
        [node.kfd, node.mkfd]
        + [node.card_node(i) for i in range(3)]
        + [node.render_node(i) for i in range(3)]
    )
    for path in paths:
        mode = path.lstat().st_mode
        if os.geteuid() == 0:
            assert stat.S_ISCHR(mode), path
            assert os.major(path.lstat().st_rdev) == 1 and os.minor(path.lstat().st_rdev) == 3
        else:
            assert stat.S_ISREG(mode), path
    assert node.render_node(2).name == "renderD130"
    drm = root / "sys" / "bus" / "pci" / "devices" / "0000:49:00.0" / "drm"
    assert sorted(p.name for p in drm.iterdir()) == ["card2", "renderD130"]
    assert (drm / "renderD130" / "dev").read_text() == "226:130\n"
    assert (root / "sys" / "class" / "drm" / "renderD130" / "dev").read_text() == "226:130\n"
    assert (drm.parent / "vendor").read_text() == "0x1d94\n"
    dmi = root / "opt" / "hyhal" / "lib" / "libhydmi.so"
    assert dmi.is_symlink() and dmi.resolve() == simnode.DMI_LIB_PATH.resolve()
    assert dmi.is_file()  # the build exists: the link resolves on the host
    assert (root / "opt" / "dtk").is_dir()
    assert not node.registry_dir.exists()
    status = node.status()
    assert (status.mode, status.gpu_instances, status.compute_instances) == (0, [], [])


def test_init_refuses_bad_requests(sim_build: object, tmp_path: Path) -> None:
    assert run_simnode("init", str(tmp_path / "a")).returncode == 0
    again = run_simnode("init", str(tmp_path / "a"))
    assert again.returncode == 2 and "already holds a simulated node" in again.stderr
    many = run_simnode("init", str(tmp_path / "b"), "--cards", "9")
    assert many.returncode == 2 and "--cards must be 1..8" in many.stderr
    unknown = run_simnode("init", str(tmp_path / "c"), "--model", "c9999")
    assert unknown.returncode != 0
    missing = run_simnode("status", str(tmp_path / "nothing"))
    assert missing.returncode == 2 and "not a simulated node" in missing.stderr


def test_hypothetical_model_is_labelled(sim_build: object, tmp_path: Path) -> None:
    root = tmp_path / "h"
    assert run_simnode("init", str(root), "--model", "hypo-x8", "--cards", "1").returncode == 0
    out = run_simnode("status", str(root)).stdout
    assert "model: hypo-x8 (HYPOTHETICAL)" in out
    assert "HYPOTHETICAL" in (root / ".sim" / "node.conf").read_text()
    assert not simnode.MODELS["c3000-bw"].hypothetical


def test_reboot_command_keeps_mode_and_drops_instances(sim_node: simnode.SimNode) -> None:
    assert hy_smi(sim_node, "-mig", "1").returncode == 0
    assert hy_smi(sim_node, "mig", "-cgi", "2g.15gb", "-C", "-i", "0").returncode == 0
    assert run_simnode("reboot", str(sim_node.root)).returncode == 0
    status = sim_node.status()
    assert (status.mode, status.gpu_instances, status.compute_instances) == (1, [], [])
    # Mode on: the registry is back with every card's dev<N> and no instance entries.
    cards = sorted(p.name for p in sim_node.registry_dir.iterdir() if p.name.startswith("dev"))
    assert cards == [f"dev{i}" for i in range(sim_node.cards)]
    assert (sim_node.registry_dir / "dev1").read_text() == sim_node.pci(1) + "\n"
    assert list(sim_node.ci_dir.iterdir()) == [] and list(sim_node.gi_dir.iterdir()) == []
    out = run_simnode("status", str(sim_node.root)).stdout
    assert "mode: enabled" in out and "gpu_instance" not in out


def test_reboot_with_the_mode_off_leaves_no_registry(sim_node: simnode.SimNode) -> None:
    assert run_simnode("reboot", str(sim_node.root)).returncode == 0
    assert sim_node.status().mode == 0
    assert not sim_node.registry_dir.exists()


def test_status_lists_instances(sim_node: simnode.SimNode) -> None:
    assert hy_smi(sim_node, "-mig", "1").returncode == 0
    assert hy_smi(sim_node, "mig", "-cgi", "4g.31gb", "-C", "-i", "1").returncode == 0
    lines = run_simnode("status", str(sim_node.root)).stdout.splitlines()
    assert "gpu_instance card=1 id=3 profile=1 placement=0:2" in lines
    assert any(line.startswith("compute_instance card=1 gi=3 id=0 ") for line in lines)


def test_fault_commands(sim_node: simnode.SimNode) -> None:
    root = str(sim_node.root)
    assert hy_smi(sim_node, "-mig", "1").returncode == 0
    assert run_simnode("fault", root, "fail", "ci_create", "1", "--code", "23").returncode == 0
    failed = hy_smi(sim_node, "mig", "-cgi", "2g.15gb", "-C", "-i", "0")
    assert failed.returncode != 0 and "Insufficient Resources" in failed.stdout
    assert hy_smi(sim_node, "mig", "-dgi", "-i", "0").returncode == 0
    assert hy_smi(sim_node, "mig", "-cgi", "2g.15gb", "-C", "-i", "0").returncode == 0
    assert run_simnode("fault", root, "unreachable", "1").returncode == 0
    assert "DCU 1: unavailable" in hy_smi(sim_node).stdout
    assert run_simnode("fault", root, "hysmi-output", "weird", "--exit", "3").returncode == 0
    assert hy_smi(sim_node, "-mig", "0").returncode == 3
    assert "fault: unreachable 1 999" in run_simnode("status", root).stdout
    assert run_simnode("fault", root, "clear").returncode == 0
    assert "DCU 1: cu_count=80" in hy_smi(sim_node).stdout
    bad = run_simnode("fault", root, "unreachable", "5")
    assert bad.returncode == 2 and "card 5 does not exist" in bad.stderr


def test_fail_next_rejects_unknown_ops(sim_node: simnode.SimNode) -> None:
    with pytest.raises(simnode.SimNodeError, match="unknown fault op"):
        sim_node.fail_next("explode")


def test_kfd_holder_fixture_really_holds(sim_node: simnode.SimNode, kfd_holder: object) -> None:
    holder = kfd_holder(sim_node.kfd)  # type: ignore[operator]
    links = {
        os.readlink(f"/proc/{holder.pid}/fd/{fd}") for fd in os.listdir(f"/proc/{holder.pid}/fd")
    }
    assert str(sim_node.kfd) in links
    holder.release()
    assert not Path(f"/proc/{holder.pid}").exists() or holder.process.poll() is not None


def test_build_is_strict_about_warnings(sim_build: object) -> None:
    dry = subprocess.run(
        ["make", "-B", "-n", "-C", str(simnode.HERE)], capture_output=True, text=True, check=True
    ).stdout.replace("\\\n", " ")
    compiles = [line for line in dry.splitlines() if "-o build/" in line]
    assert len(compiles) == 4  # libhydmi_mig.so.1, libhydmi.so, hy-smi, dcu-probe
    for line in compiles:
        assert " -Wall " in line and " -Wextra " in line and " -Werror " in line


def test_hold_command_is_a_real_holder(sim_node: simnode.SimNode) -> None:
    holder = subprocess.Popen(
        [str(simnode.SIMNODE_PATH), "hold", str(sim_node.kfd)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().startswith(f"holding {sim_node.kfd} pid ")
        assert hy_smi(sim_node, "-mig", "1").returncode == 1
    finally:
        holder.communicate(input="", timeout=60)
    assert holder.returncode == 0
    assert hy_smi(sim_node, "-mig", "1").returncode == 0


def vcreate(node: simnode.SimNode, card: int, cus: str, mem: str) -> int:
    return node.create_vdevs(card, cus, mem).returncode


def test_status_lists_vdevs(sim_node: simnode.SimNode) -> None:
    assert vcreate(sim_node, 1, "20,30", "16384,1000") == 0
    lines = run_simnode("status", str(sim_node.root)).stdout.splitlines()
    assert [line for line in lines if line.startswith("vdev ")] == [
        "vdev id=0 card=1 cus=20 mem_mib=16384 pipe=0 cu_mask=0x00000000000fffff,0x" + "0" * 16,
        "vdev id=1 card=1 cus=30 mem_mib=1000 pipe=1 cu_mask=0x0003fffffff00000,0x" + "0" * 16,
    ]


def test_reboot_command_drops_vdevs_and_their_conf_files(sim_node: simnode.SimNode) -> None:
    assert vcreate(sim_node, 0, "10,10", "10,10") == 0
    (sim_node.vdev_dir / "docker").mkdir()
    assert run_simnode("reboot", str(sim_node.root)).returncode == 0
    assert sim_node.status().vdevs == []
    assert [p.name for p in sim_node.vdev_dir.iterdir()] == ["docker"]
    assert "vdev " not in run_simnode("status", str(sim_node.root)).stdout
    assert sim_node.status().mode == 0
    assert hy_smi(sim_node, "-mig", "1").returncode == 0  # nothing blocks the switch any more


def test_vdev_fault_commands(sim_node: simnode.SimNode) -> None:
    root = str(sim_node.root)
    assert run_simnode("fault", root, "fail", "vdev_create", "1", "--code", "11").returncode == 0
    assert "fault: fail vdev_create 1 11" in run_simnode("status", root).stdout
    assert vcreate(sim_node, 0, "1", "1") == 1
    assert run_simnode("fault", root, "fail", "vdev_create_crash", "1").returncode == 0
    assert "fault: fail vdev_create_crash 1 8" in run_simnode("status", root).stdout
    assert vcreate(sim_node, 0, "1", "1") == 1
    assert sim_node.vdev_conf(0).is_file() and sim_node.status().vdevs == []
    assert vcreate(sim_node, 0, "1", "1") == 0
    assert run_simnode("fault", root, "fail", "vdev_destroy", "2").returncode == 0
    assert "fault: fail vdev_destroy 2 9" in run_simnode("status", root).stdout
    failed = hy_smi(sim_node, "virtual", "-destroy-vdevice")
    assert failed.returncode == 1
    assert "Virtual device destruction failed" in failed.stdout
    assert run_simnode("fault", root, "clear").returncode == 0
    assert hy_smi(sim_node, "virtual", "-destroy-vdevice").returncode == 0
    assert sim_node.status().vdevs == []
    bad = run_simnode("fault", root, "fail", "vdev_explode", "1")
    assert bad.returncode != 0


def test_fail_next_default_codes(sim_node: simnode.SimNode) -> None:
    for op in (*simnode.FAULT_OPS, *simnode.VDEV_FAULT_OPS):
        sim_node.fail_next(op)
    codes = {line.split()[1]: int(line.split()[3]) for line in sim_node.status().faults}
    assert codes == {
        "gi_create": 999,
        "ci_create": 999,
        "gi_destroy": 999,
        "ci_destroy": 999,
        "set_mode": 999,
        "vdev_create": 8,
        "vdev_create_crash": 8,
        "vdev_destroy": 9,
        "vdev_update": 1,
    }
