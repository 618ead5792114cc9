"""Prometheus metrics in the text exposition format, with no client library to ship."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence

LabelKey = tuple[tuple[str, str], ...]


def _labels(key: LabelKey, extra: Iterable[tuple[str, str]] = ()) -> str:
    pairs = [*key, *extra]
    if not pairs:
        return ""
    body = ",".join(
        f'{k}="{v.replace(chr(92), chr(92) * 2).replace(chr(34), chr(92) + chr(34))}"'
        for k, v in pairs
    )
    return "{" + body + "}"


class _Metric:
    kind = ""

    def __init__(self, name: str, help_text: str) -> None:
        self.name = name
        self.help = help_text
        self._lock = threading.Lock()

    def header(self) -> list[str]:
        return [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} {self.kind}"]

    def render(self) -> list[str]:
        raise NotImplementedError


class Counter(_Metric):
    kind = "counter"

    def __init__(self, name: str, help_text: str) -> None:
        super().__init__(name, help_text)
        self._values: dict[LabelKey, float] = {}

    def inc(self, amount: float = 1.0, **labels: str) -> None:
        key = tuple(sorted(labels.items()))
        with self._lock:
            self._values[key] = self._values.get(key, 0.0) + amount

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


class Histogram(_Metric):
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


class Metrics:
    def __init__(self) -> None:
        self.allocations = Counter(
            "hygon_dcu_allocations_total", "Partitions granted by Allocate, by profile."
        )
        self.allocation_failures = Counter(
            "hygon_dcu_allocation_failures_total", "Allocate calls refused or failed, by reason."
        )
        self.reclaim_actions = Counter(
            "hygon_dcu_reclaim_actions_total",
            "Reclaimer actions: destroyed, in_use_retry, stale_record, orphan_destroyed, "
            "poison_swept, corrupt_record.",
        )
        self.live_instances = Gauge(
            "hygon_dcu_live_instances", "Live partitions on the node, by profile."
        )
        self.allocate_seconds = Histogram(
            "hygon_dcu_allocate_duration_seconds",
            "Allocate latency.",
            (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
        )
        self.registered = Gauge(
            "hygon_dcu_kubelet_registered", "1 while registered with the kubelet."
        )

    def all(self) -> list[_Metric]:
        return [
            self.allocations,
            self.allocation_failures,
            self.reclaim_actions,
            self.live_instances,
            self.allocate_seconds,
            self.registered,
        ]

    def render(self) -> str:
        lines: list[str] = []
        for metric in self.all():
            lines.extend(metric.header())
            lines.extend(metric.render())
        return "\n".join(lines) + "\n"
