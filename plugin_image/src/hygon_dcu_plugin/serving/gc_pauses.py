"""Short pauses of the cyclic garbage collector in a process that holds a large, long-lived
state (the extender's decoded geometry of every node).

CPython's full collection walks every object it tracks, whatever their age. With 1,000 nodes'
geometries held, one full collection paused the extender's verbs 70-90 ms, and the allocations
of a pod shape placed for the first time set one off: they were the slowest 1% of filter calls
(docs/dev/extender.md, "Cost of a decision"). What has survived a state refresh is moved out of
the collector's sight (``gc.freeze``, a constant-time move), so a collection walks only what is
younger. Frozen objects are still freed by reference counting when dropped; only a garbage
*cycle* among them would be kept, and the extender's state makes none (a unit test counts
them). So that even such cycles stay bounded, once a sweep period everything is handed back
(``gc.unfreeze``) and collected in one full pass: one long pause a period, not one every few
seconds.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable

SWEEP_SECONDS = 3600.0


class FullPauses:
    """Call ``after_refresh`` after each refresh of the long-lived state."""

    def __init__(
        self,
        sweep_seconds: float = SWEEP_SECONDS,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._sweep_seconds = sweep_seconds
        self._monotonic = monotonic
        self._last_sweep = monotonic()

    def after_refresh(self) -> None:
        now = self._monotonic()
        if now - self._last_sweep >= self._sweep_seconds:
            gc.unfreeze()
            gc.collect()
            self._last_sweep = now
        gc.freeze()
