"""The simulated vendor library, driven through ctypes (RTLD_LOCAL) with test-local structs.

The structs below are written from docs/dev/hardware.md on purpose (not imported from the
product's binding), so a layout slip on either side shows up as a failure here.
"""

from __future__ import annotations

import ctypes
import itertools
import os
import random
import re
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
import simnode

SUCCESS, INVALID_ARGUMENT, NOT_SUPPORTED, NOT_FOUND = 0, 2, 3, 6
INSUFFICIENT_SIZE, DRIVER_NOT_LOADED, IN_USE, INSUFFICIENT_RESOURCES, UNKNOWN = 7, 9, 19, 23, 999
UUID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")

EXPORTED = {
    "nvmlGetSystemMigMode",
    "nvmlSetSystemMigMode",
    "nvmlDeviceGetCount",
    "nvmlDeviceGetHandleByIndex",
    "nvmlDeviceGetHandleByPciBusId",
    "nvmlDeviceGetHandleByUUID",
    "nvmlDeviceGetIndex",
    "nvmlDeviceGetName",
    "nvmlDeviceGetPciInfo",
    "nvmlDeviceGetAttributes",
    "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetUtilizationRates",
    "nvmlDeviceGetMigMode",
    "nvmlDeviceGetGpuInstanceProfileInfo",
    "nvmlDeviceGetGpuInstancePossiblePlacements",
    "nvmlDeviceGetGpuInstanceRemainingCapacity",
    "nvmlDeviceCreateGpuInstanceWithPlacement",
    "nvmlDeviceGetGpuInstances",
    "nvmlDeviceGetGpuInstanceById",
    "nvmlGpuInstanceGetInfo",
    "nvmlGpuInstanceGetComputeInstanceProfileInfo",
    "nvmlGpuInstanceCreateComputeInstance",
    "nvmlGpuInstanceGetComputeInstances",
    "nvmlGpuInstanceDestroy",
    "nvmlComputeInstanceGetInfo",
    "nvmlComputeInstanceDestroy",
    "nvmlDeviceGetMaxMigDeviceCount",
    "nvmlDeviceGetMigDeviceHandleByIndex",
    "nvmlDeviceGetGpuInstanceId",
    "nvmlDeviceGetComputeInstanceId",
}


class GpuInstanceProfileInfo(ctypes.Structure):
    _fields_ = [
        ("id", ctypes.c_uint),
        ("gi_count_max", ctypes.c_uint),
        ("cu_count", ctypes.c_uint),
        ("gpu_slice_count", ctypes.c_uint),
        ("memory_size_MB", ctypes.c_ulonglong),
        ("name", ctypes.c_char * 256),
    ]


class ComputeInstanceProfileInfo(ctypes.Structure):
    _fields_ = [
        ("id", ctypes.c_uint),
        ("ci_count_max", ctypes.c_uint),
        ("cu_count", ctypes.c_uint),
        ("gpu_slice_count", ctypes.c_uint),
        ("name", ctypes.c_char * 256),
    ]


class Placement(ctypes.Structure):
    _fields_ = [("start", ctypes.c_uint), ("size", ctypes.c_uint)]


class GpuInstanceInfo(ctypes.Structure):
    _fields_ = [
        ("device", ctypes.c_void_p),
        ("id", ctypes.c_uint),
        ("profile_id", ctypes.c_uint),
        ("placement", Placement),
    ]


class ComputeInstanceInfo(ctypes.Structure):
    _fields_ = [
        ("device", ctypes.c_void_p),
        ("gpu_instance", ctypes.c_void_p),
        ("id", ctypes.c_uint),
        ("profile_id", ctypes.c_uint),
        ("placement", Placement),
    ]


class DeviceAttributes(ctypes.Structure):
    _fields_ = [
        ("index", ctypes.c_uint),
        ("cu_count", ctypes.c_uint),
        ("memory_size_MB", ctypes.c_ulonglong),
        ("uuid", ctypes.c_char * 256),
        ("name", ctypes.c_char * 256),
        ("gpu_instance_slice_count", ctypes.c_uint),
        ("compute_instance_slice_count", ctypes.c_uint),
    ]


class Memory(ctypes.Structure):
    _fields_ = [
        ("total", ctypes.c_ulonglong),
        ("free", ctypes.c_ulonglong),
        ("used", ctypes.c_ulonglong),
    ]


class Utilization(ctypes.Structure):
    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]


class PciInfo(ctypes.Structure):
    _fields_ = [
        ("domain", ctypes.c_uint),
        ("bus", ctypes.c_uint),
        ("device", ctypes.c_uint),
        ("function", ctypes.c_uint),
        ("bus_id", ctypes.c_char * 32),
    ]


class LayoutEntry(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("value", ctypes.c_ulong)]


