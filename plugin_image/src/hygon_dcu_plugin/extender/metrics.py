"""The extender's metrics, on the image's one Prometheus implementation.

The serving kit's counters (``serving.metrics``: bad requests, refused connections, failed
handshakes and certificate reloads) under the extender's prefix, and the extender's own series.
"""

from __future__ import annotations

from collections.abc import Callable

from hygon_dcu_plugin.extender.state import ReleasedWhy
from hygon_dcu_plugin.extender.verbs import BindOutcome, Verb
from hygon_dcu_plugin.prometheus_text import CONTENT_TYPE, Counter, Gauge, Histogram, render
from hygon_dcu_plugin.serving.metrics import ServerMetrics

__all__ = ["CONTENT_TYPE", "ExtenderMetrics"]

# Seconds; the scheduler waits httpTimeout (5 s unless configured) for each call.
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
_PREFIX = "hygon_dcu_extender_"


class ExtenderMetrics(ServerMetrics):
    def __init__(self, sample: Callable[[], tuple[int, int]] = lambda: (0, 0)) -> None:
        """``sample`` gives (reservations held, stale nodes) at render time."""
        super().__init__(_PREFIX)
        self.latency = {
            verb: Histogram(
                f"{_PREFIX}{verb}_seconds", f"Time to answer a {verb} request.", BUCKETS
            )
            for verb in Verb
        }
        self.binds = Counter(_PREFIX + "binds_total", "Bind requests answered, by outcome.")
        for outcome in BindOutcome:
            self.binds.zero(outcome=outcome.value)
        self.released = Counter(
            _PREFIX + "reservations_released_total", "Reservations released, by why."
        )
        for why in ReleasedWhy:
            self.released.zero(why=why.value)
        self.reservations = Gauge(_PREFIX + "reservations", "Reservations made and not yet carved.")
        self.stale = Gauge(
            _PREFIX + "stale_nodes", "Nodes whose geometry Lease was not renewed in time."
        )
        self._sample = sample

    def observe(self, verb: Verb, seconds: float) -> None:
        self.latency[verb].observe(seconds)

    def bind(self, outcome: BindOutcome) -> None:
        self.binds.inc(outcome=outcome.value)

    def release(self, why: ReleasedWhy) -> None:
        self.released.inc(why=why.value)

    def render(self) -> str:
        reservations, stale = self._sample()
        self.reservations.set_all({(): float(reservations)})
        self.stale.set_all({(): float(stale)})
        metrics = [
            self.bad_requests,
            self.binds,
            self.connections_refused,
            *self.latency.values(),
            self.reservations,
            self.released,
            self.stale,
            self.handshake_failures,
            self.tls_reloads,
        ]
        # bad_requests has no series before the first one: its header is skipped until then.
        return render([m for m in metrics if m.render()])
