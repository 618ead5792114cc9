"""Counters of the webhook's decisions, on the image's one Prometheus implementation."""

from __future__ import annotations

from collections.abc import Iterable

from hygon_dcu_plugin.prometheus_text import CONTENT_TYPE, Counter, render
from hygon_dcu_plugin.request import Reason

__all__ = ["CONTENT_TYPE", "Metrics"]


class Metrics:
    """Every known series starts at 0 so dashboards see it at once."""

    def __init__(self) -> None:
        self.reviews = Counter(
            "hygon_dcu_admission_reviews_total", "Pod admission reviews answered, by decision."
        )
        self.denials = Counter(
            "hygon_dcu_admission_denials_total",
            "Rules broken by denied pods (a pod may break several).",
        )
        self.bad_requests = Counter(
            "hygon_dcu_admission_bad_requests_total",
            "Requests refused with an HTTP error, by reason.",
        )
        self.tls_reloads = Counter(
            "hygon_dcu_admission_tls_reloads_total",
            "Reloads of the serving certificate, by result.",
        )
        self.handshake_failures = Counter(
            "hygon_dcu_admission_tls_handshake_failures_total", "TLS handshakes that failed."
        )
        self.connections_refused = Counter(
            "hygon_dcu_admission_connections_refused_total",
            "Connections closed unread because the connection limit was reached.",
        )
        for decision in ("allowed", "denied"):
            self.reviews.zero(decision=decision)
        # The rule label is the request model's Reason: one series for each.
        for reason in Reason:
            self.denials.zero(rule=reason.value)
        for result in ("success", "failure"):
            self.tls_reloads.zero(result=result)
        self.handshake_failures.zero()
        self.connections_refused.zero()

    def review(self, allowed: bool, rules: Iterable[Reason] = ()) -> None:
        self.reviews.inc(decision="allowed" if allowed else "denied")
        for reason in sorted(set(rules)):
            self.denials.inc(rule=reason.value)

    def bad_request(self, reason: str) -> None:
        self.bad_requests.inc(reason=reason)

    def tls_reload(self, success: bool) -> None:
        self.tls_reloads.inc(result="success" if success else "failure")

    def handshake_failure(self) -> None:
        self.handshake_failures.inc()

    def connection_refused(self) -> None:
        self.connections_refused.inc()

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
