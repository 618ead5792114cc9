# Copyright: hygon.dcu contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""ctypes binding to the vendor's virtual-device (logical slice) library, ``libhydmi.so``.

Its own names and status codes, not NVML's (docs/dev/hardware.md, "Logical slices"). A create
answers no id: ``vdevs.Vdevs`` finds what it made. Loaded by ``shared_library``.
"""

from __future__ import annotations

import ctypes
from typing import Any

from .shared_library import LoadFailure, SharedLibrary, library_candidates

# Status codes (the vendor's dmiStatus numbers).
SUCCESS = 0
ERROR = 1
OPEN_MKFD_FAILED = 3
MKFD_ALREADY_OPENED = 4
SYS_NODE_NOT_EXIST = 5
NOT_SUPPORTED = 6
CREATE_VDEV_FAILED = 8
DESTROY_VDEV_FAILED = 9
INVALID_ARGUMENTS = 10
OUT_OF_RESOURCES = 11
ERROR_NOT_INITIALIZED = 13
DEVICE_NOT_SUPPORT = 14
VDEV_NOT_EXIST = 15
DEVICE_BUSY = 17
FILE_ERROR = 18
PERMISSION = 19
# This binding's own: the library or one of its symbols is missing (never the library's).
LIBRARY_NOT_FOUND = -1
FUNCTION_NOT_FOUND = -2

CODE_NAMES: dict[int, str] = {
    SUCCESS: "SUCCESS",
    ERROR: "ERROR",
    OPEN_MKFD_FAILED: "OPEN_MKFD_FAILED",
    MKFD_ALREADY_OPENED: "MKFD_ALREADY_OPENED",
    SYS_NODE_NOT_EXIST: "SYS_NODE_NOT_EXIST",
    NOT_SUPPORTED: "NOT_SUPPORTED",
    CREATE_VDEV_FAILED: "CREATE_VDEV_FAILED",
    DESTROY_VDEV_FAILED: "DESTROY_VDEV_FAILED",
    INVALID_ARGUMENTS: "INVALID_ARGUMENTS",
    OUT_OF_RESOURCES: "OUT_OF_RESOURCES",
    ERROR_NOT_INITIALIZED: "ERROR_NOT_INITIALIZED",
    DEVICE_NOT_SUPPORT: "DEVICE_NOT_SUPPORT",
    VDEV_NOT_EXIST: "VDEV_NOT_EXIST",
    DEVICE_BUSY: "DEVICE_BUSY",
    FILE_ERROR: "FILE_ERROR",
    PERMISSION: "PERMISSION",
    LIBRARY_NOT_FOUND: "LIBRARY_NOT_FOUND",
    FUNCTION_NOT_FOUND: "FUNCTION_NOT_FOUND",
}

# Answers that mean the library cannot serve us: what it says of vdevs cannot be known.
UNUSABLE_CODES = frozenset(
    {
        LIBRARY_NOT_FOUND,
        FUNCTION_NOT_FOUND,
        OPEN_MKFD_FAILED,
        MKFD_ALREADY_OPENED,
        SYS_NODE_NOT_EXIST,
        ERROR_NOT_INITIALIZED,
        PERMISSION,
    }
)

LIBRARY_NAMES = ("libhydmi.so",)
NAME_SIZE = 256


def code_name(code: int) -> str:
    return CODE_NAMES.get(code, f"code {code}")


class DmiError(Exception):
    """A call answered something other than SUCCESS."""

    def __init__(self, call: str, code: int, detail: str = "") -> None:
        self.call = call
        self.code = code
        self.detail = detail
        text = f"{call} returned {code_name(code)} ({code})"
        super().__init__(f"{text}: {detail}" if detail else text)


class VdevBusy(DmiError):
    """DEVICE_BUSY: a process uses the vdev."""


class VdevGone(DmiError):
    """VDEV_NOT_EXIST: no live vdev has that id."""


class DmiUnusable(DmiError):
    """The library is missing, lacks a symbol, or cannot reach the driver."""


def error_for(call: str, code: int, detail: str = "") -> DmiError:
    if code == DEVICE_BUSY:
        return VdevBusy(call, code, detail)
    if code == VDEV_NOT_EXIST:
        return VdevGone(call, code, detail)
    if code in UNUSABLE_CODES:
        return DmiUnusable(call, code, detail)
    return DmiError(call, code, detail)


class DeviceInfo(ctypes.Structure):
    """A card or a vdev; memory in bytes; ``device_id`` the card (docs/dev/hardware.md)."""

    _fields_ = (
        ("name", ctypes.c_char * NAME_SIZE),
        ("compute_unit_count", ctypes.c_int),
        ("global_mem_size", ctypes.c_size_t),
        ("usage_mem_size", ctypes.c_size_t),
        ("container_id", ctypes.c_uint64),
        ("device_id", ctypes.c_int),
    )


_P = ctypes.POINTER
_INT = ctypes.c_int
_SIZE = ctypes.c_size_t

SIGNATURES: dict[str, tuple[Any, ...]] = {
    "dmiGetDeviceCount": (_P(_INT),),
    "dmiGetDeviceInfo": (_INT, _P(DeviceInfo)),
    "dmiGetMaxVDeviceCount": (_P(_INT),),
    "dmiGetVDeviceCount": (_P(_INT),),
    "dmiGetDeviceRemainingInfo": (_INT, _P(_SIZE), _P(_SIZE)),
    "dmiGetVDeviceInfo": (_INT, _P(DeviceInfo)),
    "dmiCreateVDevices": (_INT, _INT, _P(_INT), _P(_INT)),
    "dmiDestroyVDevices": (_INT,),
    "dmiDestroySingleVDevice": (_INT,),
}


class DmiLibrary:
    """One loaded copy. Methods raise DmiError subclasses, never return codes."""

    def __init__(self, host_root: str = "/", library_path: str | None = None) -> None:
        self._library = SharedLibrary(
            library_candidates(LIBRARY_NAMES, host_root, library_path), SIGNATURES
        )

    @property
    def path(self) -> str | None:
        return self._library.path

    @property
    def load_error(self) -> DmiUnusable | None:
        failure = self._library.load_failure
        return None if failure is None else _unusable(failure)

    def call(self, name: str, *args: Any) -> None:
        try:
            function = self._library.function(name)
        except LoadFailure as failure:
            raise _unusable(failure) from None
        code = int(function(*args))
        if code != SUCCESS:
            raise error_for(name, code)

    def device_count(self) -> int:
        count = ctypes.c_int()
        self.call("dmiGetDeviceCount", ctypes.byref(count))
        return count.value

    def device_info(self, card: int) -> DeviceInfo:
        info = DeviceInfo()
        self.call("dmiGetDeviceInfo", card, ctypes.byref(info))
        return info

    def max_vdevs_per_card(self) -> int:
        count = ctypes.c_int()
        self.call("dmiGetMaxVDeviceCount", ctypes.byref(count))
        return count.value

    def vdev_count(self) -> int:
        count = ctypes.c_int()
        self.call("dmiGetVDeviceCount", ctypes.byref(count))
        return count.value

    def remaining(self, card: int) -> tuple[int, int]:
        """(compute units, memory bytes) a new vdev of ``card`` could still have."""
        cus, memory = ctypes.c_size_t(), ctypes.c_size_t()
        self.call("dmiGetDeviceRemainingInfo", card, ctypes.byref(cus), ctypes.byref(memory))
        return cus.value, memory.value

    def vdev_info(self, vdev_id: int) -> DeviceInfo:
        info = DeviceInfo()
        self.call("dmiGetVDeviceInfo", vdev_id, ctypes.byref(info))
        return info

    def create_vdev(self, card: int, compute_units: int, memory_mib: int) -> None:
        """One vdev on ``card``; the library answers no id."""
        cus = (ctypes.c_int * 1)(compute_units)
        memory = (ctypes.c_int * 1)(memory_mib)
        self.call("dmiCreateVDevices", card, 1, cus, memory)

    def destroy_vdev(self, vdev_id: int) -> None:
        self.call("dmiDestroySingleVDevice", vdev_id)


def _unusable(failure: LoadFailure) -> DmiUnusable:
    code = FUNCTION_NOT_FOUND if failure.missing_symbol else LIBRARY_NOT_FOUND
    return DmiUnusable(failure.call, code, failure.detail)
