"""Waiting for something another thread or process makes true: a wait, not a timed assertion.
The caller asserts on the result; the timeout only bounds a hang."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(predicate: Callable[[], object], timeout: float = 60.0) -> bool:
    """True as soon as predicate() is truthy; False once ``timeout`` seconds passed first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False
