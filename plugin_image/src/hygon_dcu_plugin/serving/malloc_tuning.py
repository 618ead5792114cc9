"""Make glibc's allocator hand freed memory back instead of keeping it per thread.

Every connection has its own thread, and glibc gives threads their own heaps (arenas): memory a
parse freed in one thread's heap is not reused by the next parse, in another thread, so the
resident size grows towards one parse per heap. And after a large block is freed, glibc raises
the size above which it maps blocks directly, so later large blocks come from the heaps and
stay resident. One heap and a fixed mapping threshold keep the peak at one parse.
"""

from __future__ import annotations

import ctypes
import ctypes.util

# From glibc's malloc.h.
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8
MMAP_THRESHOLD = 128 * 1024


def tune() -> bool:
    """Apply the settings; False where the C library has no mallopt (not glibc)."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    arenas = mallopt(_M_ARENA_MAX, 1)
    threshold = mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
    return bool(arenas and threshold)
