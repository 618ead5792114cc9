"""The extender's HTTPS server: ``POST /filter``, ``/prioritize``, ``/bind``, ``GET /healthz``,
``GET /metrics`` (docs/dev/extender.md); and the probes' server, ``GET /healthz`` and
``GET /metrics`` without the verbs, for the kubelet and Prometheus when the first requires a
client certificate.

It is the serving kit's bounded server (``serving.server``), as the webhook's is: the TLS
handshake in the connection's thread with the certificate current at that moment, the bounds
on connections, request time, header and body bytes, and parses; only the endpoints differ.
/healthz answers 200 once a geometry Lease list succeeded within the last few refresh periods,
else 503 with why; the verbs answer 503 until the reservation table is rebuilt and the first
Leases are read.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from http import HTTPStatus
from typing import Any

from hygon_dcu_plugin.extender.metrics import ExtenderMetrics
from hygon_dcu_plugin.extender.verbs import Extender, Verb
from hygon_dcu_plugin.extender.wire import WireError, parse_args, parse_binding
from hygon_dcu_plugin.serving.server import (
    DEFAULT_MAX_BODY,
    DEFAULT_MAX_CONNECTIONS,
    REQUEST_TIMEOUT,
    BoundedHandler,
    BoundedServer,
)
from hygon_dcu_plugin.serving.tls import CertificateReloader

log = logging.getLogger(__name__)

DEFAULT_CERT = "/etc/hygon-dcu-extender/tls/tls.crt"
DEFAULT_KEY = "/etc/hygon-dcu-extender/tls/tls.key"
VERB_PATHS = {f"/{verb}": verb for verb in Verb}
# The kubelet's readiness and liveness probes and a Prometheus scrape, one connection each at a
# time, and spares.
PROBE_CONNECTIONS = 8


class ExtenderServer(BoundedServer):
    metrics: ExtenderMetrics

    def __init__(
        self,
        address: tuple[str, int],
        certificates: CertificateReloader,
        metrics: ExtenderMetrics,
        extender: Extender,
        *,
        max_body: int = DEFAULT_MAX_BODY,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        request_timeout: float = REQUEST_TIMEOUT,
    ) -> None:
        self.extender = extender
        super().__init__(
            address,
            certificates,
            metrics,
            max_body=max_body,
            max_connections=max_connections,
            request_timeout=request_timeout,
        )

    def handler(self) -> type[BoundedHandler]:
        return ExtenderHandler


class ProbeServer(ExtenderServer):
    """``GET /healthz`` and ``GET /metrics``, with no client certificate asked: the kubelet's
    probes and Prometheus present none, while the verbs' port may require one
    (``--client-ca-file``). A client here can read the extender's health and counters, never
    filter or bind. It answers what the verbs' server would, failing with it while draining
    (``draining`` is that server's)."""

    def handler(self) -> type[BoundedHandler]:
        return ProbeHandler


class ExtenderHandler(BoundedHandler):
    server: ExtenderServer
    server_version = "hygon-dcu-extender"
    post_paths: Mapping[str, Verb] = VERB_PATHS
    service = "extender"

    def _health(self) -> tuple[HTTPStatus, str]:
        if self.server.draining.is_set():
            return HTTPStatus.SERVICE_UNAVAILABLE, "shutting down"
        healthy, why = self.server.extender.state.health()
        return (HTTPStatus.OK, "ok") if healthy else (HTTPStatus.SERVICE_UNAVAILABLE, why)

    def _answer(self, target: str, length: int, started: float) -> None:
        verb = Verb(target)  # a value of VERB_PATHS
        document = self._parsed(
            length, "the extender is busy reading other requests; retry", lambda parsed: parsed
        )
        if document is None:
            return
        extender = self.server.extender
        try:
            if verb is Verb.BIND:
                binding = parse_binding(document)
                answer = extender.bind(binding)
                self.server.metrics.bind(answer.outcome)
                payload: Any = answer.result()
                fields: dict[str, Any] = {
                    "namespace": binding.pod.namespace,
                    "pod": binding.pod.name,
                    "node": binding.node,
                    "outcome": answer.outcome.value,
                    "why": answer.error,
                }
            else:
                args = parse_args(document)
                if not extender.ready:
                    self._error(
                        HTTPStatus.SERVICE_UNAVAILABLE,
                        "not-ready",
                        "the extender has not read the cluster yet: " + extender.state.health()[1],
                        {"Retry-After": "1"},
                    )
                    return
                if verb is Verb.FILTER:
                    payload = extender.filter(args)
                    fields = {"passed": len(payload["nodenames"])}
                else:
                    payload = extender.prioritize(args)
                    fields = {}
                fields = {
                    "namespace": args.pod.namespace,
                    "pod": args.pod.name,
                    "nodes": len(args.node_names),
                    **fields,
                }
        except WireError as error:
            self._error(HTTPStatus.BAD_REQUEST, error.reason, error.message)
            return
        except Exception:  # a bug here must still answer, never drop the connection
            log.error("extender_failed", extra={"verb": verb.value}, exc_info=True)
            self._error(
                HTTPStatus.INTERNAL_SERVER_ERROR,
                "internal-error",
                f"the extender failed to answer this {verb} request; see its log",
            )
            return
        elapsed = time.monotonic() - started
        self.server.metrics.observe(verb, elapsed)
        log.info(verb.value, extra={**fields, "duration_ms": round(elapsed * 1000, 3)})
        self._send(HTTPStatus.OK, json.dumps(payload).encode(), "application/json")


class ProbeHandler(ExtenderHandler):
    """The serving kit's GET and HEAD /healthz and /metrics; no verb is a path here."""

    post_paths: Mapping[str, Verb] = {}


def make_server(
    address: str,
    port: int,
    certificates: CertificateReloader,
    metrics: ExtenderMetrics,
    extender: Extender,
    **settings: Any,
) -> ExtenderServer:
    """Bind the server (port 0 picks a free one); the caller runs ``serve_forever``."""
    return ExtenderServer((address, port), certificates, metrics, extender, **settings)


def make_probe_server(
    address: str,
    port: int,
    certificates: CertificateReloader,
    serving: ExtenderServer,
) -> ProbeServer:
    """The probes' and scrapes' server beside ``serving`` (port 0 picks a free one): its
    certificate without a client CA, its state, its metrics, its draining; a few connections
    (the kubelet's and Prometheus')."""
    probe = ProbeServer(
        (address, port),
        certificates,
        serving.metrics,
        serving.extender,
        max_connections=PROBE_CONNECTIONS,
    )
    probe.draining = serving.draining
    return probe
