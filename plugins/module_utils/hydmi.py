# Copyright: hygon.dcu contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""ctypes binding to the vendor's partition management library, ``libhydmi_mig``.

The library exports NVML's symbol names with its own struct layouts, so nothing here may come
from an NVML binding: the structs below follow the vendor header (docs/dev/hardware.md).
Loading the library is its init (there is no init/shutdown call); ``shared_library`` loads it.
"""

from __future__ import annotations

import ctypes
from typing import Any

from .shared_library import LoadFailure, SharedLibrary, library_candidates, text_field

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


def unusable(failure: LoadFailure) -> LibraryUnusable:
    """The library missing, or a symbol it lacks, in this binding's codes."""
    code = FUNCTION_NOT_FOUND if failure.missing_symbol else LIBRARY_NOT_FOUND
    return LibraryUnusable(failure.call, code, failure.detail)


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


class HydmiLibrary:
    """One loaded copy of the library. Methods raise HydmiError subclasses, never return codes."""

    def __init__(self, host_root: str = "/", library_path: str | None = None) -> None:
        self.host_root = host_root
        self._library = SharedLibrary(
            library_candidates(LIBRARY_NAMES, host_root, library_path), SIGNATURES
        )
        self.candidates = self._library.candidates

    @property
    def path(self) -> str | None:
        return self._library.path

    @property
    def loaded(self) -> bool:
        return self._library.loaded

    @property
    def load_error(self) -> LibraryUnusable | None:
        failure = self._library.load_failure
        return None if failure is None else unusable(failure)

    def call(self, name: str, *args: Any) -> None:
        try:
            function = self._library.function(name)
        except LoadFailure as failure:
            raise unusable(failure) from None
        code = int(function(*args))
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
    text = text_field(raw) if isinstance(raw, bytes) else raw
    words = text.split()
    return words[-1].lower() if words else ""
