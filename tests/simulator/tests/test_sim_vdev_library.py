"""The simulated virtual-device library libhydmi.so, driven through ctypes (RTLD_LOCAL).

The struct and the status numbers are written here from docs/dev/hardware.md ("Logical
slices"), not imported from anywhere, so a slip on either side shows up as a failure.
"""

from __future__ import annotations

import ctypes
import os
import re
import stat
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
import simnode

SUCCESS, ERROR, OPEN_MKFD_FAILED, NOT_SUPPORTED = 0, 1, 3, 6
CREATE_VDEV_FAILED, DESTROY_VDEV_FAILED, INVALID_ARGUMENTS, OUT_OF_RESOURCES = 8, 9, 10, 11
VDEV_NOT_EXIST, INIT_DEVICE_FAILED, DEVICE_BUSY, FILE_ERROR, PERMISSION = 15, 16, 17, 18, 19
NVML_SUCCESS, NVML_IN_USE = 0, 19
MIB = 1 << 20

EXPORTED = {
    "dmiGetDeviceCount",
    "dmiGetDeviceInfo",
    "dmiGetMaxVDeviceCount",
    "dmiGetVDeviceCount",
    "dmiGetDeviceRemainingInfo",
    "dmiGetVDeviceInfo",
    "dmiCreateVDevices",
    "dmiDestroyVDevices",
    "dmiDestroySingleVDevice",
    "dmiUpdateSingleVDevice",
    "dmiGetStatusString",
}


class DeviceInfo(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char * 256),
        ("compute_unit_count", ctypes.c_int),
        ("global_mem_size", ctypes.c_size_t),
        ("usage_mem_size", ctypes.c_size_t),
        ("container_id", ctypes.c_uint64),
        ("device_id", ctypes.c_int),
    ]


Int = ctypes.c_int
P = ctypes.POINTER
SIGNATURES: dict[str, list[type]] = {
    "dmiGetDeviceCount": [P(Int)],
    "dmiGetDeviceInfo": [Int, ctypes.c_void_p],
    "dmiGetMaxVDeviceCount": [P(Int)],
    "dmiGetVDeviceCount": [P(Int)],
    "dmiGetDeviceRemainingInfo": [Int, P(ctypes.c_size_t), P(ctypes.c_size_t)],
    "dmiGetVDeviceInfo": [Int, ctypes.c_void_p],
    "dmiCreateVDevices": [Int, Int, P(Int), P(Int)],
    "dmiDestroyVDevices": [Int],
    "dmiDestroySingleVDevice": [Int],
    "dmiUpdateSingleVDevice": [Int, Int, Int],
    "dmiGetStatusString": [Int, P(ctypes.c_char_p)],
}


class Dmi:
    """Test-side access to libhydmi.so; every call returns the raw dmiStatus."""

    def __init__(self, path: Path) -> None:
        self.cdll = ctypes.CDLL(str(path), mode=os.RTLD_NOW | os.RTLD_LOCAL)
        self.fn: dict[str, Callable[..., int]] = {}
        for name, args in SIGNATURES.items():
            f = getattr(self.cdll, name)
            f.argtypes = args
            f.restype = ctypes.c_int
            self.fn[name] = f

    def __getattr__(self, name: str) -> Callable[..., int]:
        return self.fn[name]

    def count(self, name: str) -> int:
        out = Int(-1)
        assert self.fn[name](ctypes.byref(out)) == SUCCESS
        return out.value

    def create(self, card: int, cus: list[int], mem_mib: list[int], count: int = -1) -> int:
        n = len(cus) if count < 0 else count
        return self.dmiCreateVDevices(
            card, n, (Int * max(len(cus), 1))(*cus), (Int * max(len(mem_mib), 1))(*mem_mib)
        )

    def card(self, card: int) -> tuple[int, DeviceInfo]:
        info = DeviceInfo()
        return self.dmiGetDeviceInfo(card, ctypes.byref(info)), info

    def vdev(self, vdev_id: int) -> tuple[int, DeviceInfo]:
        info = DeviceInfo()
        return self.dmiGetVDeviceInfo(vdev_id, ctypes.byref(info)), info

    def remaining(self, card: int) -> tuple[int, int]:
        cus, mem = ctypes.c_size_t(), ctypes.c_size_t()
        assert self.dmiGetDeviceRemainingInfo(card, ctypes.byref(cus), ctypes.byref(mem)) == 0
        return cus.value, mem.value

    def live(self, cards: int) -> dict[int, tuple[int, int, int]]:
        """vdev id -> (card, CUs, memory bytes), by scanning every possible id."""
        out = {}
        for vid in range(cards * 4):
            rc, info = self.vdev(vid)
            assert rc in (SUCCESS, VDEV_NOT_EXIST)
            if rc == SUCCESS:
                out[vid] = (info.device_id, info.compute_unit_count, info.global_mem_size)
        return out