P = ctypes.POINTER
U = ctypes.c_uint
H = ctypes.c_void_p
SIGNATURES: dict[str, list[type]] = {
    "nvmlGetSystemMigMode": [P(U), P(U)],
    "nvmlSetSystemMigMode": [U, P(ctypes.c_int)],
    "nvmlDeviceGetCount": [P(U)],
    "nvmlDeviceGetHandleByIndex": [U, P(H)],
    "nvmlDeviceGetHandleByPciBusId": [ctypes.c_char_p, P(H)],
    "nvmlDeviceGetHandleByUUID": [ctypes.c_char_p, P(H)],
    "nvmlDeviceGetIndex": [H, P(U)],
    "nvmlDeviceGetName": [H, ctypes.c_char_p, U],
    "nvmlDeviceGetPciInfo": [H, P(PciInfo)],
    "nvmlDeviceGetAttributes": [H, P(DeviceAttributes)],
    "nvmlDeviceGetMemoryInfo": [H, P(Memory)],
    "nvmlDeviceGetUtilizationRates": [H, P(Utilization)],
    "nvmlDeviceGetMigMode": [H, P(U), P(U)],
    "nvmlDeviceGetGpuInstanceProfileInfo": [H, U, P(GpuInstanceProfileInfo)],
    "nvmlDeviceGetGpuInstancePossiblePlacements": [H, U, P(Placement), P(U)],
    "nvmlDeviceGetGpuInstanceRemainingCapacity": [H, U, P(U)],
    "nvmlDeviceCreateGpuInstanceWithPlacement": [H, U, P(Placement), P(H)],
    "nvmlDeviceGetGpuInstances": [H, U, P(H), P(U)],
    "nvmlDeviceGetGpuInstanceById": [H, U, P(H)],
    "nvmlGpuInstanceGetInfo": [H, P(GpuInstanceInfo)],
    "nvmlGpuInstanceGetComputeInstanceProfileInfo": [H, U, U, P(ComputeInstanceProfileInfo)],
    "nvmlGpuInstanceCreateComputeInstance": [H, U, P(H)],
    "nvmlGpuInstanceGetComputeInstances": [H, U, P(H), P(U)],
    "nvmlGpuInstanceDestroy": [H],
    "nvmlComputeInstanceGetInfo": [H, P(ComputeInstanceInfo)],
    "nvmlComputeInstanceDestroy": [H],
    "nvmlDeviceGetMaxMigDeviceCount": [H, P(U)],
    "nvmlDeviceGetMigDeviceHandleByIndex": [H, U, P(H)],
    "nvmlDeviceGetGpuInstanceId": [H, P(U)],
    "nvmlDeviceGetComputeInstanceId": [H, P(U)],
}


class Lib:
    """Minimal test-side access to the library; every call returns the raw NVML code."""

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

    def mode(self) -> int:
        cur, pend = U(), U()
        assert self.nvmlGetSystemMigMode(ctypes.byref(cur), ctypes.byref(pend)) == SUCCESS
        assert cur.value == pend.value
        return cur.value

    def set_mode(self, mode: int) -> int:
        status = ctypes.c_int(-1)
        rc = self.nvmlSetSystemMigMode(mode, ctypes.byref(status))
        assert status.value == rc
        return rc

    def device(self, index: int) -> H:
        h = H()
        assert self.nvmlDeviceGetHandleByIndex(index, ctypes.byref(h)) == SUCCESS
        return h

    def profile(self, dev: H, width_index: int) -> tuple[int, GpuInstanceProfileInfo]:
        info = GpuInstanceProfileInfo()
        return self.nvmlDeviceGetGpuInstanceProfileInfo(dev, width_index, ctypes.byref(info)), info

    def create_gi(self, dev: H, profile_id: int, start: int, size: int) -> tuple[int, H]:
        gi = H()
        rc = self.nvmlDeviceCreateGpuInstanceWithPlacement(
            dev, profile_id, ctypes.byref(Placement(start, size)), ctypes.byref(gi)
        )
        return rc, gi

    def gi_info(self, gi: H) -> GpuInstanceInfo:
        info = GpuInstanceInfo()
        assert self.nvmlGpuInstanceGetInfo(gi, ctypes.byref(info)) == SUCCESS
        return info

    def whole_ci_profile(self, gi: H) -> ComputeInstanceProfileInfo:
        slices = self.gi_info(gi).placement.size
        for index in range(slices):
            info = ComputeInstanceProfileInfo()
            if (
                self.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, index, 0, ctypes.byref(info))
                == SUCCESS
                and info.gpu_slice_count == slices
            ):
                return info
        raise AssertionError("no whole-GI compute profile")

    def create_ci(self, gi: H) -> tuple[int, H]:
        ci = H()
        rc = self.nvmlGpuInstanceCreateComputeInstance(
            gi, self.whole_ci_profile(gi).id, ctypes.byref(ci)
        )
        return rc, ci

    def gis(self, dev: H, profile_id: int, capacity: int = 32) -> tuple[int, list[H], int]:
        arr = (H * capacity)()
        count = U(capacity)
        rc = self.nvmlDeviceGetGpuInstances(dev, profile_id, arr, ctypes.byref(count))
        handles = [H(arr[i]) for i in range(count.value)] if rc == SUCCESS else []
        return rc, handles, count.value

    def remaining(self, dev: H, profile_id: int) -> int:
        count = U()
        assert (
            self.nvmlDeviceGetGpuInstanceRemainingCapacity(dev, profile_id, ctypes.byref(count))
            == SUCCESS
        )
        return count.value


@pytest.fixture
def lib(sim_build: object) -> Lib:
    return Lib(simnode.LIB_PATH)


@pytest.fixture
def bw(sim_node: simnode.SimNode, lib: Lib) -> simnode.SimNode:
    """A c3000-bw node with the mode on."""
    assert lib.set_mode(1) == SUCCESS
    return sim_node


BW_2G, BW_4G, BW_8G = 3, 1, 0


def conf_uuid(path: Path) -> str:
    last = path.read_text().splitlines()[-1]
    key, value = last.split(":", 1)
    assert key == "mig_uuid"
    return value.strip()


