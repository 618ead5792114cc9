"""hy-smi as a subprocess: the vendor messages we depend on and its effects on the node."""

from __future__ import annotations

import subprocess
from collections.abc import Callable

import pytest
import simnode

ENABLED = "Enabled mig mode successful."
BUSY = "Error: Set system level mig mode failed. The device is exist and may be in use."
BAD_ARGS = "Invlaid arguments"


def hy_smi(node: simnode.SimNode, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(simnode.HY_SMI_PATH), *args],
        capture_output=True,
        text=True,
        env=node.env(),
        check=False,
        timeout=60,
    )


def mode_of(node: simnode.SimNode) -> int:
    return node.status().mode


@pytest.mark.parametrize("flag", ["-mig", "--multi-instance-gpu"])
def test_enable_prints_the_vendor_message(sim_node: simnode.SimNode, flag: str) -> None:
    result = hy_smi(sim_node, flag, "1")
    assert (result.returncode, result.stdout) == (0, ENABLED + "\n")
    assert mode_of(sim_node) == 1
    assert (sim_node.registry_dir / "dev0").is_file()


@pytest.mark.parametrize(
    "args",
    [
        ["-mig", "1", "-i", "0"],
        ["-i", "0", "-mig", "1"],
        ["--multi-instance-gpu", "1", "-i", "1"],
        ["-mig", "2"],
    ],
)
def test_device_selector_is_refused_with_the_vendor_spelling(
    sim_node: simnode.SimNode, args: list[str]
) -> None:
    result = hy_smi(sim_node, *args)
    assert result.stdout == BAD_ARGS + "\n"
    assert result.returncode != 0
    assert mode_of(sim_node) == 0


def test_switch_refused_while_kfd_held(
    sim_node: simnode.SimNode, kfd_holder: Callable[..., object]
) -> None:
    kfd_holder(sim_node.kfd)
    result = hy_smi(sim_node, "-mig", "1")
    assert result.stdout == BUSY + "\n"
    assert result.returncode != 0
    assert mode_of(sim_node) == 0


def test_mkfd_holder_does_not_block_hy_smi(
    sim_node: simnode.SimNode, kfd_holder: Callable[..., object]
) -> None:
    kfd_holder(sim_node.mkfd)
    assert hy_smi(sim_node, "-mig", "1").stdout == ENABLED + "\n"


def test_disable_refused_while_instances_exist_then_allowed(sim_node: simnode.SimNode) -> None:
    assert hy_smi(sim_node, "-mig", "1").returncode == 0
    assert hy_smi(sim_node, "mig", "-cgi", "4g.31gb", "-i", "1").returncode == 0  # GI only
    refused = hy_smi(sim_node, "-mig", "0")
    assert refused.returncode != 0
    assert refused.stdout.startswith("Error: Set system level mig mode failed.")
    assert mode_of(sim_node) == 1
    assert hy_smi(sim_node, "mig", "-dgi", "-i", "1").returncode == 0
    done = hy_smi(sim_node, "-mig", "0")
    assert (done.returncode, done.stdout) == (0, "Disabled mig mode successful.\n")
    assert mode_of(sim_node) == 0
    assert not sim_node.registry_dir.exists()


