"""``hygon-dcu-plugin extender``: the scheduler extender process (docs/dev/extender.md).

Flags, then wiring: API access, the state and its refresh thread, the verbs, the HTTPS server
(TLS only: the scheduler reaches it with ``enableHTTPS``). SIGTERM fails /healthz at once and
stops serving after ``--shutdown-delay-seconds``; a second signal stops at once.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import threading

from hygon_dcu_plugin import logs
from hygon_dcu_plugin.config import kube_name_problem
from hygon_dcu_plugin.extender.client_auth import ClientVerifyingReloader
from hygon_dcu_plugin.extender.decide import BINPACK, NODE_POLICIES
from hygon_dcu_plugin.extender.kube import KubernetesExtenderApi
from hygon_dcu_plugin.extender.metrics import ExtenderMetrics
from hygon_dcu_plugin.extender.server import (
    DEFAULT_CERT,
    DEFAULT_KEY,
    VERB_PATHS,
    ExtenderServer,
    ProbeServer,
    make_probe_server,
    make_server,
)
from hygon_dcu_plugin.extender.state import (
    DEFAULT_REFRESH_SECONDS,
    DEFAULT_RESERVATION_SECONDS,
    ExtenderState,
)
from hygon_dcu_plugin.extender.verbs import Extender
from hygon_dcu_plugin.serving import malloc_tuning
from hygon_dcu_plugin.serving.gc_pauses import FullPauses
from hygon_dcu_plugin.serving.server import (
    DEFAULT_MAX_CONNECTIONS,
    MAX_CONNECTIONS_HELP,
    bind_or_explain,
    stop_on_signals,
)
from hygon_dcu_plugin.serving.tls import CertificateReloader
from hygon_dcu_plugin.vocabulary import SCHEDULER_NAME

log = logging.getLogger(__name__)

NAMESPACE_ENV = "POD_NAMESPACE"
# Inclusive bounds: a refresh below the floor busy-loops against the API server; the
# reservation warning must wait a few refreshes or it is given before a carve can be seen.
REFRESH_BOUNDS = (0.1, 300.0)
RESERVATION_BOUNDS = (1.0, 86400.0)
RESERVATION_REFRESHES = 3


class UsageError(ValueError):
    pass


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hygon-dcu-plugin extender",
        description="kube-scheduler extender for Hygon DCU partitions: filter, prioritize and "
        "bind from each node's geometry Lease, reserving card and slices on the pod.",
    )
    parser.add_argument(
        "--address",
        default="0.0.0.0",  # noqa: S104 - serves the pod network
        help="address to listen on ('::' for IPv6)",
    )
    parser.add_argument("--port", type=int, default=8443)
    parser.add_argument("--cert-file", default=DEFAULT_CERT, help="PEM certificate (chain)")
    parser.add_argument("--key-file", default=DEFAULT_KEY, help="PEM private key")
    parser.add_argument(
        "--namespace",
        default=os.environ.get(NAMESPACE_ENV),
        help=f"namespace of the geometry Leases (the plugin's); default ${NAMESPACE_ENV}",
    )
    parser.add_argument(
        "--policy",
        default=BINPACK,
        choices=NODE_POLICIES,
        help="binpack: the fullest node that fits; spread: the emptiest",
    )
    parser.add_argument(
        "--reservation-seconds",
        type=float,
        default=DEFAULT_RESERVATION_SECONDS,
        help="a reservation still not carved this long after it was made gets a Warning Event "
        "on its pod; it is kept while the pod is bound and not finished",
    )
    parser.add_argument(
        "--refresh-seconds",
        type=float,
        default=DEFAULT_REFRESH_SECONDS,
        help="how often the geometry Leases and reserved pods are listed",
    )
    parser.add_argument(
        "--client-ca-file",
        default=None,
        help="PEM CA: handshakes then require a client certificate it signed (kube-scheduler's "
        "extender tlsConfig certFile/keyFile); any client otherwise",
    )
    parser.add_argument(
        "--probe-port",
        type=int,
        default=None,
        help="also serve GET /healthz and /metrics (never the verbs) on this port, with no "
        "client certificate asked (the kubelet's probes and Prometheus present none); off by "
        "default",
    )
    parser.add_argument(
        "--scheduler-name",
        default=SCHEDULER_NAME,
        help="bind only pods whose spec.schedulerName is this (the second scheduler's profile)",
    )
    parser.add_argument(
        "--kubeconfig", default=None, help="kubeconfig file; in-cluster config otherwise"
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
        help="after SIGTERM, keep answering (with /healthz failing) this long; a second "
        "signal stops at once",
    )
    parser.add_argument(
        "--log-level", default="info", choices=["debug", "info", "warning", "error"]
    )
    return parser


def check(options: argparse.Namespace) -> None:
    """Refuse settings the extender cannot run with (UsageError names the flag and the fix)."""
    if not options.namespace:
        raise UsageError(
            f"--namespace is required (or set ${NAMESPACE_ENV}): the namespace of the geometry "
            "Leases, the device plugin's"
        )
    problem = kube_name_problem(options.namespace, subdomain=False)
    if problem:
        raise UsageError(f"--namespace {options.namespace[:80]!r} {problem}")
    for flag, value, (low, high) in (
        ("--refresh-seconds", options.refresh_seconds, REFRESH_BOUNDS),
        ("--reservation-seconds", options.reservation_seconds, RESERVATION_BOUNDS),
    ):
        if not math.isfinite(value) or not low <= value <= high:
            raise UsageError(f"{flag} {value:g} must be a number from {low:g} to {high:g}")
    if options.reservation_seconds < RESERVATION_REFRESHES * options.refresh_seconds:
        raise UsageError(
            f"--reservation-seconds {options.reservation_seconds:g} must be at least "
            f"{RESERVATION_REFRESHES} x --refresh-seconds ({options.refresh_seconds:g}), or a "
            "reservation is reported as not carved before its carve can be seen"
        )
    if not 0 <= options.port <= 65535:
        raise UsageError(f"--port {options.port} is not a port number")
    if options.probe_port is not None and (
        not 0 <= options.probe_port <= 65535 or options.probe_port == options.port != 0
    ):
        raise UsageError(
            f"--probe-port {options.probe_port} is not a port number other than --port's"
        )
    problem = kube_name_problem(options.scheduler_name, subdomain=True)
    if problem:
        raise UsageError(f"--scheduler-name {options.scheduler_name[:80]!r} {problem}")
    if options.max_connections < 1:
        raise UsageError("--max-connections must be at least 1")
    if not math.isfinite(options.shutdown_delay_seconds) or options.shutdown_delay_seconds < 0:
        raise UsageError("--shutdown-delay-seconds must be a number of seconds, 0 or more")


def main(argv: list[str]) -> int:
    try:
        options = build_parser().parse_args(argv)
    except SystemExit as exit_:  # --help, or a usage error argparse already explained
        return exit_.code if isinstance(exit_.code, int) else 2
    logs.setup(options.log_level)
    try:
        check(options)
    except UsageError as error:
        log.error("startup_failed", extra={"error": str(error)})
        return 2
    if not malloc_tuning.tune():
        log.warning("malloc_not_tuned", extra={"detail": "no glibc mallopt; memory may grow"})
    try:
        api = KubernetesExtenderApi(options.kubeconfig)
    except Exception as error:
        where = options.kubeconfig or "the in-cluster service account"
        log.error(
            "startup_failed",
            extra={
                "error": f"cannot set up Kubernetes API access from {where}: {error}; run it "
                "in a pod with a service account or pass --kubeconfig"
            },
        )
        return 2
    state = ExtenderState(
        api,
        options.namespace,
        refresh_seconds=options.refresh_seconds,
        reservation_seconds=options.reservation_seconds,
    )
    metrics = ExtenderMetrics(sample=state.counts)
    state.on_release = lambda released: metrics.release(released.why)
    state.after_refresh = FullPauses().after_refresh
    extender = Extender(state, api, policy=options.policy, scheduler_name=options.scheduler_name)

    def bind() -> tuple[ExtenderServer, ProbeServer | None]:
        certificates = (
            CertificateReloader(options.cert_file, options.key_file, on_reload=metrics.tls_reload)
            if options.client_ca_file is None
            else ClientVerifyingReloader(
                options.cert_file,
                options.key_file,
                options.client_ca_file,
                on_reload=metrics.tls_reload,
            )
        )
        server = make_server(
            options.address,
            options.port,
            certificates,
            metrics,
            extender,
            max_connections=options.max_connections,
        )
        if options.probe_port is None:
            return server, None
        probe = make_probe_server(
            options.address,
            options.probe_port,
            CertificateReloader(options.cert_file, options.key_file),
            server,
        )
        return server, probe

    servers = bind_or_explain(options.address, options.port, bind)
    if servers is None:
        return 2
    server, probe = servers

    stop_on_signals(server, options.shutdown_delay_seconds)
    state.start()
    if probe is not None:
        threading.Thread(target=probe.serve_forever, name="probes", daemon=True).start()
    host, port = server.server_address[:2]
    log.info(
        "listening",
        extra={
            "address": str(host),
            "port": int(port),
            "paths": sorted(VERB_PATHS),
            "namespace": options.namespace,
            "policy": options.policy,
            "scheduler": options.scheduler_name,
            "client_certificates": "required" if options.client_ca_file else "not required",
            "probe_port": None if probe is None else int(probe.server_address[1]),
        },
    )
    try:
        server.serve_forever()
    finally:
        state.stop()
        server.server_close()
        if probe is not None:
            probe.shutdown()
            probe.server_close()
    log.info("stopped")
    return 0