# ------------------------------------------------------------------ exports and layouts ----
def test_exports_exactly_the_vendor_symbols_and_no_uuid_getter(sim_build: object) -> None:
    out = subprocess.run(
        ["nm", "-D", "--defined-only", str(simnode.LIB_PATH)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    names = {line.split()[-1] for line in out.splitlines() if line.strip()}
    assert names - {"hydmiSimLayout"} == EXPORTED
    cdll = ctypes.CDLL(str(simnode.LIB_PATH), mode=os.RTLD_LOCAL)
    with pytest.raises(AttributeError):
        _ignored = cdll.nvmlDeviceGetUUID
    assert (simnode.BUILD_DIR / "libhydmi_mig.so").resolve() == simnode.LIB_PATH.resolve()


def test_struct_layouts_match_hardware_md(lib: Lib) -> None:
    table: dict[str, int] = {}
    entries = (LayoutEntry * 128).in_dll(lib.cdll, "hydmiSimLayout")
    for entry in entries:
        if entry.name is None:
            break
        table[entry.name.decode()] = entry.value
    structs: dict[str, type[ctypes.Structure]] = {
        "hydmiGpuInstanceProfileInfo_t": GpuInstanceProfileInfo,
        "hydmiComputeInstanceProfileInfo_t": ComputeInstanceProfileInfo,
        "hydmiGpuInstancePlacement_t": Placement,
        "hydmiGpuInstanceInfo_t": GpuInstanceInfo,
        "hydmiComputeInstanceInfo_t": ComputeInstanceInfo,
        "hydmiDeviceAttributes_t": DeviceAttributes,
        "hydmiMemory_t": Memory,
        "hydmiUtilization_t": Utilization,
        "hydmiPciInfo_t": PciInfo,
    }
    checked = 0
    for cname, struct in structs.items():
        assert table[f"{cname}.sizeof"] == ctypes.sizeof(struct), cname
        for fname, *_ignored in struct._fields_:
            assert table[f"{cname}.{fname}"] == getattr(struct, fname).offset, (cname, fname)
            checked += 1
    assert checked + len(structs) == len(table)
    # Sizes spelled out from docs/dev/hardware.md on x86_64.
    assert ctypes.sizeof(GpuInstanceProfileInfo) == 280
    assert GpuInstanceProfileInfo.memory_size_MB.offset == 16
    assert ctypes.sizeof(ComputeInstanceProfileInfo) == 272
    assert ctypes.sizeof(GpuInstanceInfo) == 24
    assert ctypes.sizeof(ComputeInstanceInfo) == 32
    assert ctypes.sizeof(DeviceAttributes) == 536
    assert ctypes.sizeof(PciInfo) == 48


def test_handles_are_real_pointers_above_4gib(sim_node: simnode.SimNode, lib: Lib) -> None:
    dev0, dev1 = lib.device(0), lib.device(1)
    assert dev0.value is not None and dev1.value is not None
    assert dev0.value > 2**32 and dev1.value > 2**32
    assert dev0.value != dev1.value
    assert lib.device(0).value == dev0.value  # stable per object
    # A truncated handle is rejected, not silently accepted.
    index = U()
    truncated = H(dev0.value & 0xFFFFFFFF)
    assert lib.nvmlDeviceGetIndex(truncated, ctypes.byref(index)) == INVALID_ARGUMENT


def test_root_is_read_on_every_call(
    sim_node_factory: Callable[..., simnode.SimNode], lib: Lib, monkeypatch: pytest.MonkeyPatch
) -> None:
    bw = sim_node_factory(cards=2)
    hypo = sim_node_factory(model="hypo-x8", cards=3)
    count = U()
    monkeypatch.delenv(simnode.ROOT_ENV)
    assert lib.nvmlDeviceGetCount(ctypes.byref(count)) == DRIVER_NOT_LOADED
    monkeypatch.setenv(simnode.ROOT_ENV, str(bw.root))
    assert lib.nvmlDeviceGetCount(ctypes.byref(count)) == SUCCESS and count.value == 2
    bw_dev = lib.device(0)
    monkeypatch.setenv(simnode.ROOT_ENV, str(hypo.root))
    assert lib.nvmlDeviceGetCount(ctypes.byref(count)) == SUCCESS and count.value == 3
    attrs = DeviceAttributes()
    assert lib.nvmlDeviceGetAttributes(lib.device(0), ctypes.byref(attrs)) == SUCCESS
    assert (attrs.cu_count, attrs.memory_size_MB) == (112, 130944)
    # A handle from the other node is not valid here.
    assert lib.nvmlDeviceGetAttributes(bw_dev, ctypes.byref(attrs)) == INVALID_ARGUMENT


# ------------------------------------------------------------------ mode ------------------
def test_mode_switch_refused_while_kfd_held(
    sim_node: simnode.SimNode, lib: Lib, kfd_holder: Callable[..., object]
) -> None:
    kfd_holder(sim_node.kfd)
    assert lib.set_mode(1) == IN_USE
    assert lib.mode() == 0
    assert not sim_node.registry_dir.exists()


def test_mode_switch_allowed_after_holder_exits(
    sim_node: simnode.SimNode, lib: Lib, kfd_holder: Callable[..., object]
) -> None:
    holder = kfd_holder(sim_node.kfd)
    assert lib.set_mode(1) == IN_USE
    holder.release()  # type: ignore[attr-defined]
    assert lib.set_mode(1) == SUCCESS
    assert lib.mode() == 1


def test_mkfd_holder_does_not_block(
    sim_node: simnode.SimNode, lib: Lib, kfd_holder: Callable[..., object]
) -> None:
    kfd_holder(sim_node.mkfd)
    assert lib.set_mode(1) == SUCCESS
    assert lib.set_mode(0) == SUCCESS
    assert lib.mode() == 0


def test_disable_refused_while_any_gpu_instance_exists(bw: simnode.SimNode, lib: Lib) -> None:
    rc, gi = lib.create_gi(lib.device(1), BW_2G, 3, 1)  # a GI without CI, on the 2nd card
    assert rc == SUCCESS
    assert lib.set_mode(0) == IN_USE
    assert lib.mode() == 1
    assert lib.nvmlGpuInstanceDestroy(gi) == SUCCESS
    assert lib.set_mode(0) == SUCCESS
    assert not bw.registry_dir.exists()


def test_enable_writes_dev_files_with_pci_addresses(bw: simnode.SimNode, lib: Lib) -> None:
    reg = bw.registry_dir
    assert (reg / "dev0").read_text() == "0000:09:00.0\n"
    assert (reg / "dev1").read_text() == "0000:0c:00.0\n"
    assert (reg / "gi").is_dir() and (reg / "ci").is_dir()
    assert list((reg / "ci").iterdir()) == []
    mig_cur, mig_pend = U(9), U(9)
    assert (
        lib.nvmlDeviceGetMigMode(lib.device(1), ctypes.byref(mig_cur), ctypes.byref(mig_pend))
        == SUCCESS
    )
    assert (mig_cur.value, mig_pend.value) == (1, 1)


def test_create_refused_with_mode_off(sim_node: simnode.SimNode, lib: Lib) -> None:
    rc, _ignored = lib.create_gi(lib.device(0), BW_2G, 0, 1)
    assert rc == NOT_SUPPORTED
    assert not sim_node.registry_dir.exists()


# ------------------------------------------------------------------ profiles --------------
def test_width_index_profile_query_on_bw(sim_node: simnode.SimNode, lib: Lib) -> None:
    dev = lib.device(0)
    seen = {}
    for width_index in range(4):
        rc, info = lib.profile(dev, width_index)
        seen[width_index] = (
            rc,
            info.id,
            info.name.decode(),
            info.gpu_slice_count,
            info.cu_count,
            info.memory_size_MB,
            info.gi_count_max,
        )
    assert seen[0] == (SUCCESS, 3, "MIG 2g.15gb", 1, 20, 16380, 4)
    assert seen[1] == (SUCCESS, 1, "MIG 4g.31gb", 2, 40, 32760, 2)
    assert seen[2][0] == INVALID_ARGUMENT
    assert seen[3] == (SUCCESS, 0, "MIG 8g.63gb", 4, 80, 65520, 1)


def test_no_profiles_without_virtualization(
    sim_node_factory: Callable[..., simnode.SimNode], lib: Lib
) -> None:
    sim_node_factory(virtualization=False)
    dev = lib.device(0)
    assert [lib.profile(dev, w)[0] for w in range(4)] == [NOT_SUPPORTED] * 4
    count = U()
    assert (
        lib.nvmlDeviceGetGpuInstanceRemainingCapacity(dev, BW_2G, ctypes.byref(count))
        == NOT_SUPPORTED
    )


def test_hypothetical_model_has_another_table(
    sim_node_factory: Callable[..., simnode.SimNode], lib: Lib
) -> None:
    node = sim_node_factory(model="hypo-x8", cards=1)
    assert node.model.hypothetical
    dev = lib.device(0)
    attrs = DeviceAttributes()
    assert lib.nvmlDeviceGetAttributes(dev, ctypes.byref(attrs)) == SUCCESS
    assert attrs.gpu_instance_slice_count == 8
    found = {}
    for w in range(8):
        rc, info = lib.profile(dev, w)
        found[w + 1] = (info.id, info.name.decode()) if rc == SUCCESS else rc
    assert found == {
        1: (19, "MIG 1g.16gb"),
        2: (14, "MIG 2g.32gb"),
        3: (9, "MIG 3g.48gb"),
        4: (5, "MIG 4g.64gb"),
        5: INVALID_ARGUMENT,
        6: INVALID_ARGUMENT,
        7: INVALID_ARGUMENT,
        8: (0, "MIG 8g.128gb"),
    }
    assert lib.set_mode(1) == SUCCESS
    rc, gi = lib.create_gi(dev, 9, 4, 3)
    assert rc == SUCCESS and lib.gi_info(gi).id == 1  # another id base than BW


def test_possible_placements_ignore_occupancy(bw: simnode.SimNode, lib: Lib) -> None:
    dev = lib.device(0)

    def placements(profile_id: int) -> list[tuple[int, int]]:
        arr = (Placement * 32)()
        count = U(32)
        assert (
            lib.nvmlDeviceGetGpuInstancePossiblePlacements(
                dev, profile_id, arr, ctypes.byref(count)
            )
            == SUCCESS
        )
        return [(arr[i].start, arr[i].size) for i in range(count.value)]

    before = {p: placements(p) for p in (BW_2G, BW_4G, BW_8G)}
    assert before == {
        BW_2G: [(0, 1), (1, 1), (2, 1), (3, 1)],
        BW_4G: [(0, 2), (2, 2)],
        BW_8G: [(0, 4)],
    }
    assert lib.create_gi(dev, BW_4G, 0, 2)[0] == SUCCESS
    assert {p: placements(p) for p in (BW_2G, BW_4G, BW_8G)} == before


def test_array_queries_report_insufficient_size(bw: simnode.SimNode, lib: Lib) -> None:
    dev = lib.device(0)
    arr = (Placement * 2)()
    count = U(2)
    assert (
        lib.nvmlDeviceGetGpuInstancePossiblePlacements(dev, BW_2G, arr, ctypes.byref(count))
        == INSUFFICIENT_SIZE
    )
    assert count.value == 4
    for start in range(3):
        assert lib.create_gi(dev, BW_2G, start, 1)[0] == SUCCESS
    rc, _ignored, needed = lib.gis(dev, BW_2G, capacity=2)
    assert (rc, needed) == (INSUFFICIENT_SIZE, 3)


def test_overlap_and_illegal_placements_refused(bw: simnode.SimNode, lib: Lib) -> None:
    dev = lib.device(0)
    assert lib.create_gi(dev, BW_4G, 0, 2)[0] == SUCCESS
    assert lib.create_gi(dev, BW_2G, 1, 1)[0] == INSUFFICIENT_RESOURCES
    assert lib.create_gi(dev, BW_8G, 0, 4)[0] == INSUFFICIENT_RESOURCES
    assert lib.create_gi(dev, BW_4G, 1, 2)[0] == INVALID_ARGUMENT  # not a legal start
    assert lib.create_gi(dev, BW_4G, 2, 1)[0] == INVALID_ARGUMENT  # wrong size
    assert lib.create_gi(dev, 2, 0, 1)[0] == INVALID_ARGUMENT  # no such profile id
    assert lib.create_gi(lib.device(1), BW_2G, 1, 1)[0] == SUCCESS  # other card is free


def test_remaining_capacity_accounts_for_every_profile(bw: simnode.SimNode, lib: Lib) -> None:
    dev = lib.device(0)
    assert [lib.remaining(dev, p) for p in (BW_2G, BW_4G, BW_8G)] == [4, 2, 1]
    assert lib.create_gi(dev, BW_4G, 0, 2)[0] == SUCCESS
    assert [lib.remaining(dev, p) for p in (BW_2G, BW_4G, BW_8G)] == [2, 1, 0]
    assert lib.create_gi(dev, BW_2G, 3, 1)[0] == SUCCESS
    assert [lib.remaining(dev, p) for p in (BW_2G, BW_4G, BW_8G)] == [1, 0, 0]
    assert [lib.remaining(lib.device(1), p) for p in (BW_2G, BW_4G, BW_8G)] == [4, 2, 1]


def test_get_gpu_instances_is_filtered_by_profile(bw: simnode.SimNode, lib: Lib) -> None:
    dev = lib.device(0)
    assert lib.create_gi(dev, BW_4G, 0, 2)[0] == SUCCESS
    assert lib.create_gi(dev, BW_2G, 2, 1)[0] == SUCCESS
    assert lib.create_gi(dev, BW_2G, 3, 1)[0] == SUCCESS
    by_profile = {}
    for profile_id in (BW_2G, BW_4G, BW_8G):
        rc, handles, _ignored = lib.gis(dev, profile_id)
        assert rc == SUCCESS
        by_profile[profile_id] = sorted(lib.gi_info(h).placement.start for h in handles)
    assert by_profile == {BW_2G: [2, 3], BW_4G: [0], BW_8G: []}


# ------------------------------------------------------------------ identity --------------
def test_identity_gaps(sim_node: simnode.SimNode, lib: Lib) -> None:
    dev = lib.device(1)
    pci = PciInfo()
    ctypes.memset(ctypes.byref(pci), 0x41, ctypes.sizeof(pci))
    assert lib.nvmlDeviceGetPciInfo(dev, ctypes.byref(pci)) == SUCCESS
    assert pci.bus_id == b""
    name = ctypes.create_string_buffer(256)
    assert lib.nvmlDeviceGetName(dev, name, 256) == INVALID_ARGUMENT
    out = H()
    assert (
        lib.nvmlDeviceGetHandleByUUID(
            b"GPU-00000000-0000-0000-0000-000000000000", ctypes.byref(out)
        )
        == NOT_SUPPORTED
    )
    assert lib.nvmlDeviceGetHandleByPciBusId(b"0000:0c:00.0", ctypes.byref(out)) == SUCCESS
    assert out.value == dev.value
    index = U()
    assert lib.nvmlDeviceGetIndex(out, ctypes.byref(index)) == SUCCESS and index.value == 1
    assert lib.nvmlDeviceGetHandleByPciBusId(b"0c:00.0", ctypes.byref(out)) == INVALID_ARGUMENT
    assert lib.nvmlDeviceGetHandleByPciBusId(b"0000:0c:00", ctypes.byref(out)) == INVALID_ARGUMENT
    assert lib.nvmlDeviceGetHandleByPciBusId(b"0000:77:00.0", ctypes.byref(out)) == NOT_FOUND
    attrs = DeviceAttributes()
    assert lib.nvmlDeviceGetAttributes(dev, ctypes.byref(attrs)) == SUCCESS
    assert (attrs.index, attrs.cu_count, attrs.memory_size_MB) == (1, 80, 65520)
    assert (attrs.uuid, attrs.name) == (b"", b"")


def test_memory_and_utilization(sim_node: simnode.SimNode, lib: Lib) -> None:
    mem, util = Memory(), Utilization()
    assert lib.nvmlDeviceGetMemoryInfo(lib.device(0), ctypes.byref(mem)) == SUCCESS
    assert mem.total == 65520 * 1024 * 1024 and mem.used + mem.free == mem.total
    assert lib.nvmlDeviceGetUtilizationRates(lib.device(0), ctypes.byref(util)) == SUCCESS
    assert util.gpu <= 100 and util.memory <= 100


# ------------------------------------------------------------------ ids, uuids, files -----
def test_gpu_instance_ids_are_assigned_and_reused_at_once(bw: simnode.SimNode, lib: Lib) -> None:
    dev = lib.device(0)
    handles = []
    for start in range(4):
        rc, gi = lib.create_gi(dev, BW_2G, start, 1)
        assert rc == SUCCESS
        handles.append(gi)
    assert [lib.gi_info(h).id for h in handles] == [3, 4, 5, 6]
    assert lib.nvmlGpuInstanceDestroy(handles[1]) == SUCCESS
    assert lib.nvmlGpuInstanceGetInfo(handles[1], ctypes.byref(GpuInstanceInfo())) == NOT_FOUND
    rc, again = lib.create_gi(dev, BW_2G, 1, 1)
    assert rc == SUCCESS and lib.gi_info(again).id == 4
    by_id = H()
    assert lib.nvmlDeviceGetGpuInstanceById(dev, 6, ctypes.byref(by_id)) == SUCCESS
    assert lib.gi_info(by_id).placement.start == 3
    assert lib.nvmlDeviceGetGpuInstanceById(dev, 7, ctypes.byref(by_id)) == NOT_FOUND
    # The stale handle must not address the new instance that reuses its id.
    assert lib.nvmlGpuInstanceDestroy(handles[1]) == NOT_FOUND


def test_conf_files_are_written_as_the_driver_does(bw: simnode.SimNode, lib: Lib) -> None:
    rc, gi = lib.create_gi(lib.device(1), BW_4G, 2, 2)
    assert rc == SUCCESS
    assert lib.gi_info(gi).id == 3
    gi_conf = bw.gi_dir / "dev1gi3.conf"
    assert gi_conf.read_text() == (
        "pci:            0000:0c:00.0\n"
        "id:             3\n"
        "profile_id:     1\n"
        "cu_count:       40\n"
        "memory_size_MB: 32760\n"
    )
    rc, ci = lib.create_ci(gi)
    assert rc == SUCCESS
    info = ComputeInstanceInfo()
    assert lib.nvmlComputeInstanceGetInfo(ci, ctypes.byref(info)) == SUCCESS
    assert info.id == 0 and info.gpu_instance == gi.value and info.device == lib.device(1).value
    conf = bw.ci_dir / "dev1gi3ci0.conf"
    assert sorted(p.name for p in bw.ci_dir.iterdir()) == ["dev1gi3ci0.conf"]
    lines = conf.read_text().splitlines()
    uuid = conf_uuid(conf)
    assert UUID_RE.match(uuid)
    assert lines == [
        "pci:            0000:0c:00.0",
        "id:             3",
        "profile_id:     1",
        "cu_count:       40",
        "memory_size_MB: 32760",
        "pci:            0000:0c:00.0",
        "gi_id:          3",
        "id:             0",
        f"profile_id:     {info.profile_id}",
        "cu_count:       40",
        f"mig_uuid:       {uuid}",
    ]
    assert uuid not in (bw.sim_dir / "node.conf").read_text()


def test_uuid_is_fresh_on_every_create(bw: simnode.SimNode, lib: Lib) -> None:
    dev = lib.device(0)
    seen = set()
    for _ignored in range(3):
        rc, gi = lib.create_gi(dev, BW_2G, 0, 1)
        assert rc == SUCCESS
        rc, ci = lib.create_ci(gi)
        assert rc == SUCCESS
        seen.add(conf_uuid(bw.ci_conf(0, 3)))
        assert lib.nvmlComputeInstanceDestroy(ci) == SUCCESS
        assert not bw.ci_conf(0, 3).exists()
        assert lib.nvmlGpuInstanceDestroy(gi) == SUCCESS
        assert not (bw.gi_dir / "dev0gi3.conf").exists()
    assert len(seen) == 3


def test_only_one_whole_gi_compute_instance(bw: simnode.SimNode, lib: Lib) -> None:
    rc, gi = lib.create_gi(lib.device(0), BW_4G, 0, 2)
    assert rc == SUCCESS
    prof = lib.whole_ci_profile(gi)
    assert (prof.gpu_slice_count, prof.cu_count) == (2, 40)
    assert lib.create_ci(gi)[0] == SUCCESS
    assert lib.create_ci(gi)[0] == INSUFFICIENT_RESOURCES
    arr = (H * 4)()
    count = U(4)
    assert lib.nvmlGpuInstanceGetComputeInstances(gi, prof.id, arr, ctypes.byref(count)) == SUCCESS
    assert count.value == 1


# ------------------------------------------------------------------ destroy ---------------
def test_gpu_instance_destroy_refused_while_it_has_a_compute_instance(
    bw: simnode.SimNode, lib: Lib
) -> None:
    rc, gi = lib.create_gi(lib.device(0), BW_2G, 2, 1)
    assert rc == SUCCESS
    rc, ci = lib.create_ci(gi)
    assert rc == SUCCESS
    assert lib.nvmlGpuInstanceDestroy(gi) == IN_USE
    assert lib.nvmlComputeInstanceDestroy(ci) == SUCCESS
    assert lib.nvmlGpuInstanceDestroy(gi) == SUCCESS
    ops = bw.ops()
    assert len(ops) == 4
    assert ops[0] == "create_gi card=0 gi=3 profile=3 placement=2:1"
    assert ops[1].startswith("create_ci card=0 gi=3 ci=0 profile=0 uuid=")
    assert ops[2:] == ["destroy_ci card=0 gi=3 ci=0", "destroy_gi card=0 gi=3"]


def test_compute_instance_destroy_refused_while_a_process_holds_it(
    bw: simnode.SimNode, lib: Lib, kfd_holder: Callable[..., object]
) -> None:
    rc, gi = lib.create_gi(lib.device(0), BW_2G, 0, 1)
    assert rc == SUCCESS
    rc, ci = lib.create_ci(gi)
    assert rc == SUCCESS
    holder = kfd_holder(bw.ci_conf(0, 3))
    assert lib.nvmlComputeInstanceDestroy(ci) == IN_USE
    assert bw.ci_conf(0, 3).is_file()
    holder.release()  # type: ignore[attr-defined]
    assert lib.nvmlComputeInstanceDestroy(ci) == SUCCESS
    assert [line.split()[0] for line in bw.ops()] == ["create_gi", "create_ci", "destroy_ci"]


def test_directory_on_a_ci_name_poisons_that_id(bw: simnode.SimNode, lib: Lib) -> None:
    dev = lib.device(0)
    poison = bw.ci_conf(0, 3)
    poison.mkdir()
    for _ignored in range(2):  # ids are reused, so the poison hits again and again
        rc, gi = lib.create_gi(dev, BW_2G, 0, 1)
        assert rc == SUCCESS and lib.gi_info(gi).id == 3
        assert lib.create_ci(gi)[0] == INSUFFICIENT_RESOURCES
        assert lib.nvmlGpuInstanceDestroy(gi) == SUCCESS
    poison.rmdir()
    rc, gi = lib.create_gi(dev, BW_2G, 0, 1)
    assert rc == SUCCESS
    assert lib.create_ci(gi)[0] == SUCCESS
    assert poison.is_file()


def test_reboot_drops_instances_and_registry_keeps_mode(bw: simnode.SimNode, lib: Lib) -> None:
    dev = lib.device(0)
    rc, gi = lib.create_gi(dev, BW_2G, 0, 1)
    assert rc == SUCCESS and lib.create_ci(gi)[0] == SUCCESS
    bw.reboot()
    assert lib.mode() == 1
    # The mode came up again, so the driver recreated its registry: cards, no instances.
    assert (bw.registry_dir / "dev0").read_text() == "0000:09:00.0\n"
    assert list(bw.ci_dir.iterdir()) == [] and list(bw.gi_dir.iterdir()) == []
    assert lib.gis(dev, BW_2G)[1] == []
    assert lib.remaining(dev, BW_2G) == 4
    assert lib.nvmlGpuInstanceDestroy(gi) == NOT_FOUND
    rc, gi = lib.create_gi(dev, BW_2G, 0, 1)
    assert rc == SUCCESS and lib.gi_info(gi).id == 3


def test_mig_device_index_space_is_node_global(bw: simnode.SimNode, lib: Lib) -> None:
    dev0, dev1 = lib.device(0), lib.device(1)
    rc, gi = lib.create_gi(dev1, BW_8G, 0, 4)
    assert rc == SUCCESS and lib.create_ci(gi)[0] == SUCCESS
    rc, gi = lib.create_gi(dev0, BW_2G, 2, 1)
    assert rc == SUCCESS and lib.create_ci(gi)[0] == SUCCESS
    seen = []
    for parent in (dev0, dev1):
        for index in range(2):
            mig, gid = H(), U()
            assert (
                lib.nvmlDeviceGetMigDeviceHandleByIndex(parent, index, ctypes.byref(mig)) == SUCCESS
            )
            assert lib.nvmlDeviceGetGpuInstanceId(mig, ctypes.byref(gid)) == SUCCESS
            attrs = DeviceAttributes()
            assert lib.nvmlDeviceGetAttributes(mig, ctypes.byref(attrs)) == SUCCESS
            seen.append((index, attrs.cu_count))
        assert lib.nvmlDeviceGetMigDeviceHandleByIndex(parent, 2, ctypes.byref(H())) == NOT_FOUND
    # Same answers whichever card is the parent: index 0 is card 0's 2g, index 1 card 1's 8g.
    assert seen == [(0, 20), (1, 80), (0, 20), (1, 80)]
    cid, maxc = U(9), U()
    mig = H()
    assert lib.nvmlDeviceGetMigDeviceHandleByIndex(dev1, 1, ctypes.byref(mig)) == SUCCESS
    assert lib.nvmlDeviceGetComputeInstanceId(mig, ctypes.byref(cid)) == SUCCESS
    assert cid.value == 0
    assert lib.nvmlDeviceGetMaxMigDeviceCount(dev0, ctypes.byref(maxc)) == SUCCESS
    assert maxc.value == 4


# ------------------------------------------------------------------ faults ----------------
def test_fault_fail_next_compute_instance_creates(bw: simnode.SimNode, lib: Lib) -> None:
    bw.fail_next("ci_create", 2, INSUFFICIENT_RESOURCES)
    rc, gi = lib.create_gi(lib.device(0), BW_2G, 0, 1)
    assert rc == SUCCESS
    assert lib.create_ci(gi)[0] == INSUFFICIENT_RESOURCES
    assert lib.create_ci(gi)[0] == INSUFFICIENT_RESOURCES
    assert lib.create_ci(gi)[0] == SUCCESS


def test_fault_unreachable_card(bw: simnode.SimNode, lib: Lib) -> None:
    dev1 = lib.device(1)
    bw.make_unreachable(1)
    out = H()
    assert lib.nvmlDeviceGetHandleByPciBusId(b"0000:0c:00.0", ctypes.byref(out)) == NOT_FOUND
    attrs = DeviceAttributes()
    assert lib.nvmlDeviceGetAttributes(dev1, ctypes.byref(attrs)) == UNKNOWN
    assert lib.profile(dev1, 0)[0] == UNKNOWN
    assert lib.create_gi(dev1, BW_2G, 0, 1)[0] == UNKNOWN
    assert lib.create_gi(lib.device(0), BW_2G, 0, 1)[0] == SUCCESS


def test_fault_driver_error_on_every_call(sim_node: simnode.SimNode, lib: Lib) -> None:
    sim_node.driver_error(DRIVER_NOT_LOADED)
    count = U()
    assert lib.nvmlDeviceGetCount(ctypes.byref(count)) == DRIVER_NOT_LOADED
    sim_node.clear_faults()
    assert lib.nvmlDeviceGetCount(ctypes.byref(count)) == SUCCESS


# ------------------------------------------------------------------ concurrency -----------
RACER = textwrap.dedent("""
    import ctypes, os, sys
    class Placement(ctypes.Structure):
        _fields_ = [("start", ctypes.c_uint), ("size", ctypes.c_uint)]
    lib = ctypes.CDLL(sys.argv[1], mode=os.RTLD_LOCAL)
    lib.nvmlDeviceGetHandleByIndex.argtypes = [ctypes.c_uint, ctypes.POINTER(ctypes.c_void_p)]
    lib.nvmlDeviceCreateGpuInstanceWithPlacement.argtypes = [
        ctypes.c_void_p, ctypes.c_uint, ctypes.POINTER(Placement),
        ctypes.POINTER(ctypes.c_void_p)]
    lib.nvmlGpuInstanceDestroy.argtypes = [ctypes.c_void_p]
    dev = ctypes.c_void_p()
    assert lib.nvmlDeviceGetHandleByIndex(0, ctypes.byref(dev)) == 0
    order = [int(x) for x in sys.argv[2].split(",")]
    rounds = int(sys.argv[3])
    for round_ in range(rounds):
        # A start line per round: both racers begin each round together, on an empty card.
        sys.stdin.readline()
        won = []
        for start in order:
            gi = ctypes.c_void_p()
            rc = lib.nvmlDeviceCreateGpuInstanceWithPlacement(
                dev, 3, ctypes.byref(Placement(start, 1)), ctypes.byref(gi))
            if rc == 0:
                won.append((start, gi))
            elif rc != 23:
                print("unexpected create", rc, flush=True)
        if round_ < rounds - 1:
            for _, gi in won:
                rc = lib.nvmlGpuInstanceDestroy(gi)
                if rc != 0:
                    print("unexpected destroy", rc, flush=True)
            print("round done", flush=True)
    print(" ".join(str(start) for start, _ in won), flush=True)
""")
ROUNDS = 15


def replay_ops(ops: list[str]) -> int:
    """Replays ops.log; fails if two live GPU instances ever shared a slice or an id."""
    live: dict[tuple[int, int], set[int]] = {}
    creates = 0
    for line in ops:
        fields = dict(part.split("=", 1) for part in line.split()[1:])
        key = (int(fields["card"]), int(fields["gi"]))
        if line.startswith("create_gi"):
            start, size = (int(x) for x in fields["placement"].split(":"))
            slices = set(range(start, start + size))
            assert key not in live, f"id reused while live: {line}"
            for (card, _ignored), used in live.items():
                assert card != key[0] or not used & slices, f"slice shared: {line}"
            live[key] = slices
            creates += 1
        elif line.startswith("destroy_gi"):
            assert live.pop(key, None) is not None, f"destroyed twice: {line}"
    return creates


def test_concurrent_creates_from_two_processes_never_share_a_slice(
    bw: simnode.SimNode, lib: Lib
) -> None:
    racers = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, str(simnode.LIB_PATH), order, str(ROUNDS)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=bw.env(),
        )
        for order in ("0,1,2,3", "3,2,1,0")
    ]
    # Rounds are released together: without that one racer could still hold the slices it won
    # while the other ran through several rounds, and fewer than 4 creates per round would be
    # logged although no slice was ever shared.
    for round_ in range(ROUNDS):
        for racer in racers:
            assert racer.stdin is not None
            racer.stdin.write("go\n")
            racer.stdin.flush()
        if round_ < ROUNDS - 1:
            for racer in racers:
                assert racer.stdout is not None
                line = racer.stdout.readline()
                assert line == "round done\n", line
    results = [racer.communicate(timeout=120)[0] for racer in racers]
    assert all("unexpected" not in r for r in results), results
    won = [[int(x) for x in r.split()] for r in results]
    assert sorted(won[0] + won[1]) == [0, 1, 2, 3]  # every slice given once, to one process
    rc, handles, _ignored = lib.gis(lib.device(0), BW_2G)
    assert rc == SUCCESS
    assert sorted(lib.gi_info(h).placement.start for h in handles) == [0, 1, 2, 3]
    assert sorted(lib.gi_info(h).id for h in handles) == [3, 4, 5, 6]
    assert replay_ops(bw.ops()) >= 4 * ROUNDS


