"""The counters a bounded HTTPS server (``serving.server``) keeps, named under its program's
prefix: each program's metrics extend these with their own series."""

from __future__ import annotations

from hygon_dcu_plugin.prometheus_text import CONTENT_TYPE, Counter

__all__ = ["CONTENT_TYPE", "ServerMetrics"]


class ServerMetrics:
    """Bad requests, refused connections, failed handshakes and certificate reloads, every
    known series at 0 from the start so dashboards see it at once. ``render`` is the
    program's: it orders these among its own series."""

    def __init__(self, prefix: str) -> None:
        self.bad_requests = Counter(
            prefix + "bad_requests_total", "Requests refused with an HTTP error, by reason."
        )
        self.tls_reloads = Counter(
            prefix + "tls_reloads_total", "Reloads of the serving certificate, by result."
        )
        self.handshake_failures = Counter(
            prefix + "tls_handshake_failures_total", "TLS handshakes that failed."
        )
        self.connections_refused = Counter(
            prefix + "connections_refused_total",
            "Connections closed unread because the connection limit was reached.",
        )
        for result in ("success", "failure"):
            self.tls_reloads.zero(result=result)
        self.handshake_failures.zero()
        self.connections_refused.zero()

    def bad_request(self, reason: str) -> None:
        self.bad_requests.inc(reason=reason)

    def tls_reload(self, success: bool) -> None:
        self.tls_reloads.inc(result="success" if success else "failure")

    def handshake_failure(self) -> None:
        self.handshake_failures.inc()

    def connection_refused(self) -> None:
        self.connections_refused.inc()

    def render(self) -> str:
        raise NotImplementedError
