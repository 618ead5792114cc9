"""What the connections share: the bytes of request bodies held at once, and the connection
slots (each a thread)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable


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


class Slot:
    """One accepted connection: who it is from, its socket (the TLS one once wrapped), and
    whether it is busy or, since when, idle."""

    __slots__ = ("busy", "client", "connection", "evicted", "idle_since")

    def __init__(self, connection: socket.socket, client: str, now: float) -> None:
        self.connection = connection
        self.client = client
        self.busy = False
        self.evicted = False
        self.idle_since = now


class ConnectionSlots:
    """At most ``capacity`` connections at once, and at most ``per_client`` of them busy for
    one client address.

    A connection is busy from the first byte of its handshake or of a request until that is
    done (the request answered), and idle otherwise: before its first byte, between the
    requests of a kept-alive connection, and while it lingers to close. Time bounds busy
    connections (the server's deadlines); nothing bounds how many idle ones a client opens. So
    when every slot is taken, a new connection takes the place of the connection idle the
    longest, which is shut down here and closed by its own thread: a client reopens an idle
    connection at the cost of a handshake, while refusing the new one could be refusing the API
    server or a probe. A busy connection is never evicted; when all are busy, the new one is
    refused. The per-client cap keeps one client (one pod) that begins handshakes or requests
    and never finishes them to a share of the slots; the API server and the kubelet connect
    from other addresses.
    """

    def __init__(
        self, capacity: int, per_client: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.capacity = capacity
        self.per_client = per_client
        self._clock = clock
        self._lock = threading.Lock()
        self._slots: set[Slot] = set()
        self._busy: dict[str, int] = {}

    def admit(self, connection: socket.socket, client: str) -> tuple[Slot | None, Slot | None]:
        """(the new connection's slot or None when every slot is busy, the idle connection
        evicted for it or None)."""
        with self._lock:
            evicted = None
            if len(self._slots) >= self.capacity:
                idle = [slot for slot in self._slots if not slot.busy]
                if not idle:
                    return None, None
                evicted = min(idle, key=lambda slot: slot.idle_since)
                self._evict(evicted)
            slot = Slot(connection, client, self._clock())
            self._slots.add(slot)
            return slot, evicted

    def _evict(self, slot: Slot) -> None:
        # Under the lock: the slot's thread closes its socket only after release(), which takes
        # the lock, so the descriptor shut down here is still this connection's. The plain
        # socket's shutdown, not SSLSocket's, which would drop the TLS state under the thread
        # using it; the thread's wait or read then ends at once.
        self._slots.discard(slot)
        slot.evicted = True
        with contextlib.suppress(OSError):
            socket.socket.shutdown(slot.connection, socket.SHUT_RDWR)

    def begin(self, slot: Slot) -> bool:
        """Mark the connection busy (a handshake or request began); False when it was evicted
        or its client already has ``per_client`` busy connections: close it then."""
        with self._lock:
            if slot.evicted:
                return False
            if not slot.busy:
                if self._busy.get(slot.client, 0) >= self.per_client:
                    return False
                slot.busy = True
                self._busy[slot.client] = self._busy.get(slot.client, 0) + 1
            return True

    def end(self, slot: Slot) -> None:
        """The handshake or request is done: the connection is idle (and evictable) again."""
        with self._lock:
            self._idle(slot)

    def rehome(self, slot: Slot, connection: socket.socket) -> None:
        """The connection's socket is now ``connection`` (the TLS socket after the handshake)."""
        with self._lock:
            slot.connection = connection

    def release(self, slot: Slot) -> None:
        """The connection is about to close: its slot is free. Call before closing it."""
        with self._lock:
            self._idle(slot)
            self._slots.discard(slot)

    def busy(self) -> int:
        with self._lock:
            return sum(self._busy.values())

    def _idle(self, slot: Slot) -> None:
        if slot.busy:
            slot.busy = False
            left = self._busy[slot.client] - 1
            if left:
                self._busy[slot.client] = left
            else:
                del self._busy[slot.client]
        if not slot.evicted:  # an evicted slot keeps the idle time it was evicted for
            slot.idle_since = self._clock()