def test_threads_in_one_process_never_share_a_slice(bw: simnode.SimNode, lib: Lib) -> None:
    dev = lib.device(0)
    won: list[int] = []
    unexpected: list[int] = []
    guard = threading.Lock()
    go = threading.Event()

    def race(order: list[int]) -> None:
        go.wait()
        for start in order:
            rc, _ignored = lib.create_gi(dev, BW_2G, start, 1)
            with guard:
                if rc == SUCCESS:
                    won.append(start)
                elif rc != INSUFFICIENT_RESOURCES:
                    unexpected.append(rc)

    threads = [
        threading.Thread(target=race, args=(order,))
        for order in ([0, 1, 2, 3], [3, 2, 1, 0], [1, 3, 0, 2], [2, 0, 3, 1])
    ]
    for t in threads:
        t.start()
    go.set()
    for t in threads:
        t.join(timeout=60)
    assert unexpected == []
    assert sorted(won) == [0, 1, 2, 3]
    assert replay_ops(bw.ops()) == 4


@pytest.mark.parametrize("op", simnode.FAULT_OPS)
def test_every_fail_fault_fails_once_and_changes_nothing(
    bw: simnode.SimNode, lib: Lib, op: str
) -> None:
    dev = lib.device(0)
    gi = ci = H()
    if op in ("ci_create", "gi_destroy", "ci_destroy"):
        rc, gi = lib.create_gi(dev, BW_2G, 0, 1)
        assert rc == SUCCESS
    if op == "ci_destroy":
        rc, ci = lib.create_ci(gi)
        assert rc == SUCCESS
    before = (bw.status().gpu_instances, bw.status().compute_instances, bw.ops())
    bw.fail_next(op, 1, 42)

    def attempt() -> int:
        if op == "gi_create":
            return lib.create_gi(dev, BW_2G, 1, 1)[0]
        if op == "ci_create":
            return lib.create_ci(gi)[0]
        if op == "gi_destroy":
            return int(lib.nvmlGpuInstanceDestroy(gi))
        if op == "ci_destroy":
            return int(lib.nvmlComputeInstanceDestroy(ci))
        return lib.set_mode(1)

    assert attempt() == 42
    assert (bw.status().gpu_instances, bw.status().compute_instances, bw.ops()) == before
    assert attempt() == SUCCESS
    assert bw.status().faults == []