def test_create_list_destroy_instances(sim_node: simnode.SimNode) -> None:
    assert hy_smi(sim_node, "-mig", "1").returncode == 0
    made = hy_smi(sim_node, "mig", "-cgi", "2g.15gb,1", "-C", "-i", "0")
    assert made.returncode == 0, made.stdout
    status = sim_node.status()
    assert sorted((g.id, g.start, g.size) for g in status.gpu_instances) == [(3, 0, 1), (4, 2, 2)]
    assert sorted(p.name for p in sim_node.ci_dir.iterdir()) == [
        "dev0gi3ci0.conf",
        "dev0gi4ci0.conf",
    ]
    listing = hy_smi(sim_node, "mig", "-lgi")
    rows = [line.split() for line in listing.stdout.splitlines()[1:]]
    assert rows == [["0", "3", "3", "2g.15gb", "0:1"], ["0", "4", "1", "4g.31gb", "2:2"]]
    ci_rows = [line.split()[:3] for line in hy_smi(sim_node, "mig", "-lci").stdout.splitlines()[1:]]
    assert ci_rows == [["0", "3", "0"], ["0", "4", "0"]]
    # Only GPU instances without compute instances can go: -dgi first fails.
    early = hy_smi(sim_node, "mig", "-dgi", "-i", "0")
    assert early.returncode != 0 and "In use" in early.stdout
    assert hy_smi(sim_node, "mig", "-dci", "-i", "0").returncode == 0
    assert list(sim_node.ci_dir.iterdir()) == []
    assert hy_smi(sim_node, "mig", "-dgi", "-i", "0").returncode == 0
    assert sim_node.status().gpu_instances == []
    kinds = [op.split()[0] for op in sim_node.ops()]
    assert kinds == [
        "create_gi",
        "create_ci",
        "create_gi",
        "create_ci",
        "destroy_ci",
        "destroy_ci",
        "destroy_gi",
        "destroy_gi",
    ]


def test_create_refused_when_the_card_is_full(sim_node: simnode.SimNode) -> None:
    assert hy_smi(sim_node, "-mig", "1").returncode == 0
    assert hy_smi(sim_node, "mig", "-cgi", "8g.63gb", "-C", "-i", "0").returncode == 0
    again = hy_smi(sim_node, "mig", "-cgi", "2g.15gb", "-C", "-i", "0")
    assert again.returncode != 0
    assert "Insufficient Resources" in again.stdout


def test_destroy_ci_refused_while_held(
    sim_node: simnode.SimNode, kfd_holder: Callable[..., object]
) -> None:
    assert hy_smi(sim_node, "-mig", "1").returncode == 0
    assert hy_smi(sim_node, "mig", "-cgi", "2g.15gb", "-C", "-i", "1").returncode == 0
    holder = kfd_holder(sim_node.ci_conf(1, 3))
    refused = hy_smi(sim_node, "mig", "-dci", "-i", "1")
    assert refused.returncode != 0 and "In use by another client" in refused.stdout
    holder.release()  # type: ignore[attr-defined]
    assert hy_smi(sim_node, "mig", "-dci", "-i", "1").returncode == 0


def test_profile_listing_follows_the_model(
    sim_node_factory: Callable[..., simnode.SimNode],
) -> None:
    node = sim_node_factory(model="hypo-x8", cards=1)
    rows = [line.split() for line in hy_smi(node, "mig", "-lgip").stdout.splitlines()[1:]]
    assert [(r[1], r[2], r[3]) for r in rows] == [
        ("1g.16gb", "19", "1"),
        ("2g.32gb", "14", "2"),
        ("3g.48gb", "9", "3"),
        ("4g.64gb", "5", "4"),
        ("8g.128gb", "0", "8"),
    ]


def test_fault_unknown_output_and_exit_code(sim_node: simnode.SimNode) -> None:
    sim_node.hysmi_output("Something the vendor never printed", exit_code=7)
    odd = hy_smi(sim_node, "-mig", "1")
    assert (odd.returncode, odd.stdout) == (7, "Something the vendor never printed\n")
    assert mode_of(sim_node) == 0
    sim_node.hysmi_output("", exit_code=0, apply=True)
    silent = hy_smi(sim_node, "-mig", "1")
    assert (silent.returncode, silent.stdout) == (0, "")
    assert mode_of(sim_node) == 1
    sim_node.clear_faults()
    assert hy_smi(sim_node, "-mig", "1").stdout == ENABLED + "\n"


def test_library_unusable_is_reported(sim_node: simnode.SimNode) -> None:
    sim_node.driver_error(9)
    result = hy_smi(sim_node, "-mig", "1")
    assert result.returncode != 0
    assert "Driver Not Loaded" in result.stdout
