"""The ctypes binding against the simulator's shared library (no Python stand-in)."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from simnode import SimNode

if TYPE_CHECKING:
    from collections.abc import Callable

    SimNodeFactory = Callable[..., SimNode]
    HoldFactory = Callable[[str], Any]
    SimBuild = Any
import simnode
from ansible_collections.hygon.dcu.plugins.module_utils import hydmi
from ansible_collections.hygon.dcu.plugins.module_utils.hydmi import (
    HydmiError,
    HydmiLibrary,
    InstanceInUse,
    LibraryUnusable,
    classify,
    error_for,
    profile_name,
)
from ansible_collections.hygon.dcu.plugins.module_utils.node import Node
from ansible_collections.hygon.dcu.plugins.module_utils.shared_library import library_candidates

COLLECTIONS = Path(__file__).resolve().parents[4] / ".venv" / "collections"

STRUCTS = {
    "hydmiGpuInstanceProfileInfo_t": hydmi.GpuInstanceProfileInfo,
    "hydmiComputeInstanceProfileInfo_t": hydmi.ComputeInstanceProfileInfo,
    "hydmiGpuInstancePlacement_t": hydmi.PlacementStruct,
    "hydmiGpuInstanceInfo_t": hydmi.GpuInstanceInfo,
    "hydmiComputeInstanceInfo_t": hydmi.ComputeInstanceInfo,
    "hydmiDeviceAttributes_t": hydmi.DeviceAttributes,
}


class _LayoutEntry(ctypes.Structure):
    _fields_ = (("name", ctypes.c_char_p), ("value", ctypes.c_ulong))


def _compiled_layout(library: Path) -> dict[str, int]:
    # hydmiSimLayout exists only in the simulator: the C compiler's view of the vendor structs.
    dll = ctypes.CDLL(str(library), mode=os.RTLD_LOCAL)
    table = (_LayoutEntry * 200).in_dll(dll, "hydmiSimLayout")
    layout: dict[str, int] = {}
    for entry in table:
        if entry.name is None:
            break
        layout[entry.name.decode()] = entry.value
    return layout


def test_struct_layouts_match_the_compiled_header(sim_build: SimBuild) -> None:
    layout = _compiled_layout(sim_build.library)
    checked = 0
    for key, value in layout.items():
        struct_name, member = key.split(".", 1)
        struct = STRUCTS.get(struct_name)
        if struct is None:
            continue  # a vendor struct the binding does not use
        if member == "sizeof":
            assert ctypes.sizeof(struct) == value, key
        else:
            assert getattr(struct, member).offset == value, key
        checked += 1
    assert checked == 35  # every member of every struct the binding declares
    assert {key.split(".", 1)[0] for key in layout} >= set(STRUCTS)


_PROBE = (
    "import ctypes, sys\n"
    "from ansible_collections.hygon.dcu.plugins.module_utils.hydmi import HydmiLibrary\n"
    "library = HydmiLibrary(sys.argv[1])\n"
    "print(library.path)\n"
    "print(library.device_count())\n"
    "print(hasattr(ctypes.CDLL(None), 'nvmlDeviceGetCount'))\n"
)


def _load_in_fresh_process(root: Path) -> list[str]:
    # A fresh process: once loaded, dlopen would answer any later request by soname.
    completed = subprocess.run(
        [sys.executable, "-c", _PROBE, str(root)],
        env={**os.environ, "PYTHONPATH": str(COLLECTIONS), "LD_LIBRARY_PATH": ""},
        capture_output=True,
        text=True,
        check=True,
    )
    return completed.stdout.split()


def test_loads_rtld_local_from_host_root(sim_node: SimNode) -> None:
    path, count, global_symbol = _load_in_fresh_process(sim_node.root)
    assert path == str(sim_node.root / "opt/hyhal/lib/libhydmi_mig.so.1")
    assert count == "2"
    assert global_symbol == "False"  # RTLD_LOCAL: NVML names stay out of the global namespace


def test_falls_back_to_dtk_lib(sim_node: SimNode) -> None:
    hyhal = sim_node.root / "opt/hyhal/lib"
    for name in ("libhydmi_mig.so.1", "libhydmi_mig.so"):
        (hyhal / name).unlink()
    (sim_node.root / "opt/dtk/lib/libhydmi_mig.so").symlink_to(simnode.LIB_PATH)
    path, count, _global = _load_in_fresh_process(sim_node.root)
    assert path == str(sim_node.root / "opt/dtk/lib/libhydmi_mig.so")
    assert count == "2"


def test_search_order() -> None:
    assert library_candidates(hydmi.LIBRARY_NAMES, "/h") == [
        "libhydmi_mig.so.1",
        "libhydmi_mig.so",
        "/h/opt/hyhal/lib/libhydmi_mig.so.1",
        "/h/opt/hyhal/lib/libhydmi_mig.so",
        "/h/opt/dtk/lib/libhydmi_mig.so.1",
        "/h/opt/dtk/lib/libhydmi_mig.so",
    ]
    assert library_candidates(hydmi.LIBRARY_NAMES, "/", "/x/lib.so") == ["/x/lib.so"]


def test_explicit_path_is_the_only_candidate(sim_node: SimNode, sim_build: SimBuild) -> None:
    library = HydmiLibrary(str(sim_node.root), library_path=str(sim_node.root / "nope.so"))
    assert library.candidates == [str(sim_node.root / "nope.so")]
    with pytest.raises(LibraryUnusable) as caught:
        library.device_count()
    assert caught.value.code == hydmi.LIBRARY_NOT_FOUND
    assert caught.value.call == "nvmlDeviceGetCount"
    explicit = HydmiLibrary("/nonexistent-root", library_path=str(sim_build.library))
    assert explicit.device_count() == 2


def test_missing_symbol_fails_that_call_only(
    sim_node: SimNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The binding calls nothing the library lacks; nvmlDeviceGetUUID is a symbol the measured
    # library (and so the simulator) does not export, declared here to reach that path.
    signature = (ctypes.c_void_p, ctypes.c_char_p, ctypes.c_uint)
    monkeypatch.setitem(hydmi.SIGNATURES, "nvmlDeviceGetUUID", signature)
    library = HydmiLibrary(str(sim_node.root))
    device = library.device_by_index(0)
    buffer = ctypes.create_string_buffer(256)
    with pytest.raises(LibraryUnusable) as caught:
        library.call("nvmlDeviceGetUUID", device, buffer, len(buffer))
    assert (caught.value.call, caught.value.code) == ("nvmlDeviceGetUUID", 13)
    assert classify(caught.value.code) == "unusable"
    assert library.device_count() == 2
    assert library.device_index(device) == 0


def test_handles_keep_full_pointer_width(sim_node: SimNode) -> None:
    library = HydmiLibrary(str(sim_node.root))
    sim_node.switch_mode()
    device = library.device_by_index(1)
    assert device.value is not None and device.value > 2**32  # simulator maps handles high
    gi = library.create_gpu_instance(device, 3, 2, 1)
    listed = library.gpu_instances(device, 3)
    assert len(listed) == 1 and isinstance(listed[0], ctypes.c_void_p)
    assert listed[0].value == gi.value
    info = library.gpu_instance_info(listed[0])  # an array element used as a handle
    assert (info.id, info.profile_id, info.placement.start, info.placement.size) == (3, 3, 2, 1)
    assert info.device == device.value


def test_pci_lookup_needs_the_full_address(sim_node: SimNode) -> None:
    library = HydmiLibrary(str(sim_node.root))
    with pytest.raises(HydmiError) as short:
        library.device_by_pci("09:00.0")
    assert short.value.code == hydmi.INVALID_ARGUMENT
    with pytest.raises(HydmiError) as unknown:
        library.device_by_pci("0000:ff:00.0")
    assert unknown.value.code == hydmi.NOT_FOUND
    assert library.device_index(library.device_by_pci("0000:0c:00.0")) == 1


def test_width_index_sweep_has_a_gap(sim_node: SimNode) -> None:
    library = HydmiLibrary(str(sim_node.root))
    device = library.device_by_index(0)
    ids = []
    for width_index in range(4):
        try:
            ids.append(library.gpu_instance_profile(device, width_index).id)
        except HydmiError as exc:
            assert exc.code == hydmi.INVALID_ARGUMENT
            ids.append(None)
    assert ids == [3, 1, None, 0]
    assert profile_name(library.gpu_instance_profile(device, 1).name) == "4g.31gb"


def test_driver_not_loaded_is_unusable(sim_node: SimNode) -> None:
    sim_node.driver_error(hydmi.DRIVER_NOT_LOADED)
    library = HydmiLibrary(str(sim_node.root))
    with pytest.raises(LibraryUnusable) as caught:
        library.system_mig_mode()
    assert caught.value.code == hydmi.DRIVER_NOT_LOADED


def test_error_types_and_classification() -> None:
    assert isinstance(error_for("x", hydmi.IN_USE), InstanceInUse)
    assert isinstance(error_for("x", hydmi.LIB_RM_VERSION_MISMATCH), LibraryUnusable)
    plain = error_for("x", hydmi.INSUFFICIENT_RESOURCES)
    assert not isinstance(plain, (InstanceInUse, LibraryUnusable))
    assert [classify(c) for c in (3, 6, 2)] == ["absent"] * 3
    assert [classify(c) for c in (12, 13, 9, 18)] == ["unusable"] * 4
    assert [classify(c) for c in (0, 1, 4, 7, 10, 19, 20, 23, 999)] == ["error"] * 9
    error = error_for("nvmlGpuInstanceDestroy", 19)
    assert (error.call, error.code) == ("nvmlGpuInstanceDestroy", 19)
    assert "IN_USE" in str(error) and "nvmlGpuInstanceDestroy" in str(error)


def test_unusable_library_means_not_partitioned(sim_node: SimNode, tmp_path: Path) -> None:
    enabled = Node(str(sim_node.root))
    sim_node.switch_mode()
    assert enabled.partitioned()
    broken = Node(str(sim_node.root), library_path=str(tmp_path / "missing.so"))
    assert broken.library.load_error is not None
    assert not broken.partitioned()
    mode = broken.mode()
    # The registry's dev<N> files still say the mode is on: that is the fallback reading.
    assert (mode.current, mode.pending, mode.source) == (True, None, "registry")
    assert mode.error is not None and "LIBRARY_NOT_FOUND" in mode.error
    with pytest.raises(LibraryUnusable):
        broken.cards()


def test_instance_calls_on_two_cards(sim_node: SimNode) -> None:
    library = HydmiLibrary(str(sim_node.root))
    sim_node.switch_mode()
    assert library.system_mig_mode() == (1, 1)
    card0, card1 = library.device_by_index(0), library.device_by_index(1)
    attributes = library.device_attributes(card0)
    assert (attributes.cu_count, attributes.gpu_instance_slice_count) == (80, 4)
    # One 4g.31gb instance per card, each with its whole-GI compute instance.
    for device in (card0, card1):
        gpu_instance = library.create_gpu_instance(device, 1, 2, 2)
        compute_profile = library.compute_instance_profile(gpu_instance, 1)
        assert (compute_profile.gpu_slice_count, compute_profile.cu_count) == (2, 40)
        with pytest.raises(HydmiError):
            library.compute_instance_profile(gpu_instance, 0)  # not offered: a gap
        compute = library.create_compute_instance(gpu_instance, compute_profile.id)
        info = library.compute_instance_info(compute)
        assert info.gpu_instance == gpu_instance.value and info.id == 0
        assert [c.value for c in library.compute_instances(gpu_instance, compute_profile.id)] == [
            compute.value
        ]
    assert library.remaining_capacity(card0, 3) == 2
    gi = library.gpu_instance_by_id(card1, 3)
    with pytest.raises(InstanceInUse):
        library.destroy_gpu_instance(gi)  # its compute instance still exists