class MigLib:
    """Just the mode switch of libhydmi_mig.so.1 (NVML numbers)."""

    def __init__(self) -> None:
        cdll = ctypes.CDLL(str(simnode.LIB_PATH), mode=os.RTLD_NOW | os.RTLD_LOCAL)
        self.set = cdll.nvmlSetSystemMigMode
        self.set.argtypes = [ctypes.c_uint, P(Int)]
        self.set.restype = Int

    def set_mode(self, mode: int) -> int:
        status = Int(-1)
        return int(self.set(mode, ctypes.byref(status)))


@pytest.fixture
def dmi(sim_build: object) -> Dmi:
    return Dmi(simnode.DMI_LIB_PATH)


def conf_fields(path: Path) -> list[tuple[str, str]]:
    return [
        (key, value.strip())
        for key, value in (line.split(":", 1) for line in path.read_text().splitlines())
    ]


def mask_of(bits: range | list[int]) -> tuple[int, int]:
    value = sum(1 << b for b in bits)
    return value & (2**64 - 1), value >> 64


# ------------------------------------------------------------------ exports and layout ------
def test_exports_exactly_the_vendor_calls_with_the_vendor_soname(
    sim_node: simnode.SimNode,
) -> None:
    out = subprocess.run(
        ["nm", "-D", "--defined-only", str(simnode.DMI_LIB_PATH)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert {line.split()[-1] for line in out.splitlines() if line.strip()} == EXPORTED
    dynamic = subprocess.run(
        ["readelf", "-d", str(simnode.DMI_LIB_PATH)], capture_output=True, text=True, check=True
    ).stdout
    assert re.search(r"\(SONAME\)\s+Library soname: \[libhydmi\.so\]", dynamic)
    # The node's /opt/hyhal/lib/libhydmi.so is now the library itself, by a symlink.
    link = sim_node.root / "opt" / "hyhal" / "lib" / "libhydmi.so"
    assert link.is_symlink() and link.resolve() == simnode.DMI_LIB_PATH.resolve()


def test_device_info_layout_is_the_vendor_layout(sim_node: simnode.SimNode, dmi: Dmi) -> None:
    # Spelled out from docs/dev/hardware.md on x86_64.
    assert ctypes.sizeof(DeviceInfo) == 296
    assert [getattr(DeviceInfo, field[0]).offset for field in DeviceInfo._fields_] == [
        0,
        256,
        264,
        272,
        280,
        288,
    ]
    # The library writes exactly those bytes: a canary after the struct survives, and the
    # fields read back where the layout puts them (card 1, then vdev 0 which lives on card 1).
    assert dmi.create(1, [24], [3000]) == SUCCESS
    seen = []
    for call, index in ((dmi.dmiGetDeviceInfo, 1), (dmi.dmiGetVDeviceInfo, 0)):
        raw = (ctypes.c_ubyte * 360)(*([0xAB] * 360))
        assert call(index, ctypes.cast(raw, ctypes.c_void_p)) == SUCCESS
        assert bytes(raw[296:]) == b"\xab" * 64
        info = DeviceInfo.from_buffer_copy(bytes(raw[:296]))
        seen.append(
            (
                info.name,
                info.compute_unit_count,
                info.global_mem_size,
                info.usage_mem_size,
                info.container_id,
                info.device_id,
            )
        )
    assert seen == [
        (b"c3000-bw", 80, 65520 * MIB, 0, 0, 1),
        (b"c3000-bw", 24, 3000 * MIB, 0, 0, 1),
    ]


def test_status_strings(dmi: Dmi) -> None:
    texts = []
    for code in range(20):
        text = ctypes.c_char_p()
        assert dmi.dmiGetStatusString(code, ctypes.byref(text)) == SUCCESS
        assert text.value
        texts.append(text.value)
    assert len(set(texts)) == 20
    assert dmi.dmiGetStatusString(20, ctypes.byref(ctypes.c_char_p())) == INVALID_ARGUMENTS
    assert dmi.dmiGetStatusString(-1, ctypes.byref(ctypes.c_char_p())) == INVALID_ARGUMENTS
    assert dmi.dmiGetStatusString(0, None) == INVALID_ARGUMENTS


def test_no_node_or_no_mkfd_is_open_mkfd_failed(
    sim_node: simnode.SimNode, dmi: Dmi, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    out = Int()
    assert dmi.dmiGetDeviceCount(ctypes.byref(out)) == SUCCESS and out.value == 2
    monkeypatch.delenv(simnode.ROOT_ENV)
    assert dmi.dmiGetDeviceCount(ctypes.byref(out)) == OPEN_MKFD_FAILED
    assert dmi.create(0, [1], [1]) == OPEN_MKFD_FAILED
    monkeypatch.setenv(simnode.ROOT_ENV, str(tmp_path / "nothing"))
    assert dmi.dmiGetVDeviceCount(ctypes.byref(out)) == OPEN_MKFD_FAILED
    monkeypatch.setenv(simnode.ROOT_ENV, str(sim_node.root))
    sim_node.mkfd.unlink()
    assert dmi.dmiGetMaxVDeviceCount(ctypes.byref(out)) == OPEN_MKFD_FAILED


def test_counts_and_card_info_follow_the_model(
    sim_node_factory: Callable[..., simnode.SimNode], dmi: Dmi
) -> None:
    sim_node_factory(cards=2)
    assert dmi.count("dmiGetDeviceCount") == 2
    assert dmi.count("dmiGetMaxVDeviceCount") == 4
    assert dmi.count("dmiGetVDeviceCount") == 0
    rc, info = dmi.card(1)
    assert rc == SUCCESS
    assert (info.name, info.compute_unit_count, info.device_id) == (b"c3000-bw", 80, 1)
    assert info.global_mem_size == 65520 * MIB
    assert dmi.card(2)[0] == INVALID_ARGUMENTS
    assert dmi.card(-1)[0] == INVALID_ARGUMENTS
    assert dmi.dmiGetDeviceInfo(0, None) == INVALID_ARGUMENTS
    assert dmi.remaining(0) == (80, 65520 * MIB)
    sim_node_factory(model="hypo-x8", cards=3)
    assert dmi.count("dmiGetDeviceCount") == 3
    rc, info = dmi.card(2)
    assert (info.name, info.compute_unit_count, info.global_mem_size) == (
        b"hypo-x8",
        112,
        130944 * MIB,
    )
    assert dmi.remaining(2) == (112, 130944 * MIB)


# ------------------------------------------------------------------ create ------------------
def test_create_writes_the_driver_conf_files(sim_node: simnode.SimNode, dmi: Dmi) -> None:
    assert dmi.create(0, [20, 30], [16384, 1000]) == SUCCESS
    assert sim_node.vdev_conf(0).read_text() == (
        "PciBusId: 0000:09:00.0\n"
        "cu_mask: 0x00000000000fffff\n"
        "cu_mask: 0x0000000000000000\n"
        "cu_count: 20\n"
        "mem: 16384 MiB\n"
        "device_id: 0\n"
        "vdev_id: 0\n"
        "pipe_id: 0\n"
        "enable: 1\n"
    )
    assert conf_fields(sim_node.vdev_conf(1)) == [
        ("PciBusId", "0000:09:00.0"),
        ("cu_mask", "0x0003fffffff00000"),
        ("cu_mask", "0x0000000000000000"),
        ("cu_count", "30"),
        ("mem", "1000 MiB"),
        ("device_id", "0"),
        ("vdev_id", "1"),
        ("pipe_id", "1"),
        ("enable", "1"),
    ]
    assert stat.S_IMODE(sim_node.vdev_conf(0).stat().st_mode) == 0o644
    assert stat.S_IMODE(sim_node.vdev_dir.stat().st_mode) == 0o755
    assert sim_node.ops() == [
        "create_vdev card=0 vdev=0 cus=20 mem_mib=16384",
        "create_vdev card=0 vdev=1 cus=30 mem_mib=1000",
    ]
    assert dmi.count("dmiGetVDeviceCount") == 2
    assert dmi.live(2) == {0: (0, 20, 16384 * MIB), 1: (0, 30, 1000 * MIB)}
    assert dmi.remaining(0) == (30, (65520 - 17384) * MIB)
    assert dmi.remaining(1) == (80, 65520 * MIB)
    status = sim_node.status()
    assert [(v.id, v.card, v.cu_count, v.mem_mib, v.pipe_id) for v in status.vdevs] == [
        (0, 0, 20, 16384, 0),
        (1, 0, 30, 1000, 1),
    ]
    assert status.vdevs[1].cu_mask == mask_of(range(20, 50))


def test_ids_are_node_global_lowest_free_and_cus_pipes_lowest_free(
    sim_node: simnode.SimNode, dmi: Dmi
) -> None:
    assert dmi.create(0, [20], [100]) == SUCCESS  # id 0, CUs 0-19, pipe 0
    assert dmi.create(1, [10], [100]) == SUCCESS  # id 1 on card 1, its CUs 0-9, pipe 0
    assert dmi.create(0, [20, 20], [100, 100]) == SUCCESS  # ids 2,3; CUs 20-39, 40-59
    assert {k: v[0] for k, v in dmi.live(2).items()} == {0: 0, 1: 1, 2: 0, 3: 0}
    assert dmi.dmiDestroySingleVDevice(0) == SUCCESS
    assert dmi.dmiDestroySingleVDevice(1) == SUCCESS
    assert dmi.create(0, [25], [1]) == SUCCESS  # id 0 again, CUs 0-19 + 60-64, pipe 0
    by_id = {v.id: v for v in sim_node.status().vdevs}
    assert by_id[0].cu_mask == mask_of(list(range(20)) + list(range(60, 65)))
    assert by_id[0].pipe_id == 0 and by_id[3].pipe_id == 2
    assert dmi.create(1, [1], [1]) == SUCCESS  # lowest free id is 1, on card 1
    assert dmi.live(2)[1][0] == 1
    assert "vdev_id: 1" in sim_node.vdev_conf(1).read_text()
    assert "PciBusId: 0000:0c:00.0" in sim_node.vdev_conf(1).read_text()


def test_cu_masks_use_both_words_on_a_wide_card(
    sim_node_factory: Callable[..., simnode.SimNode], dmi: Dmi
) -> None:
    node = sim_node_factory(model="hypo-x8", cards=1)
    assert dmi.create(0, [60, 40], [1, 1]) == SUCCESS
    lines = node.vdev_conf(1).read_text().splitlines()
    assert lines[1:3] == ["cu_mask: 0xf000000000000000", "cu_mask: 0x0000000fffffffff"]
    assert dmi.remaining(0)[0] == 12
    assert dmi.create(0, [13], [1]) == OUT_OF_RESOURCES
    assert dmi.create(0, [12], [1]) == SUCCESS
    assert node.status().vdevs[2].cu_mask == mask_of(range(100, 112))


def test_at_most_four_per_card_and_all_or_nothing(sim_node: simnode.SimNode, dmi: Dmi) -> None:
    assert dmi.create(0, [1, 1], [1, 1]) == SUCCESS
    before = (sim_node.status().vdevs, sim_node.ops(), sorted(sim_node.vdev_dir.iterdir()))
    assert dmi.create(0, [1, 1, 1], [1, 1, 1]) == OUT_OF_RESOURCES
    assert dmi.create(0, [1] * 5, [1] * 5) == OUT_OF_RESOURCES
    assert (sim_node.status().vdevs, sim_node.ops(), sorted(sim_node.vdev_dir.iterdir())) == before
    assert dmi.create(0, [1, 1], [1, 1]) == SUCCESS
    assert dmi.create(0, [1], [1]) == OUT_OF_RESOURCES
    assert dmi.create(1, [1, 1, 1, 1], [1, 1, 1, 1]) == SUCCESS
    assert dmi.count("dmiGetVDeviceCount") == 8
    assert sorted(dmi.live(2)) == list(range(8))


@pytest.mark.parametrize(
    ("cus", "mem"),
    [([81], [1]), ([1], [65521]), ([60, 21], [1, 1]), ([1, 1], [65000, 521])],
)
def test_more_than_the_card_has_creates_nothing(
    sim_node: simnode.SimNode, dmi: Dmi, cus: list[int], mem: list[int]
) -> None:
    assert dmi.create(0, cus, mem) == OUT_OF_RESOURCES
    assert dmi.count("dmiGetVDeviceCount") == 0
    assert not sim_node.vdev_dir.exists() or list(sim_node.vdev_dir.iterdir()) == []
    assert sim_node.ops() == []


def test_exactly_the_whole_card_fits(sim_node: simnode.SimNode, dmi: Dmi) -> None:
    assert dmi.create(0, [40], [60000]) == SUCCESS
    assert dmi.create(0, [41], [1]) == OUT_OF_RESOURCES
    assert dmi.create(0, [1], [5521]) == OUT_OF_RESOURCES
    assert dmi.create(0, [40], [5520]) == SUCCESS
    assert dmi.remaining(0) == (0, 0)


@pytest.mark.parametrize(
    ("card", "cus", "mem", "count"),
    [
        (0, [0], [1], -1),
        (0, [1], [0], -1),
        (0, [-3], [1], -1),
        (0, [1, 1], [1, -1], -1),
        (0, [1], [1], 0),
        (0, [1], [1], -2),
        (2, [1], [1], -1),
        (-1, [1], [1], -1),
    ],
)
def test_create_argument_checks(
    sim_node: simnode.SimNode, dmi: Dmi, card: int, cus: list[int], mem: list[int], count: int
) -> None:
    n = len(cus) if count == -1 else count
    assert (
        dmi.dmiCreateVDevices(card, n, (Int * len(cus))(*cus), (Int * len(mem))(*mem))
        == INVALID_ARGUMENTS
    )
    assert dmi.count("dmiGetVDeviceCount") == 0
    assert sim_node.ops() == []


def test_create_with_null_arrays_is_invalid(sim_node: simnode.SimNode, dmi: Dmi) -> None:
    assert dmi.dmiCreateVDevices(0, 1, None, (Int * 1)(1)) == INVALID_ARGUMENTS
    assert dmi.dmiCreateVDevices(0, 1, (Int * 1)(1), None) == INVALID_ARGUMENTS


def test_create_refused_while_the_partition_mode_is_on(sim_node: simnode.SimNode, dmi: Dmi) -> None:
    sim_node.switch_mode(True)
    assert dmi.create(0, [10], [10]) == NOT_SUPPORTED
    assert not sim_node.vdev_dir.exists()
    sim_node.switch_mode(False)
    assert dmi.create(0, [10], [10]) == SUCCESS


def test_create_refused_without_virtualization(
    sim_node_factory: Callable[..., simnode.SimNode], dmi: Dmi
) -> None:
    node = sim_node_factory(virtualization=False)
    assert dmi.create(0, [10], [10]) == NOT_SUPPORTED
    assert not node.vdev_dir.exists() and node.ops() == []
    assert dmi.count("dmiGetDeviceCount") == 2  # queries still answer


def test_mode_switch_refused_while_any_vdev_exists(sim_node: simnode.SimNode, dmi: Dmi) -> None:
    mig = MigLib()
    assert dmi.create(1, [10], [10]) == SUCCESS
    assert mig.set_mode(1) == NVML_IN_USE
    assert sim_node.status().mode == 0 and not sim_node.registry_dir.exists()
    assert mig.set_mode(0) == NVML_SUCCESS  # the mode stays off: nothing to refuse
    assert dmi.dmiDestroyVDevices(1) == SUCCESS
    assert mig.set_mode(1) == NVML_SUCCESS
    assert sim_node.status().mode == 1


def test_unwritable_conf_directory_is_a_file_error(sim_node: simnode.SimNode, dmi: Dmi) -> None:
    sim_node.vdev_dir.parent.mkdir(parents=True, exist_ok=True)
    sim_node.vdev_dir.write_text("in the way\n")
    assert dmi.create(0, [1], [1]) == FILE_ERROR
    sim_node.vdev_dir.unlink()
    sim_node.vdev_dir.mkdir()
    sim_node.vdev_conf(1).mkdir()  # the second conf cannot be written: the first is undone
    assert dmi.create(0, [1, 1], [1, 1]) == FILE_ERROR
    assert sorted(p.name for p in sim_node.vdev_dir.iterdir()) == ["vdev1.conf"]
    assert dmi.count("dmiGetVDeviceCount") == 0 and sim_node.ops() == []


# ------------------------------------------------------------------ query -------------------
def test_vdev_info_of_a_missing_vdev(sim_node: simnode.SimNode, dmi: Dmi) -> None:
    assert dmi.vdev(0)[0] == VDEV_NOT_EXIST
    assert dmi.vdev(7)[0] == VDEV_NOT_EXIST
    assert dmi.vdev(1000)[0] == VDEV_NOT_EXIST
    assert dmi.vdev(-1)[0] == INVALID_ARGUMENTS
    assert dmi.create(0, [8], [512]) == SUCCESS
    assert dmi.dmiGetVDeviceInfo(0, None) == INVALID_ARGUMENTS
    rc, info = dmi.vdev(0)
    assert rc == SUCCESS
    assert (info.device_id, info.compute_unit_count, info.global_mem_size) == (0, 8, 512 * MIB)
    assert (info.usage_mem_size, info.container_id) == (0, 0)
    assert info.name == b"c3000-bw"


# ------------------------------------------------------------------ destroy / update --------
def test_destroy_single_removes_conf_and_logs(sim_node: simnode.SimNode, dmi: Dmi) -> None:
    assert dmi.create(0, [20, 20], [100, 100]) == SUCCESS
    assert dmi.dmiDestroySingleVDevice(1) == SUCCESS
    assert not sim_node.vdev_conf(1).exists() and sim_node.vdev_conf(0).is_file()
    assert dmi.dmiDestroySingleVDevice(1) == VDEV_NOT_EXIST
    assert dmi.dmiDestroySingleVDevice(-1) == INVALID_ARGUMENTS
    assert sim_node.ops()[-1] == "destroy_vdev card=0 vdev=1"
    assert dmi.remaining(0) == (60, (65520 - 100) * MIB)


def test_destroy_per_card_leaves_other_cards(sim_node: simnode.SimNode, dmi: Dmi) -> None:
    assert dmi.create(0, [10], [10]) == SUCCESS
    assert dmi.create(1, [10], [10]) == SUCCESS
    assert dmi.create(0, [10], [10]) == SUCCESS
    assert dmi.dmiDestroyVDevices(0) == SUCCESS
    assert sorted(dmi.live(2)) == [1]
    assert sim_node.ops()[-2:] == ["destroy_vdev card=0 vdev=0", "destroy_vdev card=0 vdev=2"]
    assert sorted(p.name for p in sim_node.vdev_dir.iterdir()) == ["vdev1.conf"]
    assert dmi.dmiDestroyVDevices(0) == SUCCESS  # nothing left there: nothing to do
    assert dmi.dmiDestroyVDevices(2) == INVALID_ARGUMENTS
    assert dmi.dmiDestroyVDevices(-1) == INVALID_ARGUMENTS


def test_held_conf_refuses_destroy(
    sim_node: simnode.SimNode, dmi: Dmi, kfd_holder: Callable[..., object]
) -> None:
    assert dmi.create(0, [10, 10], [10, 10]) == SUCCESS
    holder = kfd_holder(sim_node.vdev_conf(1))
    assert dmi.dmiDestroySingleVDevice(1) == DEVICE_BUSY
    # Per card: one busy vdev and nothing of that card is destroyed.
    assert dmi.dmiDestroyVDevices(0) == DEVICE_BUSY
    assert sorted(dmi.live(2)) == [0, 1]
    assert sim_node.vdev_conf(0).is_file() and sim_node.vdev_conf(1).is_file()
    assert dmi.dmiDestroySingleVDevice(0) == SUCCESS  # the other one is free
    holder.release()  # type: ignore[attr-defined]
    assert dmi.dmiDestroyVDevices(0) == SUCCESS
    assert dmi.live(2) == {}


def test_holder_is_matched_by_inode_not_only_by_path(
    sim_node: simnode.SimNode, dmi: Dmi, kfd_holder: Callable[..., object], tmp_path: Path
) -> None:
    assert dmi.create(0, [10], [10]) == SUCCESS
    other_name = tmp_path / "bound-elsewhere.conf"
    os.link(sim_node.vdev_conf(0), other_name)  # same inode, another path (like a bind mount)
    holder = kfd_holder(other_name)
    assert dmi.dmiDestroySingleVDevice(0) == DEVICE_BUSY
    assert dmi.dmiUpdateSingleVDevice(0, 5, -1) == DEVICE_BUSY
    holder.release()  # type: ignore[attr-defined]
    assert dmi.dmiDestroySingleVDevice(0) == SUCCESS


def test_update_changes_what_fits_and_rewrites_the_conf_in_place(
    sim_node: simnode.SimNode, dmi: Dmi
) -> None:
    assert dmi.create(0, [20, 20], [1000, 1000]) == SUCCESS  # CUs 0-19 and 20-39
    inode = sim_node.vdev_conf(0).stat().st_ino
    assert dmi.dmiUpdateSingleVDevice(0, 30, -1) == SUCCESS  # grows into 40-49
    assert dmi.vdev(0)[1].compute_unit_count == 30
    assert dmi.vdev(0)[1].global_mem_size == 1000 * MIB
    assert {v.id: v.cu_mask for v in sim_node.status().vdevs}[0] == mask_of(
        list(range(20)) + list(range(40, 50))
    )
    assert dmi.dmiUpdateSingleVDevice(0, 5, 2000) == SUCCESS  # shrinks to its lowest 5
    assert {v.id: v.cu_mask for v in sim_node.status().vdevs}[0] == mask_of(range(5))
    text = sim_node.vdev_conf(0).read_text()
    assert "cu_count: 5\n" in text and "mem: 2000 MiB\n" in text
    assert "cu_mask: 0x000000000000001f\n" in text
    assert sim_node.vdev_conf(0).stat().st_ino == inode
    assert sim_node.ops()[-1] == "update_vdev card=0 vdev=0 cus=5 mem_mib=2000"
    assert dmi.dmiUpdateSingleVDevice(0, 61, -1) == OUT_OF_RESOURCES  # 80 - 20 others
    assert dmi.dmiUpdateSingleVDevice(0, -1, 64521) == OUT_OF_RESOURCES
    assert dmi.dmiUpdateSingleVDevice(0, 60, 64520) == SUCCESS
    assert dmi.remaining(0) == (0, 0)
    assert dmi.dmiUpdateSingleVDevice(3, 1, 1) == VDEV_NOT_EXIST
    for cus, mem in ((0, 1), (1, 0), (-2, 1), (1, -5)):
        assert dmi.dmiUpdateSingleVDevice(0, cus, mem) == INVALID_ARGUMENTS
    assert dmi.vdev(0)[1].compute_unit_count == 60


def test_update_refused_while_held(
    sim_node: simnode.SimNode, dmi: Dmi, kfd_holder: Callable[..., object]
) -> None:
    assert dmi.create(1, [10], [10]) == SUCCESS
    holder = kfd_holder(sim_node.vdev_conf(0))
    before = sim_node.vdev_conf(0).read_text()
    assert dmi.dmiUpdateSingleVDevice(0, 11, 11) == DEVICE_BUSY
    assert sim_node.vdev_conf(0).read_text() == before
    holder.release()  # type: ignore[attr-defined]
    assert dmi.dmiUpdateSingleVDevice(0, 11, 11) == SUCCESS


def test_reboot_drops_vdevs_and_their_conf_files(sim_node: simnode.SimNode, dmi: Dmi) -> None:
    assert dmi.create(0, [10, 10], [10, 10]) == SUCCESS
    assert dmi.create(1, [10], [10]) == SUCCESS
    stray = sim_node.vdev_dir / "vdev7.conf"
    stray.write_text("not the driver's\n")
    sim_node.reboot()
    assert dmi.count("dmiGetVDeviceCount") == 0
    assert dmi.vdev(0)[0] == VDEV_NOT_EXIST
    assert sorted(p.name for p in sim_node.vdev_dir.iterdir()) == ["vdev7.conf"]
    assert dmi.remaining(0) == (80, 65520 * MIB)
    assert dmi.create(0, [10], [10]) == SUCCESS
    assert sorted(dmi.live(2)) == [0]


# ------------------------------------------------------------------ faults ------------------
def test_fault_create_answers_the_chosen_code(sim_node: simnode.SimNode, dmi: Dmi) -> None:
    sim_node.fail_next("vdev_create", 2, PERMISSION)
    assert dmi.create(0, [10], [10]) == PERMISSION
    assert dmi.create(0, [10], [10]) == PERMISSION
    assert dmi.count("dmiGetVDeviceCount") == 0
    assert not sim_node.vdev_dir.exists() and sim_node.ops() == []
    assert dmi.create(0, [10], [10]) == SUCCESS
    assert sim_node.status().faults == []


def test_fault_create_default_code(sim_node: simnode.SimNode, dmi: Dmi) -> None:
    sim_node.fail_next("vdev_create")
    assert dmi.create(0, [10], [10]) == CREATE_VDEV_FAILED


def test_fault_crash_half_way_leaves_a_stray_conf(sim_node: simnode.SimNode, dmi: Dmi) -> None:
    sim_node.fail_next("vdev_create_crash", 1, INIT_DEVICE_FAILED)
    assert dmi.create(1, [10, 20], [10, 20]) == INIT_DEVICE_FAILED
    # The files are there, the driver knows nothing of them.
    assert sorted(p.name for p in sim_node.vdev_dir.iterdir()) == ["vdev0.conf", "vdev1.conf"]
    assert "vdev_id: 1\n" in sim_node.vdev_conf(1).read_text()
    assert dmi.count("dmiGetVDeviceCount") == 0
    assert dmi.vdev(0)[0] == VDEV_NOT_EXIST
    assert dmi.dmiDestroySingleVDevice(0) == VDEV_NOT_EXIST
    assert sim_node.status().vdevs == [] and sim_node.ops() == []
    assert dmi.remaining(1) == (80, 65520 * MIB)
    # The next create takes the same id and writes its own conf over the stray one.
    assert dmi.create(0, [5], [5]) == SUCCESS
    assert "PciBusId: 0000:09:00.0\n" in sim_node.vdev_conf(0).read_text()
    assert "cu_count: 5\n" in sim_node.vdev_conf(0).read_text()


@pytest.mark.parametrize("per_card", [False, True])
def test_fault_destroy_answers_the_chosen_code(
    sim_node: simnode.SimNode, dmi: Dmi, per_card: bool
) -> None:
    assert dmi.create(0, [10], [10]) == SUCCESS
    sim_node.fail_next("vdev_destroy", 1, ERROR)

    def destroy() -> int:
        return int(dmi.dmiDestroyVDevices(0) if per_card else dmi.dmiDestroySingleVDevice(0))

    assert destroy() == ERROR
    assert sorted(dmi.live(2)) == [0] and sim_node.vdev_conf(0).is_file()
    assert destroy() == SUCCESS
    assert dmi.live(2) == {} and not sim_node.vdev_conf(0).exists()


def test_fault_destroy_default_code(sim_node: simnode.SimNode, dmi: Dmi) -> None:
    assert dmi.create(0, [10], [10]) == SUCCESS
    sim_node.fail_next("vdev_destroy")
    assert dmi.dmiDestroySingleVDevice(0) == DESTROY_VDEV_FAILED


def test_fault_update_answers_the_chosen_code(sim_node: simnode.SimNode, dmi: Dmi) -> None:
    assert dmi.create(0, [10], [10]) == SUCCESS
    sim_node.fail_next("vdev_update", 1, FILE_ERROR)
    assert dmi.dmiUpdateSingleVDevice(0, 20, -1) == FILE_ERROR
    assert dmi.vdev(0)[1].compute_unit_count == 10
    assert dmi.dmiUpdateSingleVDevice(0, 20, -1) == SUCCESS


def test_driver_fault_answers_every_call(sim_node: simnode.SimNode, dmi: Dmi) -> None:
    sim_node.driver_error(INIT_DEVICE_FAILED)
    out = Int()
    assert dmi.dmiGetDeviceCount(ctypes.byref(out)) == INIT_DEVICE_FAILED
    assert dmi.create(0, [1], [1]) == INIT_DEVICE_FAILED
    sim_node.clear_faults()
    assert dmi.create(0, [1], [1]) == SUCCESS


# ------------------------------------------------------------------ concurrency -------------
def test_threads_never_share_cus_or_ids(sim_node: simnode.SimNode, dmi: Dmi) -> None:
    results: list[int] = []
    guard = threading.Lock()
    go = threading.Event()

    def race() -> None:
        go.wait()
        rc = dmi.create(0, [20], [1000])
        with guard:
            results.append(rc)

    threads = [threading.Thread(target=race) for _ignored in range(8)]
    for t in threads:
        t.start()
    go.set()
    for t in threads:
        t.join(timeout=60)
    assert sorted(results) == [SUCCESS] * 4 + [OUT_OF_RESOURCES] * 4
    vdevs = sim_node.status().vdevs
    assert sorted(v.id for v in vdevs) == [0, 1, 2, 3]
    assert sorted(v.pipe_id for v in vdevs) == [0, 1, 2, 3]
    union = 0
    for v in vdevs:
        bits = v.cu_mask[0] | v.cu_mask[1] << 64
        assert bits.bit_count() == 20 and not union & bits
        union |= bits
    assert union == 2**80 - 1
    assert len(sim_node.ops()) == 4
