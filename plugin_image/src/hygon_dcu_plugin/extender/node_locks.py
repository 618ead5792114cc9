"""One lock per name, for the binds in flight (docs/dev/extender.md): per node, so two binds
never reserve the same slices; per pod, so a pod is bound once, to the node its reservation
names.

A name's lock exists only while a bind holds or waits for it, so the table is bounded by the
binds in flight, not by every node or pod ever seen: those that are gone leave nothing behind.
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


class NamedLocks:
    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[str, _Entry] = {}

    @contextlib.contextmanager
    def holding(self, name: str, timeout: float) -> Iterator[bool]:
        """Hold the name's lock for the block; yields False when it was not had in time."""
        with self._guard:
            entry = self._locks.setdefault(name, _Entry())
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
                    del self._locks[name]

    def __len__(self) -> int:
        with self._guard:
            return len(self._locks)
