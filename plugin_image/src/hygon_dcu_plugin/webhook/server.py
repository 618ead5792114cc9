"""The webhook's HTTPS server: ``POST /validate``, ``GET /healthz``, ``GET /metrics``.

The bounded server of ``serving.server`` (its docstring lists the bounds) with the webhook's one
endpoint, which answers a pod's CREATE and its UPDATE alike (``review.decide``). Its peak memory
is about: the interpreter and this package (25 MiB) + the held bodies (4 x 3 MiB) + one parse
(24 MiB) + 64 connections x their buffers (under 0.25 MiB each): under 80 MiB against the
Deployment's 128 MiB limit. The unit tests measure the process's peak for the costliest bodies
it accepts.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from collections.abc import Callable, Mapping
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

from hygon_dcu_plugin import logs
from hygon_dcu_plugin.pod_rules import Offered, OfferedSlices
from hygon_dcu_plugin.serving import malloc_tuning
from hygon_dcu_plugin.serving.server import (
    DEFAULT_MAX_BODY,
    DEFAULT_MAX_CONNECTIONS,
    MAX_CONNECTIONS_HELP,
    REQUEST_TIMEOUT,
    BoundedHandler,
    BoundedServer,
    bind_or_explain,
    stop_on_signals,
)
from hygon_dcu_plugin.serving.tls import CertificateReloader
from hygon_dcu_plugin.webhook.metrics import Metrics
from hygon_dcu_plugin.webhook.pod_writes import UNGUARDED, PodWriters
from hygon_dcu_plugin.webhook.review import decide

if TYPE_CHECKING:
    from hygon_dcu_plugin.webhook.offered import OfferedProfiles

log = logging.getLogger(__name__)

VALIDATE_PATH = "/validate"
DEFAULT_CERT = "/etc/hygon-dcu-admission/tls/tls.crt"
DEFAULT_KEY = "/etc/hygon-dcu-admission/tls/tls.key"


class AdmissionServer(BoundedServer):
    """The bounded server (``serving.server``) answering AdmissionReviews at VALIDATE_PATH."""

    metrics: Metrics

    def __init__(
        self,
        address: tuple[str, int],
        certificates: CertificateReloader,
        metrics: Metrics,
        *,
        offered: Callable[[], Offered] = lambda: None,
        slice_cards: Callable[[], OfferedSlices] = lambda: None,
        writers: PodWriters = UNGUARDED,
        **bounds: Any,
    ) -> None:
        self.offered = offered  # the profiles the nodes publish, or None (webhook/offered.py)
        self.slice_cards = slice_cards  # the cards offered for slices, or None
        self.writers = writers  # the product's accounts whose pod UPDATEs are checked
        super().__init__(address, certificates, metrics, **bounds)

    def handler(self) -> type[BoundedHandler]:
        return AdmissionHandler


class AdmissionHandler(BoundedHandler):
    server: AdmissionServer
    server_version = "hygon-dcu-admission"
    post_paths: Mapping[str, str] = {VALIDATE_PATH: "review"}
    service = "webhook"

    def _answer(self, target: str, length: int, started: float) -> None:
        """Read, check and answer the body POSTed to ``target`` (a value of post_paths)."""
        offered, slice_cards = self.server.offered(), self.server.slice_cards()
        decision = self._parsed(
            length,
            "the webhook is busy checking other pods; retry",
            lambda document: decide(document, offered, slice_cards, self.server.writers),
        )
        if decision is None:
            return
        findings = decision.findings
        self.server.metrics.review(decision.allowed, findings.rules)
        # Rules in the order their first violation was found.
        rules = list(dict.fromkeys(violation.rule.value for violation in findings.kept))
        rules += sorted(rule.value for rule in findings.rules if rule.value not in rules)
        # Before Kubernetes 1.30 every pod update of the cluster is sent here (the guard of
        # pod_writes.py); the ones it admits are logged at debug only.
        quiet = decision.allowed and decision.operation == "UPDATE"
        log.log(
            logging.DEBUG if quiet else logging.INFO,
            "admission_review",
            extra={
                "uid": decision.uid,
                "operation": decision.operation,
                "namespace": decision.namespace,
                "pod": decision.name,
                "allowed": decision.allowed,
                "rules": rules,
                "violations": findings.total,
                "why": decision.message() if not decision.allowed else "",
                "duration_ms": round((time.monotonic() - started) * 1000, 3),
            },
        )
        payload = json.dumps(decision.response()).encode()
        self._send(HTTPStatus.OK, payload, "application/json")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hygon-dcu-plugin webhook",
        description="Validating admission webhook for Hygon DCU partition requests.",
    )
    parser.add_argument("--cert-file", default=DEFAULT_CERT, help="PEM certificate (chain)")
    parser.add_argument("--key-file", default=DEFAULT_KEY, help="PEM private key")
    parser.add_argument(
        "--address",
        default="0.0.0.0",  # noqa: S104 - serves the pod network
        help="address to listen on ('::' for IPv6)",
    )
    parser.add_argument("--port", type=int, default=8443)
    parser.add_argument(
        "--max-body-bytes",
        type=int,
        default=DEFAULT_MAX_BODY,
        help="larger bodies are refused (413) before they are read",
    )
    parser.add_argument(
        "--max-connections",
        type=int,
        default=DEFAULT_MAX_CONNECTIONS,
        help=MAX_CONNECTIONS_HELP,
    )
    parser.add_argument(
        "--shutdown-delay-seconds",
        type=float,
        default=5.0,
        help="after SIGTERM, keep answering (with /healthz failing) this long so the API "
        "server stops sending before the port closes; a second signal stops at once",
    )
    parser.add_argument(
        "--geometry-namespace",
        default="",
        help="the device plugins' namespace: read the geometry Leases there and refuse sizes "
        "no node offers (needs list on leases there); empty: no such check",
    )
    parser.add_argument("--geometry-refresh-seconds", type=float, default=30.0)
    parser.add_argument(
        "--plugin-user",
        default="",
        help="the device plugin's username (system:serviceaccount:NAMESPACE:NAME): its pod "
        "UPDATEs may change only grant annotations; empty: not checked",
    )
    parser.add_argument(
        "--extender-user",
        default="",
        help="the scheduler extender's username: its pod UPDATEs may change only the "
        "reservation annotation and the reserved label; empty: not checked",
    )
    parser.add_argument(
        "--log-level", default="info", choices=["debug", "info", "warning", "error"]
    )
    return parser


def serve(
    address: str,
    port: int,
    cert_file: str,
    key_file: str,
    *,
    max_body: int = DEFAULT_MAX_BODY,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    request_timeout: float = REQUEST_TIMEOUT,
    offered: Callable[[], Offered] = lambda: None,
    slice_cards: Callable[[], OfferedSlices] = lambda: None,
    writers: PodWriters = UNGUARDED,
) -> AdmissionServer:
    """Bind the server (port 0 picks a free one); the caller runs ``serve_forever``."""
    metrics = Metrics()
    certificates = CertificateReloader(cert_file, key_file, on_reload=metrics.tls_reload)
    return AdmissionServer(
        (address, port),
        certificates,
        metrics,
        max_body=max_body,
        max_connections=max_connections,
        request_timeout=request_timeout,
        offered=offered,
        slice_cards=slice_cards,
        writers=writers,
    )


def start_offered(namespace: str, refresh_seconds: float) -> OfferedProfiles | None:
    """Start reading the geometry Leases of ``namespace`` ('' : no such check). Without a
    service account token the webhook still serves, without the check: crash-looping would
    refuse every partition pod (failurePolicy Fail) for want of one optional check."""
    if not namespace:
        return None
    # Loaded only when asked: the geometry reader brings the node layer and the client.
    from kubernetes.config import ConfigException  # noqa: PLC0415

    from hygon_dcu_plugin.vocabulary import GEOMETRY_SELECTOR  # noqa: PLC0415
    from hygon_dcu_plugin.webhook.offered import (  # noqa: PLC0415
        OfferedProfiles,
        lease_lister,
    )

    try:
        lister = lease_lister(namespace, GEOMETRY_SELECTOR)
    except ConfigException as error:
        log.error(
            "geometry_check_off",
            extra={
                "error": str(error)[:300],
                "fix": "mount the service account token (automountServiceAccountToken) and "
                "grant list on leases in that namespace, or drop --geometry-namespace",
            },
        )
        return None
    offered = OfferedProfiles(
        lister, refresh_seconds=refresh_seconds, fresh_seconds=4 * refresh_seconds
    )
    offered.start()
    return offered


def main(argv: list[str]) -> int:
    try:
        options = build_parser().parse_args(argv)
    except SystemExit as exit_:  # --help, or a usage error argparse already explained
        return exit_.code if isinstance(exit_.code, int) else 2
    logs.setup(options.log_level)
    if not malloc_tuning.tune():
        log.warning("malloc_not_tuned", extra={"detail": "no glibc mallopt; memory may grow"})
    offered = start_offered(options.geometry_namespace, options.geometry_refresh_seconds)
    server = bind_or_explain(
        options.address,
        options.port,
        lambda: serve(
            options.address,
            options.port,
            options.cert_file,
            options.key_file,
            max_body=options.max_body_bytes,
            max_connections=options.max_connections,
            offered=offered.profiles if offered is not None else lambda: None,
            slice_cards=offered.slice_cards if offered is not None else lambda: None,
            writers=PodWriters(options.plugin_user, options.extender_user),
        ),
    )
    if server is None:
        return 2

    stop_on_signals(server, options.shutdown_delay_seconds)
    host, port = server.server_address[:2]
    log.info("listening", extra={"address": str(host), "port": int(port), "path": VALIDATE_PATH})
    try:
        server.serve_forever()
    finally:
        server.server_close()
    log.info("stopped")
    return 0


if __name__ == "__main__":
    import sys

    raise SystemExit(main(sys.argv[1:]))
