"""One lock per node name, for the binds on that node (docs/dev/extender.md: binds on one node
are serialised so two of them never reserve the same slices).

A node's lock exists only while a bind holds or waits for it, so the table is bounded by the
binds in flight, not by every node ever seen: nodes that are gone leave nothing behind.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator


class _Entry:
    __slots__ = ("lock", "users")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.users = 0


class NodeLocks:
    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[str, _Entry] = {}

    @contextlib.contextmanager
    def holding(self, node: str, timeout: float) -> Iterator[bool]:
        """Hold the node's lock for the block; yields False when it was not had in time."""
        with self._guard:
            entry = self._locks.setdefault(node, _Entry())
            entry.users += 1
        acquired = entry.lock.acquire(timeout=timeout)
        try:
            yield acquired
        finally:
            if acquired:
                entry.lock.release()
            with self._guard:
                entry.users -= 1
                if not entry.users:
                    del self._locks[node]

    def __len__(self) -> int:
        with self._guard:
            return len(self._locks)
