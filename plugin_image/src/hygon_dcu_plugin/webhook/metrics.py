"""Counters of the webhook's decisions, on the image's one Prometheus implementation, beside
its server's (``serving.metrics``)."""

from __future__ import annotations

from collections.abc import Iterable

from hygon_dcu_plugin.prometheus_text import CONTENT_TYPE, Counter, render
from hygon_dcu_plugin.request import Reason
from hygon_dcu_plugin.serving.metrics import ServerMetrics

__all__ = ["CONTENT_TYPE", "Metrics"]


class Metrics(ServerMetrics):
    """Every known series starts at 0 so dashboards see it at once."""

    def __init__(self) -> None:
        super().__init__("hygon_dcu_admission_")
        self.reviews = Counter(
            "hygon_dcu_admission_reviews_total", "Pod admission reviews answered, by decision."
        )
        self.denials = Counter(
            "hygon_dcu_admission_denials_total",
            "Rules broken by denied pods (a pod may break several).",
        )
        for decision in ("allowed", "denied"):
            self.reviews.zero(decision=decision)
        # The rule label is the request model's Reason: one series for each.
        for reason in Reason:
            self.denials.zero(rule=reason.value)

    def review(self, allowed: bool, rules: Iterable[Reason] = ()) -> None:
        self.reviews.inc(decision="allowed" if allowed else "denied")
        for reason in sorted(set(rules)):
            self.denials.inc(rule=reason.value)

    def render(self) -> str:
        # bad_requests has no known series before the first one: render skips its header then,
        # as the previous output did.
        counters = [
            self.bad_requests,
            self.connections_refused,
            self.denials,
            self.reviews,
            self.handshake_failures,
            self.tls_reloads,
        ]
        return render([c for c in counters if c.render()])
