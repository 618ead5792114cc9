"""Locks shared by Allocate and the reclaimer, valid across threads and processes.

flock on a file per lock: a second open file description conflicts even inside one process,
and the kernel drops the lock when a killed plugin's descriptors close, so a crash never
leaves a lock held.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager

_SAFE = re.compile(r"[^0-9A-Za-z_.-]")


class Locks:
    def __init__(self, directory: str) -> None:
        self.directory = directory

    @contextmanager
    def _flock(self, name: str) -> Iterator[None]:
        os.makedirs(self.directory, mode=0o700, exist_ok=True)
        fd = os.open(os.path.join(self.directory, name), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def node(self) -> contextlib.AbstractContextManager[None]:
        """Identify-and-reserve: one Allocate at a time on the node."""
        return self._flock("node.lock")

    def card(self, pci: str) -> contextlib.AbstractContextManager[None]:
        """Create/destroy/orphan decisions on one card, keyed by PCI address (indices can
        change across reboots, addresses cannot)."""
        return self._flock("card-" + _SAFE.sub("_", pci) + ".lock")
