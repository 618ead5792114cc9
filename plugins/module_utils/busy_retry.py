# Copyright: hygon.dcu contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Retrying what a process still uses, until a deadline: the one loop the modules that destroy
instances and logical slices share. Nothing in use is ever forced."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TypeVar

Item = TypeVar("Item")


def retry_busy(
    items: Sequence[Item],
    attempt: Callable[[Item], str | None],
    wait_timeout: float,
    retry_interval: float,
) -> list[tuple[Item, str]]:
    """Call ``attempt`` on each item, then again on those it said are busy, every
    ``retry_interval`` seconds until none is left or ``wait_timeout`` has passed (0: once).
    ``attempt`` answers None when it is done with the item (destroyed, or gone since), else why
    it is busy. Returns the items still busy, each with the last reason."""
    pending: list[tuple[Item, str]] = [(item, "in use") for item in items]
    deadline = time.monotonic() + wait_timeout
    while True:
        still: list[tuple[Item, str]] = []
        for item, _before in pending:
            reason = attempt(item)
            if reason is not None:
                still.append((item, reason))
        pending = still
        if not pending or time.monotonic() >= deadline:
            return pending
        time.sleep(min(retry_interval, max(deadline - time.monotonic(), 0)))
