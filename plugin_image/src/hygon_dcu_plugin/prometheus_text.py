"""Prometheus text exposition: counters, gauges, histograms and their rendering.

The one metrics implementation of the image (device plugin and webhook): small, thread-safe,
no client library to ship. A counter can start its known series at 0 (``zero``) so a
dashboard sees them before the first event.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence

LabelKey = tuple[tuple[str, str], ...]
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _labels(key: LabelKey, extra: Iterable[tuple[str, str]] = ()) -> str:
    pairs = [*key, *extra]
    if not pairs:
        return ""
    body = ",".join(f'{k}="{escape(v)}"' for k, v in pairs)
    return "{" + body + "}"


def escape(value: str) -> str:
    """A label value as the text format requires (backslash, newline and quote escaped)."""
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class Metric:
    kind = ""

    def __init__(self, name: str, help_text: str) -> None:
        self.name = name
        self.help = help_text
        self._lock = threading.Lock()

    def header(self) -> list[str]:
        return [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} {self.kind}"]

    def render(self) -> list[str]:
        raise NotImplementedError


class Counter(Metric):
    kind = "counter"

    def __init__(self, name: str, help_text: str) -> None:
        super().__init__(name, help_text)
        self._values: dict[LabelKey, float] = {}

    def inc(self, amount: float = 1.0, **labels: str) -> None:
        key = tuple(sorted(labels.items()))
        with self._lock:
            self._values[key] = self._values.get(key, 0.0) + amount

    def zero(self, **labels: str) -> None:
        """Make the series exist (at 0 unless it already counted)."""
        key = tuple(sorted(labels.items()))
        with self._lock:
            self._values.setdefault(key, 0.0)

    def value(self, **labels: str) -> float:
        with self._lock:
            return self._values.get(tuple(sorted(labels.items())), 0.0)

    def render(self) -> list[str]:
        with self._lock:
            return [f"{self.name}{_labels(k)} {v:g}" for k, v in sorted(self._values.items())]


class Gauge(Counter):
    kind = "gauge"

    def set_all(self, values: dict[LabelKey, float]) -> None:
        """Replace every series (labels that disappeared read as gone, not stale)."""
        with self._lock:
            self._values = dict(values)


class Histogram(Metric):
    kind = "histogram"

    def __init__(self, name: str, help_text: str, buckets: Sequence[float]) -> None:
        super().__init__(name, help_text)
        self.buckets = tuple(sorted(buckets))
        self._counts = [0] * len(self.buckets)
        self._sum = 0.0
        self._total = 0

    def observe(self, value: float) -> None:
        with self._lock:
            for i, bound in enumerate(self.buckets):
                if value <= bound:
                    self._counts[i] += 1
            self._sum += value
            self._total += 1

    def render(self) -> list[str]:
        with self._lock:
            lines = [
                f"{self.name}_bucket{_labels((), [('le', f'{b:g}')])} {c}"
                for b, c in zip(self.buckets, self._counts, strict=True)
            ]
            lines.append(f'{self.name}_bucket{{le="+Inf"}} {self._total}')
            lines.append(f"{self.name}_sum {self._sum:g}")
            lines.append(f"{self.name}_count {self._total}")
            return lines


def render(metrics: Sequence[Metric]) -> str:
    lines: list[str] = []
    for metric in metrics:
        lines.extend(metric.header())
        lines.extend(metric.render())
    return "\n".join(lines) + "\n"
