"""The counters a bounded HTTPS server (``serving.server``) keeps, named under its program's
prefix, in the program's registry (``exposition``): each program adds its own families."""

from __future__ import annotations

from prometheus_client import Counter

from hygon_dcu_plugin.exposition import CONTENT_TYPE, program_registry, render

__all__ = ["CONTENT_TYPE", "ServerMetrics"]


class ServerMetrics:
    """Bad requests, refused connections, failed handshakes and certificate reloads, every
    known series at 0 from the start so dashboards see it at once (bad requests by reason
    appear with the first one)."""

    def __init__(self, program: str, prefix: str) -> None:
        self.registry = program_registry(program)
        self.bad_requests = Counter(
            prefix + "bad_requests_total",
            "Requests refused with an HTTP error, by reason.",
            ["reason"],
            registry=self.registry,
        )
        self.tls_reloads = Counter(
            prefix + "tls_reloads_total",
            "Reloads of the serving certificate, by result.",
            ["result"],
            registry=self.registry,
        )
        self.handshake_failures = Counter(
            prefix + "tls_handshake_failures_total",
            "TLS handshakes that failed.",
            registry=self.registry,
        )
        self.connections_refused = Counter(
            prefix + "connections_refused_total",
            "Connections closed unread because the connection limit was reached.",
            registry=self.registry,
        )
        for result in ("success", "failure"):
            self.tls_reloads.labels(result)

    def bad_request(self, reason: str) -> None:
        self.bad_requests.labels(reason).inc()

    def tls_reload(self, success: bool) -> None:
        self.tls_reloads.labels("success" if success else "failure").inc()

    def handshake_failure(self) -> None:
        self.handshake_failures.inc()

    def connection_refused(self) -> None:
        self.connections_refused.inc()

    def render(self) -> str:
        return render(self.registry)
