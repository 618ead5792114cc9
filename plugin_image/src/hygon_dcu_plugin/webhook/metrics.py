"""Counters of the webhook's decisions, beside its server's (``serving.metrics``)."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import Counter

from hygon_dcu_plugin.request import Reason
from hygon_dcu_plugin.serving.metrics import CONTENT_TYPE, ServerMetrics

__all__ = ["CONTENT_TYPE", "Metrics"]


class Metrics(ServerMetrics):
    """Every known series starts at 0 so dashboards see it at once."""

    def __init__(self) -> None:
        super().__init__("admission", "hygon_dcu_admission_")
        self.reviews = Counter(
            "hygon_dcu_admission_reviews_total",
            "Pod admission reviews answered, by decision.",
            ["decision"],
            registry=self.registry,
        )
        self.denials = Counter(
            "hygon_dcu_admission_denials_total",
            "Rules broken by denied pods (a pod may break several).",
            ["rule"],
            registry=self.registry,
        )
        for decision in ("allowed", "denied"):
            self.reviews.labels(decision)
        # The rule label is the request model's Reason: one series for each.
        for reason in Reason:
            self.denials.labels(reason.value)

    def review(self, allowed: bool, rules: Iterable[Reason] = ()) -> None:
        self.reviews.labels("allowed" if allowed else "denied").inc()
        for reason in sorted(set(rules)):
            self.denials.labels(reason.value).inc()
