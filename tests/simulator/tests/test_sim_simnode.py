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
    assert (root / "opt" / "hyhal" / "lib" / "libhydmi.so").is_file()
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
    assert len(compiles) == 3
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
