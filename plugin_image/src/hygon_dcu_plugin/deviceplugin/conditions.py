"""Conditions an operator must fix, reported once when they appear and once when they clear.

The reclaimer finds the same problem on every pass (every few seconds); logging it each time
buries it. A condition is identified by a key (a file path, a card); its message is logged at
ERROR when the key first appears or its message changes, and at INFO when the key is gone.
Memory is bounded by the number of distinct conditions present at once.
"""

from __future__ import annotations

import logging
import threading


class Conditions:
    def __init__(self, logger: logging.Logger, what: str) -> None:
        self._log = logger
        self._what = what  # e.g. "orphan collection stopped"
        self._lock = threading.Lock()
        self._present: dict[str, str] = {}

    def settle(self, current: dict[str, str]) -> None:
        """Replace the set of present conditions (key -> message) with ``current``."""
        with self._lock:
            appeared = {k: m for k, m in current.items() if self._present.get(k) != m}
            cleared = sorted(set(self._present) - set(current))
            self._present = dict(current)
        for key, message in sorted(appeared.items()):
            self._log.error(self._what, extra={"where": key, "why": message})
        for key in cleared:
            self._log.info(self._what + ": cleared", extra={"where": key})

    def present(self) -> dict[str, str]:
        with self._lock:
            return dict(self._present)