def best_fit_count(spec: simnode.ProfileSpec, occupied: set[int], existing: int) -> int:
    """Brute force: most disjoint free legal placements of one profile (test oracle)."""
    free = [
        set(range(s, s + spec.slices))
        for s in spec.starts
        if not set(range(s, s + spec.slices)) & occupied
    ]
    best = 0
    for r in range(len(free) + 1):
        for combo in itertools.combinations(free, r):
            if sum(len(c) for c in combo) == len(set().union(*combo)):
                best = max(best, r)
    return min(best, spec.gi_count_max - existing)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_remaining_capacity_matches_brute_force_on_random_layouts(
    sim_node_factory: Callable[..., simnode.SimNode], lib: Lib, seed: int
) -> None:
    node = sim_node_factory(model="hypo-x8", cards=1)
    assert lib.set_mode(1) == SUCCESS
    dev = lib.device(0)
    rng = random.Random(seed)
    live: dict[int, tuple[H, simnode.ProfileSpec, int]] = {}
    for _ignored in range(40):
        if live and rng.random() < 0.4:
            gid = rng.choice(sorted(live))
            assert lib.nvmlGpuInstanceDestroy(live.pop(gid)[0]) == SUCCESS
        else:
            spec = rng.choice(node.model.profiles)
            start = rng.choice(spec.starts)
            occupied = {s for _gi, p, st in live.values() for s in range(st, st + p.slices)}
            rc, gi = lib.create_gi(dev, spec.id, start, spec.slices)
            fits = not set(range(start, start + spec.slices)) & occupied
            assert rc == (SUCCESS if fits else INSUFFICIENT_RESOURCES)
            if rc == SUCCESS:
                live[lib.gi_info(gi).id] = (gi, spec, start)
        occupied = {s for _gi, p, st in live.values() for s in range(st, st + p.slices)}
        for spec in node.model.profiles:
            existing = sum(1 for _gi, p, _start in live.values() if p.id == spec.id)
            assert lib.remaining(dev, spec.id) == best_fit_count(spec, occupied, existing)
