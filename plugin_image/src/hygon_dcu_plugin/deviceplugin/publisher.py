"""Keeps this node's geometry Lease current (docs/dev/extender.md): one daemon thread that
publishes the geometry after changes and renews it as a heartbeat.

``notify()`` only sets an event, so Allocate and the reclaimer never wait on the API server.
The thread coalesces the notifications that arrive while it works into one more round. A round
takes a snapshot, numbers it, checks that the extender could read it, and writes it when the
text changed or the last write is ``renew_seconds`` old (``renewTime`` is the extender's
staleness signal, so a node whose state cannot be read is not renewed). A failed round is
retried with a bounded backoff and logged once per failure streak.

The generation goes up by one for every content change within the process and starts from the
wall clock in milliseconds, so a restarted plugin still counts forward.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable

from hygon_dcu_plugin.geometry import MAX_GENERATION, Geometry, GeometryError, decode, encode

log = logging.getLogger(__name__)

FIRST_BACKOFF_SECONDS = 0.5


class GeometryPublisher:
    """``snapshot`` reads the geometry (its generation is ignored: the publisher numbers it);
    ``write`` stores the text, raising on failure."""

    def __init__(
        self,
        snapshot: Callable[[], Geometry],
        write: Callable[[str], None],
        *,
        renew_seconds: float,
        first_backoff: float = FIRST_BACKOFF_SECONDS,
        max_backoff: float | None = None,
    ) -> None:
        if not renew_seconds > 0:
            raise ValueError(f"renew_seconds must be positive, not {renew_seconds}")
        self._snapshot = snapshot
        self._write = write
        self._renew = renew_seconds
        self._first_backoff = first_backoff
        # Never wait longer than a renewal period between attempts: that is what the extender
        # waits for before it calls the node stale.
        self._max_backoff = renew_seconds if max_backoff is None else max_backoff
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self.generation = min(int(time.time() * 1000), MAX_GENERATION)
        self._content: Geometry | None = None  # last snapshot, generation 0
        self._written: str | None = None
        self._written_at = 0.0  # time.monotonic() of the last write
        self._backoff = 0.0  # > 0 while failing: the wait before the next attempt
        self._failed_rounds = 0
        self.rounds = 0
        self.writes = 0

    # callers ----------------------------------------------------------------------------
    def notify(self) -> None:
        """Something may have changed; never blocks, never raises."""
        self._wake.set()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="geometry", daemon=True)
        self._thread.start()

    def alive(self) -> bool:
        return self._thread is None or self._thread.is_alive()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the thread and wait for it at most ``timeout`` seconds (a write in flight is
        bounded by the API client's timeout; the thread is a daemon)."""
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)

    # the thread ---------------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stopping.is_set():
            if self._backoff:
                # Failing: notifications do not shorten the backoff (an outage would otherwise
                # be hammered once per Allocate); the round after it covers them.
                self._stopping.wait(self._backoff)
            elif self._written is not None:
                due = self._written_at + self._renew - time.monotonic()
                if due > 0:
                    self._wake.wait(due)
            if self._stopping.is_set():
                return
            self._wake.clear()
            try:
                self._round()
            except Exception as exc:  # a bug, not a known failure: keep the thread
                self._failed(f"{type(exc).__name__}: {exc}", trace=True)

    def _round(self) -> None:
        self.rounds += 1
        try:
            content = dataclasses.replace(self._snapshot(), generation=0)
        except Exception as exc:
            self._failed(f"cannot read this node's geometry, publishing none: {exc}")
            return
        if content != self._content:
            if self._content is not None:
                self.generation = min(self.generation + 1, MAX_GENERATION)
            self._content = content
        text = encode(dataclasses.replace(content, generation=self.generation))
        try:
            decode(text)  # what the extender would refuse is not published
        except GeometryError as exc:
            self._failed(f"this node's geometry is not one the extender can read: {exc}")
            return
        if text == self._written and time.monotonic() - self._written_at < self._renew:
            self._succeeded()
            return
        if self._stopping.is_set():
            return
        try:
            self._write(text)
        except Exception as exc:
            self._failed(f"cannot write the geometry lease: {exc}")
            return
        self._written, self._written_at = text, time.monotonic()
        self.writes += 1
        self._succeeded()

    def _failed(self, why: str, trace: bool = False) -> None:
        if not self._failed_rounds:
            log.warning(
                "geometry not published; retrying with backoff (logged once until it works)",
                extra={"error": why},
                exc_info=trace,
            )
        self._failed_rounds += 1
        self._backoff = min(max(self._backoff * 2, self._first_backoff), self._max_backoff)

    def _succeeded(self) -> None:
        if self._failed_rounds:
            log.info("geometry published again", extra={"failed_rounds": self._failed_rounds})
        self._failed_rounds = 0
        self._backoff = 0.0
