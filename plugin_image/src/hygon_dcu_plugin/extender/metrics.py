"""The extender's metrics: the serving kit's counters (``serving.metrics``: bad requests,
refused connections, failed handshakes and certificate reloads) under the extender's prefix,
and the extender's own families."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import Counter, Gauge, Histogram

from hygon_dcu_plugin.extender.state import ReleasedWhy
from hygon_dcu_plugin.extender.verbs import BindOutcome, Verb
from hygon_dcu_plugin.serving.metrics import CONTENT_TYPE, ServerMetrics

__all__ = ["CONTENT_TYPE", "ExtenderMetrics"]

# Seconds; the scheduler waits httpTimeout (5 s unless configured) for each call.
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
_PREFIX = "hygon_dcu_extender_"


class ExtenderMetrics(ServerMetrics):
    def __init__(self, sample: Callable[[], tuple[int, int]] = lambda: (0, 0)) -> None:
        """``sample`` gives (reservations held, stale nodes) at scrape time."""
        super().__init__("extender", _PREFIX)
        self.latency = Histogram(
            _PREFIX + "request_duration_seconds",
            "Time to answer a scheduler request, by verb.",
            ["verb"],
            buckets=BUCKETS,
            registry=self.registry,
        )
        for verb in Verb:
            self.latency.labels(verb.value)
        self.binds = Counter(
            _PREFIX + "binds_total",
            "Bind requests answered, by outcome.",
            ["outcome"],
            registry=self.registry,
        )
        for outcome in BindOutcome:
            self.binds.labels(outcome.value)
        self.released = Counter(
            _PREFIX + "reservations_released_total",
            "Reservations released, by why.",
            ["why"],
            registry=self.registry,
        )
        for why in ReleasedWhy:
            self.released.labels(why.value)
        reservations = Gauge(
            _PREFIX + "reservations",
            "Reservations made and not yet carved.",
            registry=self.registry,
        )
        reservations.set_function(lambda: float(sample()[0]))
        stale = Gauge(
            _PREFIX + "stale_nodes",
            "Nodes whose geometry Lease was not renewed in time.",
            registry=self.registry,
        )
        stale.set_function(lambda: float(sample()[1]))

    def observe(self, verb: Verb, seconds: float) -> None:
        self.latency.labels(verb.value).observe(seconds)

    def bind(self, outcome: BindOutcome) -> None:
        self.binds.labels(outcome.value).inc()

    def release(self, why: ReleasedWhy) -> None:
        self.released.labels(why.value).inc()
