# Copyright: hygon.dcu contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""ctypes binding to the vendor's partition management library, ``libhydmi_mig``.

The library exports NVML's symbol names with its own struct layouts, so nothing here may come
from an NVML binding: the structs below follow the vendor header (docs/dev/hardware.md).
Loading the library is its init (there is no init/shutdown call). Every symbol is resolved on
the one RTLD_LOCAL handle the first time it is called; a missing symbol fails that call only.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable
from typing import Any

# Return codes (NVML's numbers).
SUCCESS = 0
UNINITIALIZED = 1
INVALID_ARGUMENT = 2
NOT_SUPPORTED = 3
NO_PERMISSION = 4
NOT_FOUND = 6
INSUFFICIENT_SIZE = 7
DRIVER_NOT_LOADED = 9
TIMEOUT = 10
LIBRARY_NOT_FOUND = 12
FUNCTION_NOT_FOUND = 13
LIB_RM_VERSION_MISMATCH = 18
IN_USE = 19
MEMORY = 20
INSUFFICIENT_RESOURCES = 23
UNKNOWN = 999

CODE_NAMES: dict[int, str] = {
    SUCCESS: "SUCCESS",
    UNINITIALIZED: "UNINITIALIZED",
    INVALID_ARGUMENT: "INVALID_ARGUMENT",
    NOT_SUPPORTED: "NOT_SUPPORTED",
    NO_PERMISSION: "NO_PERMISSION",
    NOT_FOUND: "NOT_FOUND",
    INSUFFICIENT_SIZE: "INSUFFICIENT_SIZE",
    DRIVER_NOT_LOADED: "DRIVER_NOT_LOADED",
    TIMEOUT: "TIMEOUT",
    LIBRARY_NOT_FOUND: "LIBRARY_NOT_FOUND",
    FUNCTION_NOT_FOUND: "FUNCTION_NOT_FOUND",
    LIB_RM_VERSION_MISMATCH: "LIB_RM_VERSION_MISMATCH",
    IN_USE: "IN_USE",
    MEMORY: "MEMORY",
    INSUFFICIENT_RESOURCES: "INSUFFICIENT_RESOURCES",
    UNKNOWN: "UNKNOWN",
}

# Answers that mean "this card/profile has no such thing": a gap, not a fault.
ABSENT_CODES = frozenset({NOT_SUPPORTED, NOT_FOUND, INVALID_ARGUMENT})
# Answers that mean the library cannot serve us at all: the node counts as not partitioned.
UNUSABLE_CODES = frozenset(
    {LIBRARY_NOT_FOUND, FUNCTION_NOT_FOUND, DRIVER_NOT_LOADED, LIB_RM_VERSION_MISMATCH}
)

COMPUTE_ENGINE_PROFILE_SHARED = 0

# The vendor's array queries fill a caller buffer; 32 entries cover every measured card.
ARRAY_CAPACITY = 32

LIBRARY_NAMES = ("libhydmi_mig.so.1", "libhydmi_mig.so")
# Tried under host_root when the dynamic loader's default search fails.
LIBRARY_DIRS = ("/opt/hyhal/lib", "/opt/dtk/lib")


def code_name(code: int) -> str:
    return CODE_NAMES.get(code, f"code {code}")


def classify(code: int) -> str:
    """Return ``absent``, ``unusable`` or ``error`` for a library return code."""
    if code in ABSENT_CODES:
        return "absent"
    if code in UNUSABLE_CODES:
        return "unusable"
    return "error"


class HydmiError(Exception):
    """A library call answered something other than SUCCESS."""

    def __init__(self, call: str, code: int, detail: str = "") -> None:
        self.call = call
        self.code = code
        self.detail = detail
        text = f"{call} returned {code_name(code)} ({code})"
        if detail:
            text = f"{text}: {detail}"
        super().__init__(text)

    @property
    def kind(self) -> str:
        return classify(self.code)


class InstanceInUse(HydmiError):
    """IN_USE: a process holds the instance, or a GPU instance still has compute instances."""


class LibraryUnusable(HydmiError):
    """The library cannot be loaded or cannot serve us (missing symbol, no driver, version)."""


def error_for(call: str, code: int, detail: str = "") -> HydmiError:
    if code == IN_USE:
        return InstanceInUse(call, code, detail)
    if code in UNUSABLE_CODES:
        return LibraryUnusable(call, code, detail)
    return HydmiError(call, code, detail)


