"""hy-smi virtual: the vendor's output shapes for cards and virtual devices, and its effects."""

from __future__ import annotations

import subprocess
from collections.abc import Callable

import pytest
import simnode

CREATED = "The virtual device is created successfully!\n"
DESTROYED = "The virtual device is destroyed successfully!\n"
VDEVS_EXIST = "Error: Set system level mig mode failed. Virtual devices still exist.\n"
BAD_ARGS = "Invlaid arguments\n"
GIB_64 = 65520 * 2**20


def hy_smi(
    node: simnode.SimNode, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    full = node.env()
    full.update(env or {})
    return subprocess.run(
        [str(simnode.HY_SMI_PATH), *args],
        capture_output=True,
        text=True,
        env=full,
        check=False,
        timeout=60,
    )


def create(
    node: simnode.SimNode, card: int, cus: str, mem: str, count: int | None = None
) -> subprocess.CompletedProcess[str]:
    n = str(count if count is not None else len(cus.split(",")))
    return hy_smi(
        node,
        "virtual",
        "-create-vdevices",
        n,
        "-d",
        str(card),
        "-vdevice-compute-units",
        cus,
        "-vdevice-memory-size",
        mem,
    )


def test_show_device_info(sim_node_factory: Callable[..., simnode.SimNode]) -> None:
    node = sim_node_factory(cards=2)
    result = hy_smi(node, "virtual", "-show-device-info")
    assert (result.returncode, result.stdout) == (
        0,
        "Device 0:\n"
        "    Actual Device: 0\n"
        "    Compute units: 80\n"
        f"    Global memory: {GIB_64} bytes\n"
        "Device 1:\n"
        "    Actual Device: 1\n"
        "    Compute units: 80\n"
        f"    Global memory: {GIB_64} bytes\n",
    )
    hypo = sim_node_factory(model="hypo-x8", cards=1)
    assert hy_smi(hypo, "virtual", "-show-device-info").stdout.splitlines()[2:] == [
        "    Compute units: 112",
        f"    Global memory: {130944 * 2**20} bytes",
    ]


def test_create_then_show_vdevice_info(sim_node: simnode.SimNode) -> None:
    made = create(sim_node, 1, "20,30", "16384,1000")
    assert (made.returncode, made.stdout) == (0, CREATED)
    assert create(sim_node, 0, "8", "512").stdout == CREATED
    shown = hy_smi(sim_node, "virtual", "-show-vdevice-info")
    assert (shown.returncode, shown.stdout) == (
        0,
        "Virtual Device 0:\n"
        "    Actual Device: 1\n"
        "    Compute units: 20\n"
        f"    Global memory: {16384 * 2**20} bytes\n"
        "Virtual Device 1:\n"
        "    Actual Device: 1\n"
        "    Compute units: 30\n"
        f"    Global memory: {1000 * 2**20} bytes\n"
        "Virtual Device 2:\n"
        "    Actual Device: 0\n"
        "    Compute units: 8\n"
        f"    Global memory: {512 * 2**20} bytes\n",
    )
    assert [op.split()[0] for op in sim_node.ops()] == ["create_vdev"] * 3
    assert sim_node.vdev_conf(2).is_file()


def test_show_vdevice_info_with_none_prints_nothing(sim_node: simnode.SimNode) -> None:
    result = hy_smi(sim_node, "virtual", "-show-vdevice-info")
    assert (result.returncode, result.stdout) == (0, "")


def test_create_failures_are_reported(sim_node: simnode.SimNode) -> None:
    too_big = create(sim_node, 0, "81", "1")
    assert too_big.returncode == 1
    assert too_big.stdout == "Error: Create virtual device failed. Out of resources\n"
    zero = create(sim_node, 0, "0", "1")
    assert zero.returncode == 1
    assert zero.stdout == "Error: Create virtual device failed. Invalid arguments\n"
    no_card = create(sim_node, 5, "1", "1")
    assert no_card.returncode == 1 and "Invalid arguments" in no_card.stdout
    sim_node.switch_mode(True)
    refused = create(sim_node, 0, "1", "1")
    assert refused.returncode == 1
    assert refused.stdout == "Error: Create virtual device failed. Not supported\n"
    assert sim_node.ops() == [] and sim_node.status().vdevs == []


@pytest.mark.parametrize(
    "args",
    [
        "-create-vdevices 2 -d 0 -vdevice-compute-units 1 -vdevice-memory-size 1",
        "-create-vdevices 1 -vdevice-compute-units 1 -vdevice-memory-size 1",
        "-create-vdevices 1 -d 0 -vdevice-compute-units 1",
        "-create-vdevices 0 -d 0",
        "-create-vdevices 1 -d 0 -vdevice-compute-units x -vdevice-memory-size 1",
        "-create-vdevices 1 -d 0 -vdevice-compute-units 1, -vdevice-memory-size 1",
        "-create-vdevices 1 -d 0 -vdevice-compute-units -1 -vdevice-memory-size 1",
        "-show-device-info -show-vdevice-info",
        "-show-device-info -d 0",
        "-vdevice-compute-units 1 -destroy-vdevice",
        "-frobnicate",
        "",
    ],
)
def test_bad_arguments(sim_node: simnode.SimNode, args: str) -> None:
    result = hy_smi(sim_node, "virtual", *args.split())
    assert (result.returncode, result.stdout) == (1, BAD_ARGS)
    assert sim_node.status().vdevs == []


def test_destroy_one_card_or_all(sim_node: simnode.SimNode) -> None:
    assert create(sim_node, 0, "10,10", "10,10").returncode == 0
    assert create(sim_node, 1, "10", "10").returncode == 0
    one = hy_smi(sim_node, "virtual", "-d", "0", "-destroy-vdevice")
    assert (one.returncode, one.stdout) == (0, DESTROYED)
    assert [(v.id, v.card) for v in sim_node.status().vdevs] == [(2, 1)]
    assert sorted(p.name for p in sim_node.vdev_dir.iterdir()) == ["vdev2.conf"]
    assert create(sim_node, 0, "10", "10").returncode == 0
    every = hy_smi(sim_node, "virtual", "-destroy-vdevice")
    assert (every.returncode, every.stdout) == (0, DESTROYED)
    assert sim_node.status().vdevs == [] and list(sim_node.vdev_dir.iterdir()) == []
    assert hy_smi(sim_node, "virtual", "-show-vdevice-info").stdout == ""


def test_destroy_refused_while_a_process_holds_the_conf(
    sim_node: simnode.SimNode, kfd_holder: Callable[..., object]
) -> None:
    assert create(sim_node, 0, "10", "10").returncode == 0
    assert create(sim_node, 1, "10", "10").returncode == 0
    holder = kfd_holder(sim_node.vdev_conf(0))
    busy = hy_smi(sim_node, "virtual", "-destroy-vdevice")
    assert busy.returncode == 1
    assert busy.stdout == "Error: Destroy virtual device failed on device 0. Device busy\n"
    assert [v.id for v in sim_node.status().vdevs] == [0]  # card 1's went, card 0's did not
    holder.release()  # type: ignore[attr-defined]
    assert hy_smi(sim_node, "virtual", "-d", "0", "-destroy-vdevice").returncode == 0
    assert sim_node.status().vdevs == []


def test_mode_switch_refused_while_vdevs_exist(sim_node: simnode.SimNode) -> None:
    assert create(sim_node, 1, "10", "10").returncode == 0
    refused = hy_smi(sim_node, "-mig", "1")
    assert (refused.returncode, refused.stdout) == (1, VDEVS_EXIST)
    assert sim_node.status().mode == 0 and not sim_node.registry_dir.exists()
    assert hy_smi(sim_node, "virtual", "-destroy-vdevice").returncode == 0
    enabled = hy_smi(sim_node, "-mig", "1")
    assert (enabled.returncode, enabled.stdout) == (0, "Enabled mig mode successful.\n")


def test_library_refusal_without_hy_smis_own_check(sim_node: simnode.SimNode) -> None:
    """With libhydmi.so out of hy-smi's reach its own check is skipped: the MIG library still
    refuses (IN_USE), which hy-smi words as its busy refusal."""
    assert create(sim_node, 0, "10", "10").returncode == 0
    blind = hy_smi(sim_node, "-mig", "1", env={"HYDMI_SIM_DMI_LIB": "/nonexistent/libhydmi.so"})
    assert blind.returncode == 1
    assert blind.stdout.startswith("Error: Set system level mig mode failed.")
    assert sim_node.status().mode == 0


def test_virtual_needs_libhydmi(sim_node: simnode.SimNode) -> None:
    result = hy_smi(
        sim_node,
        "virtual",
        "-show-device-info",
        env={"HYDMI_SIM_DMI_LIB": "/nonexistent/libhydmi.so"},
    )
    assert result.returncode == 2
    assert "cannot load the management library /nonexistent/libhydmi.so" in result.stderr


def test_library_errors_are_reported(sim_node: simnode.SimNode) -> None:
    sim_node.driver_error(3)
    for args in (["-show-device-info"], ["-show-vdevice-info"], ["-destroy-vdevice"]):
        result = hy_smi(sim_node, "virtual", *args)
        assert result.returncode == 1
        assert result.stdout == "Error: Query device failed. Cannot open the mkfd device\n"
