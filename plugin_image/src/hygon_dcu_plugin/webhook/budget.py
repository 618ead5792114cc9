"""A count of bytes shared by the connections: how much request body may be held at once."""

from __future__ import annotations

import threading


class ByteBudget:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._free = capacity
        self._changed = threading.Condition()

    def acquire(self, count: int, timeout: float) -> bool:
        """Take count bytes, waiting up to timeout seconds for others to give theirs back."""
        if count > self.capacity:
            return False
        with self._changed:
            if not self._changed.wait_for(lambda: self._free >= count, timeout):
                return False
            self._free -= count
            return True

    def release(self, count: int) -> None:
        with self._changed:
            self._free += count
            self._changed.notify_all()