# Struct layouts, C order, ``unsigned int`` unless noted (docs/dev/hardware.md, "Library").
class GpuInstanceProfileInfo(ctypes.Structure):
    _fields_ = (
        ("id", ctypes.c_uint),
        ("gi_count_max", ctypes.c_uint),
        ("cu_count", ctypes.c_uint),
        ("gpu_slice_count", ctypes.c_uint),
        ("memory_size_MB", ctypes.c_ulonglong),  # really MiB
        ("name", ctypes.c_char * 256),
    )


class ComputeInstanceProfileInfo(ctypes.Structure):
    _fields_ = (
        ("id", ctypes.c_uint),
        ("ci_count_max", ctypes.c_uint),
        ("cu_count", ctypes.c_uint),
        ("gpu_slice_count", ctypes.c_uint),
        ("name", ctypes.c_char * 256),
    )


class PlacementStruct(ctypes.Structure):
    _fields_ = (("start", ctypes.c_uint), ("size", ctypes.c_uint))


class GpuInstanceInfo(ctypes.Structure):
    _fields_ = (
        ("device", ctypes.c_void_p),
        ("id", ctypes.c_uint),
        ("profile_id", ctypes.c_uint),
        ("placement", PlacementStruct),
    )


class ComputeInstanceInfo(ctypes.Structure):
    _fields_ = (
        ("device", ctypes.c_void_p),
        ("gpu_instance", ctypes.c_void_p),
        ("id", ctypes.c_uint),
        ("profile_id", ctypes.c_uint),
        ("placement", PlacementStruct),
    )


class DeviceAttributes(ctypes.Structure):
    _fields_ = (
        ("index", ctypes.c_uint),
        ("cu_count", ctypes.c_uint),
        ("memory_size_MB", ctypes.c_ulonglong),
        ("uuid", ctypes.c_char * 256),
        ("name", ctypes.c_char * 256),
        ("gpu_instance_slice_count", ctypes.c_uint),
        ("compute_instance_slice_count", ctypes.c_uint),
    )


_P = ctypes.POINTER
_HANDLE = ctypes.c_void_p
_UINT = ctypes.c_uint

# Every symbol we call, with its argument types. Handles are c_void_p so 64-bit pointers survive.
SIGNATURES: dict[str, tuple[Any, ...]] = {
    "nvmlGetSystemMigMode": (_P(_UINT), _P(_UINT)),
    "nvmlDeviceGetCount": (_P(_UINT),),
    "nvmlDeviceGetHandleByIndex": (_UINT, _P(_HANDLE)),
    "nvmlDeviceGetHandleByPciBusId": (ctypes.c_char_p, _P(_HANDLE)),
    "nvmlDeviceGetIndex": (_HANDLE, _P(_UINT)),
    "nvmlDeviceGetAttributes": (_HANDLE, _P(DeviceAttributes)),
    "nvmlDeviceGetGpuInstanceProfileInfo": (_HANDLE, _UINT, _P(GpuInstanceProfileInfo)),
    "nvmlDeviceGetGpuInstancePossiblePlacements": (
        _HANDLE,
        _UINT,
        _P(PlacementStruct),
        _P(_UINT),
    ),
    "nvmlDeviceGetGpuInstanceRemainingCapacity": (_HANDLE, _UINT, _P(_UINT)),
    "nvmlDeviceCreateGpuInstanceWithPlacement": (
        _HANDLE,
        _UINT,
        _P(PlacementStruct),
        _P(_HANDLE),
    ),
    "nvmlDeviceGetGpuInstances": (_HANDLE, _UINT, _P(_HANDLE), _P(_UINT)),
    "nvmlDeviceGetGpuInstanceById": (_HANDLE, _UINT, _P(_HANDLE)),
    "nvmlGpuInstanceGetInfo": (_HANDLE, _P(GpuInstanceInfo)),
    "nvmlGpuInstanceGetComputeInstanceProfileInfo": (
        _HANDLE,
        _UINT,
        _UINT,
        _P(ComputeInstanceProfileInfo),
    ),
    "nvmlGpuInstanceCreateComputeInstance": (_HANDLE, _UINT, _P(_HANDLE)),
    "nvmlGpuInstanceGetComputeInstances": (_HANDLE, _UINT, _P(_HANDLE), _P(_UINT)),
    "nvmlGpuInstanceDestroy": (_HANDLE,),
    "nvmlComputeInstanceGetInfo": (_HANDLE, _P(ComputeInstanceInfo)),
    "nvmlComputeInstanceDestroy": (_HANDLE,),
}


