"""The programs' metrics on prometheus_client (docs/observability.md lists every family).

Each program keeps a registry of its own, never the library's global one, so programs that
share a process (the tests run several) never mix series. Every registry carries what users of
any Python exporter expect (``process_*``, ``python_info``, ``python_gc_*``) and
``hygon_dcu_build_info``. No ``_created`` series: dashboards and alerts here never read them
and they would double every counter's samples.

``Snapshot`` is a gauge family for state read whole (live partitions, advertised devices, the
mode): an update replaces every series at once, so a scrape never sees half of one and a
series whose labels disappeared is gone rather than stale.
"""

from __future__ import annotations

import platform
import threading
from collections.abc import Iterator, Mapping, Sequence

import prometheus_client
from prometheus_client import (
    CollectorRegistry,
    Gauge,
    GCCollector,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.registry import Collector

from hygon_dcu_plugin import __version__

__all__ = ["CONTENT_TYPE", "LabelKey", "Snapshot", "program_registry", "render"]

# The text format every Prometheus reads (the names here need none of 1.0.0's escaping).
CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4
# One series' labels as (name, value) pairs.
LabelKey = tuple[tuple[str, str], ...]

prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]  # unannotated upstream


def program_registry(program: str) -> CollectorRegistry:
    """A new registry with the process, platform and GC collectors and the build info of
    ``program`` (device-plugin, admission or extender)."""
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    build = Gauge(
        "hygon_dcu_build_info",
        "1, labelled with the program, the runtime's version and the Python version.",
        ["program", "version", "python_version"],
        registry=registry,
    )
    build.labels(program, __version__, platform.python_version()).set(1)
    return registry


def render(registry: CollectorRegistry) -> str:
    return generate_latest(registry).decode()


class Snapshot(Collector):
    """A gauge family whose series are replaced together by ``set_all``."""

    def __init__(
        self,
        name: str,
        documentation: str,
        registry: CollectorRegistry,
        labelnames: Sequence[str] = (),
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self._lock = threading.Lock()
        self._values: dict[tuple[str, ...], float] = {}
        registry.register(self)

    def set_all(self, values: Mapping[LabelKey, float]) -> None:
        """Replace every series; each key names exactly this family's labels."""
        rows: dict[tuple[str, ...], float] = {}
        for key, value in values.items():
            labels = dict(key)
            if sorted(labels) != sorted(self.labelnames) or len(labels) != len(key):
                raise ValueError(f"{self.name} has labels {self.labelnames}, not {key}")
            rows[tuple(labels[name] for name in self.labelnames)] = float(value)
        with self._lock:
            self._values = rows

    def describe(self) -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily(self.name, self.documentation, labels=self.labelnames)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(self.name, self.documentation, labels=self.labelnames)
        with self._lock:
            rows = sorted(self._values.items())
        for values, value in rows:
            family.add_metric(values, value)
        yield family