def library_candidates(host_root: str = "/", library_path: str | None = None) -> list[str]:
    """Paths handed to dlopen, in order. An explicit path is the only candidate."""
    if library_path:
        return [library_path]
    candidates = list(LIBRARY_NAMES)
    for directory in LIBRARY_DIRS:
        base = os.path.join(host_root, directory.lstrip("/"))
        candidates.extend(os.path.join(base, name) for name in LIBRARY_NAMES)
    return candidates


def _text(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode("utf-8", errors="replace")


class HydmiLibrary:
    """One loaded copy of the library. Methods raise HydmiError subclasses, never return codes."""

    def __init__(self, host_root: str = "/", library_path: str | None = None) -> None:
        self.host_root = host_root
        self.candidates = library_candidates(host_root, library_path)
        self.path: str | None = None
        self._dll: ctypes.CDLL | None = None
        self._functions: dict[str, Callable[..., int]] = {}
        self._load_error: LibraryUnusable | None = None
        self._load()

    def _load(self) -> None:
        failures: list[str] = []
        for candidate in self.candidates:
            try:
                self._dll = ctypes.CDLL(candidate, mode=os.RTLD_LOCAL)
            except OSError as exc:
                failures.append(f"{candidate}: {exc}")
                continue
            self.path = candidate
            return
        self._load_error = LibraryUnusable(
            "dlopen",
            LIBRARY_NOT_FOUND,
            "tried " + "; ".join(failures),
        )

    @property
    def loaded(self) -> bool:
        return self._dll is not None

    @property
    def load_error(self) -> LibraryUnusable | None:
        return self._load_error

    def _function(self, name: str) -> Callable[..., int]:
        cached = self._functions.get(name)
        if cached is not None:
            return cached
        if self._dll is None:
            detail = self._load_error.detail if self._load_error else "not loaded"
            raise LibraryUnusable(name, LIBRARY_NOT_FOUND, detail)
        try:
            function = getattr(self._dll, name)
        except AttributeError:
            raise LibraryUnusable(name, FUNCTION_NOT_FOUND, "symbol not exported") from None
        function.argtypes = SIGNATURES[name]
        function.restype = ctypes.c_int
        self._functions[name] = function
        return function  # type: ignore[no-any-return]

    def call(self, name: str, *args: Any) -> None:
        code = int(self._function(name)(*args))
        if code != SUCCESS:
            raise error_for(name, code)

    def _array(self, name: str, *leading: Any) -> list[ctypes.c_void_p]:
        buffer = (ctypes.c_void_p * ARRAY_CAPACITY)()
        count = ctypes.c_uint(ARRAY_CAPACITY)
        self.call(name, *leading, buffer, ctypes.byref(count))
        if count.value > ARRAY_CAPACITY:
            raise HydmiError(name, INSUFFICIENT_SIZE, f"count {count.value}")
        # Array elements come back as Python ints; re-wrap so later calls pass full pointers.
        return [ctypes.c_void_p(buffer[i]) for i in range(count.value)]

    # System
    def system_mig_mode(self) -> tuple[int, int]:
        current, pending = ctypes.c_uint(), ctypes.c_uint()
        self.call("nvmlGetSystemMigMode", ctypes.byref(current), ctypes.byref(pending))
        return current.value, pending.value

    # Devices
    def device_count(self) -> int:
        count = ctypes.c_uint()
        self.call("nvmlDeviceGetCount", ctypes.byref(count))
        return count.value

    def device_by_index(self, index: int) -> ctypes.c_void_p:
        handle = ctypes.c_void_p()
        self.call("nvmlDeviceGetHandleByIndex", index, ctypes.byref(handle))
        return handle

    def device_by_pci(self, bus_id: str) -> ctypes.c_void_p:
        handle = ctypes.c_void_p()
        self.call("nvmlDeviceGetHandleByPciBusId", bus_id.encode(), ctypes.byref(handle))
        return handle

    def device_index(self, device: ctypes.c_void_p) -> int:
        index = ctypes.c_uint()
        self.call("nvmlDeviceGetIndex", device, ctypes.byref(index))
        return index.value

    def device_attributes(self, device: ctypes.c_void_p) -> DeviceAttributes:
        info = DeviceAttributes()
        self.call("nvmlDeviceGetAttributes", device, ctypes.byref(info))
        return info

    # GPU instances
    def gpu_instance_profile(
        self, device: ctypes.c_void_p, width_index: int
    ) -> GpuInstanceProfileInfo:
        info = GpuInstanceProfileInfo()
        self.call("nvmlDeviceGetGpuInstanceProfileInfo", device, width_index, ctypes.byref(info))
        return info

    def possible_placements(
        self, device: ctypes.c_void_p, profile_id: int
    ) -> list[tuple[int, int]]:
        buffer = (PlacementStruct * ARRAY_CAPACITY)()
        count = ctypes.c_uint(ARRAY_CAPACITY)
        name = "nvmlDeviceGetGpuInstancePossiblePlacements"
        self.call(name, device, profile_id, buffer, ctypes.byref(count))
        if count.value > ARRAY_CAPACITY:
            raise HydmiError(name, INSUFFICIENT_SIZE, f"count {count.value}")
        return [(buffer[i].start, buffer[i].size) for i in range(count.value)]

    def remaining_capacity(self, device: ctypes.c_void_p, profile_id: int) -> int:
        count = ctypes.c_uint()
        self.call(
            "nvmlDeviceGetGpuInstanceRemainingCapacity", device, profile_id, ctypes.byref(count)
        )
        return count.value

    def create_gpu_instance(
        self, device: ctypes.c_void_p, profile_id: int, start: int, size: int
    ) -> ctypes.c_void_p:
        placement = PlacementStruct(start, size)
        handle = ctypes.c_void_p()
        self.call(
            "nvmlDeviceCreateGpuInstanceWithPlacement",
            device,
            profile_id,
            ctypes.byref(placement),
            ctypes.byref(handle),
        )
        return handle

    def gpu_instances(self, device: ctypes.c_void_p, profile_id: int) -> list[ctypes.c_void_p]:
        return self._array("nvmlDeviceGetGpuInstances", device, profile_id)

    def gpu_instance_by_id(self, device: ctypes.c_void_p, gpu_instance_id: int) -> ctypes.c_void_p:
        handle = ctypes.c_void_p()
        self.call("nvmlDeviceGetGpuInstanceById", device, gpu_instance_id, ctypes.byref(handle))
        return handle

    def gpu_instance_info(self, gpu_instance: ctypes.c_void_p) -> GpuInstanceInfo:
        info = GpuInstanceInfo()
        self.call("nvmlGpuInstanceGetInfo", gpu_instance, ctypes.byref(info))
        return info

    def compute_instance_profile(
        self,
        gpu_instance: ctypes.c_void_p,
        profile_index: int,
        engine_profile: int = COMPUTE_ENGINE_PROFILE_SHARED,
    ) -> ComputeInstanceProfileInfo:
        info = ComputeInstanceProfileInfo()
        self.call(
            "nvmlGpuInstanceGetComputeInstanceProfileInfo",
            gpu_instance,
            profile_index,
            engine_profile,
            ctypes.byref(info),
        )
        return info

    def create_compute_instance(
        self, gpu_instance: ctypes.c_void_p, profile_id: int
    ) -> ctypes.c_void_p:
        handle = ctypes.c_void_p()
        self.call(
            "nvmlGpuInstanceCreateComputeInstance",
            gpu_instance,
            profile_id,
            ctypes.byref(handle),
        )
        return handle

    def compute_instances(
        self, gpu_instance: ctypes.c_void_p, profile_id: int
    ) -> list[ctypes.c_void_p]:
        return self._array("nvmlGpuInstanceGetComputeInstances", gpu_instance, profile_id)

    def destroy_gpu_instance(self, gpu_instance: ctypes.c_void_p) -> None:
        self.call("nvmlGpuInstanceDestroy", gpu_instance)

    def compute_instance_info(self, compute_instance: ctypes.c_void_p) -> ComputeInstanceInfo:
        info = ComputeInstanceInfo()
        self.call("nvmlComputeInstanceGetInfo", compute_instance, ctypes.byref(info))
        return info

    def destroy_compute_instance(self, compute_instance: ctypes.c_void_p) -> None:
        self.call("nvmlComputeInstanceDestroy", compute_instance)


def profile_name(raw: bytes | str) -> str:
    """``MIG 2g.15gb`` → ``2g.15gb``: the last word, lowercase."""
    text = _text(raw) if isinstance(raw, bytes) else raw
    words = text.split()
    return words[-1].lower() if words else ""


def text_field(raw: bytes) -> str:
    return _text(raw)
