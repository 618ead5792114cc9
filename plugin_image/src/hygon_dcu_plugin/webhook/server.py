"""The webhook's HTTPS server: ``POST /validate``, ``GET /healthz``, ``GET /metrics``.

Standard library only (http.server and ssl). The TLS handshake runs in the connection's own
thread, with the certificate current at that moment, so a slow client never stalls the
accept loop and a rotated certificate is served from the next handshake on.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import signal
import socket
import ssl
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType
from typing import Any

from hygon_dcu_plugin.webhook import logs
from hygon_dcu_plugin.webhook.logs import log
from hygon_dcu_plugin.webhook.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from hygon_dcu_plugin.webhook.metrics import Metrics
from hygon_dcu_plugin.webhook.review import BadReview, decide, parse_body
from hygon_dcu_plugin.webhook.tls import CertificateError, CertificateReloader

VALIDATE_PATH = "/validate"
DEFAULT_CERT = "/etc/hygon-dcu-admission/tls/tls.crt"
DEFAULT_KEY = "/etc/hygon-dcu-admission/tls/tls.key"
# The API server caps a request body at 3 MiB; an AdmissionReview carries the object once
# (twice on UPDATE) plus metadata, so 8 MiB leaves room without inviting abuse.
DEFAULT_MAX_BODY = 8 * 1024 * 1024


class AdmissionServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(
        self,
        address: tuple[str, int],
        certificates: CertificateReloader,
        metrics: Metrics,
        max_body: int = DEFAULT_MAX_BODY,
        connection_timeout: float = 30.0,
    ) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self.certificates = certificates
        self.metrics = metrics
        self.max_body = max_body
        self.connection_timeout = connection_timeout
        # Set on SIGTERM: /healthz fails so the endpoint is taken out of the Service, while
        # reviews are still answered until the shutdown delay is over.
        self.draining = threading.Event()
        super().__init__(address, AdmissionHandler)

    def finish_request(self, request: Any, client_address: Any) -> None:
        request.settimeout(self.connection_timeout)
        # Headers and body go out as separate writes; without NODELAY, Nagle plus the
        # client's delayed ACK would add ~40 ms to every review.
        with contextlib.suppress(OSError):
            request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            connection = self.certificates.context().wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError) as error:
            self.metrics.handshake_failure()
            log(
                logging.WARNING,
                "tls_handshake_failed",
                client=str(client_address[0]),
                error=str(error),
            )
            return
        try:
            AdmissionHandler(connection, client_address, self)
        finally:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
            connection.close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        # socketserver would print a traceback to stderr; keep the log structured.
        log(logging.ERROR, "connection_failed", client=str(client_address[0]), exc_info=True)


class AdmissionHandler(BaseHTTPRequestHandler):
    server: AdmissionServer
    protocol_version = "HTTP/1.1"  # the API server keeps connections alive
    server_version = "hygon-dcu-admission"
    sys_version = ""

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/healthz":
            if self.server.draining.is_set():
                self._send(
                    HTTPStatus.SERVICE_UNAVAILABLE, b"shutting down\n", "text/plain; charset=utf-8"
                )
            else:
                self._send(HTTPStatus.OK, b"ok\n", "text/plain; charset=utf-8")
        elif path == "/metrics":
            body = self.server.metrics.render().encode()
            self._send(HTTPStatus.OK, body, METRICS_CONTENT_TYPE)
        elif path == VALIDATE_PATH:
            self._method_not_allowed("POST")
        else:
            self._error(HTTPStatus.NOT_FOUND, "not-found", f"no endpoint at {path}")

    def do_HEAD(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/healthz" and self.server.draining.is_set():
            status = HTTPStatus.SERVICE_UNAVAILABLE
        elif path in ("/healthz", "/metrics"):
            status = HTTPStatus.OK
        else:
            status = HTTPStatus.NOT_FOUND
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self) -> None:
        started = time.monotonic()
        path = self.path.split("?", 1)[0]
        if path != VALIDATE_PATH:
            if path in ("/healthz", "/metrics"):
                self._method_not_allowed("GET, HEAD")
            else:
                self._error(HTTPStatus.NOT_FOUND, "not-found", f"no endpoint at {path}")
            return
        media_type = (self.headers.get("Content-Type") or "").split(";", 1)[0].strip().lower()
        if media_type != "application/json":
            self._error(
                HTTPStatus.UNSUPPORTED_MEDIA_TYPE,
                "wrong-content-type",
                f"Content-Type {media_type or '(none)'!r} is not supported; send application/json",
            )
            return
        body = self._read_body()
        if body is None:
            return
        try:
            decision = decide(parse_body(body))
        except BadReview as error:
            self._error(HTTPStatus.BAD_REQUEST, error.reason, error.message)
            return
        except Exception:  # a bug here must still answer, never drop the connection
            log(logging.ERROR, "review_failed", exc_info=True)
            self._error(
                HTTPStatus.INTERNAL_SERVER_ERROR,
                "internal-error",
                "the webhook failed to check this pod; see its log",
            )
            return
        rules = [violation.rule for violation in decision.violations]
        self.server.metrics.review(decision.allowed, rules)
        log(
            logging.INFO,
            "admission_review",
            uid=decision.uid,
            operation=decision.operation,
            namespace=decision.namespace,
            pod=decision.name,
            allowed=decision.allowed,
            rules=[rule.value for rule in rules],
            message="; ".join(violation.message for violation in decision.violations),
            duration_ms=round((time.monotonic() - started) * 1000, 3),
        )
        payload = json.dumps(decision.response()).encode()
        self._send(HTTPStatus.OK, payload, "application/json")

    def do_PUT(self) -> None:
        self._method_not_allowed(self._allowed_methods())

    do_DELETE = do_PUT
    do_PATCH = do_PUT
    do_OPTIONS = do_PUT

    def _allowed_methods(self) -> str:
        return "POST" if self.path.split("?", 1)[0] == VALIDATE_PATH else "GET, HEAD"

    def _read_body(self) -> bytes | None:
        length_header = self.headers.get("Content-Length")
        if self.headers.get("Transfer-Encoding"):
            self.close_connection = True
            self._error(
                HTTPStatus.LENGTH_REQUIRED,
                "chunked-body",
                "chunked bodies are not supported; send Content-Length",
            )
            return None
        if length_header is None:
            self.close_connection = True
            self._error(HTTPStatus.LENGTH_REQUIRED, "no-content-length", "send Content-Length")
            return None
        try:
            length = int(length_header)
        except ValueError:
            length = -1
        if length < 0:
            self.close_connection = True
            self._error(
                HTTPStatus.BAD_REQUEST,
                "bad-content-length",
                f"Content-Length {length_header!r} is not a byte count",
            )
            return None
        if length > self.server.max_body:
            self.close_connection = True
            self._error(
                HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                "body-too-large",
                f"the body is {length} bytes; at most {self.server.max_body} are accepted",
            )
            return None
        try:
            body = self.rfile.read(length)
        except OSError as error:
            # The client vanished mid-body (TLS EOF, reset, timeout): nobody to answer.
            self.close_connection = True
            self.server.metrics.bad_request("short-body")
            log(
                logging.WARNING,
                "bad_request",
                reason="short-body",
                error=str(error),
                method=self.command,
                path=self.path,
            )
            return None
        if len(body) != length:
            self.close_connection = True
            self._error(
                HTTPStatus.BAD_REQUEST,
                "short-body",
                f"the body ended after {len(body)} of {length} bytes",
            )
            return None
        return body

    def _method_not_allowed(self, allowed: str) -> None:
        self._error(
            HTTPStatus.METHOD_NOT_ALLOWED,
            "method-not-allowed",
            f"{self.command} is not allowed on {self.path.split('?', 1)[0]}; use {allowed}",
            headers={"Allow": allowed},
        )

    def _error(
        self,
        status: HTTPStatus,
        reason: str,
        message: str,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.server.metrics.bad_request(reason)
        log(
            logging.WARNING,
            "bad_request",
            status=int(status),
            reason=reason,
            message=message,
            method=self.command,
            path=self.path,
        )
        body = json.dumps({"error": message, "reason": reason, "code": int(status)}).encode()
        self._send(status, body, "application/json", headers)

    def _send(
        self,
        status: HTTPStatus,
        body: bytes,
        content_type: str,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        # Requests are logged once, as structured events, by the handlers above.
        log(logging.DEBUG, "http", detail=format % args)

    def log_error(self, format: str, *args: Any) -> None:
        log(logging.WARNING, "http_error", detail=format % args)


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
    parser.add_argument("--max-body-bytes", type=int, default=DEFAULT_MAX_BODY)
    parser.add_argument(
        "--shutdown-delay-seconds",
        type=float,
        default=5.0,
        help="after SIGTERM, keep answering (with /healthz failing) this long so the API "
        "server stops sending before the port closes; a second signal stops at once",
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
    max_body: int = DEFAULT_MAX_BODY,
) -> AdmissionServer:
    """Bind the server (port 0 picks a free one); the caller runs ``serve_forever``."""
    metrics = Metrics()
    certificates = CertificateReloader(cert_file, key_file, on_reload=metrics.tls_reload)
    return AdmissionServer((address, port), certificates, metrics, max_body=max_body)


def main(argv: list[str]) -> int:
    try:
        options = build_parser().parse_args(argv)
    except SystemExit as exit_:  # --help, or a usage error argparse already explained
        return exit_.code if isinstance(exit_.code, int) else 2
    logs.configure(options.log_level)
    try:
        server = serve(
            options.address,
            options.port,
            options.cert_file,
            options.key_file,
            options.max_body_bytes,
        )
    except CertificateError as error:
        log(logging.ERROR, "startup_failed", error=str(error))
        return 2
    except OSError as error:
        log(
            logging.ERROR,
            "startup_failed",
            error=f"cannot listen on {options.address}:{options.port}: {error.strerror}",
        )
        return 2

    def stop(signum: int, _frame: FrameType | None) -> None:
        delay = 0.0 if server.draining.is_set() else options.shutdown_delay_seconds
        server.draining.set()
        log(logging.INFO, "stopping", signal=signal.Signals(signum).name, delay_seconds=delay)
        # shutdown() waits for serve_forever to return: call it off the serving thread.
        timer = threading.Timer(delay, server.shutdown)
        timer.daemon = True
        timer.start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    host, port = server.server_address[:2]
    log(logging.INFO, "listening", address=str(host), port=int(port), path=VALIDATE_PATH)
    try:
        server.serve_forever()
    finally:
        server.server_close()
    log(logging.INFO, "stopped")
    return 0


if __name__ == "__main__":
    import sys

    raise SystemExit(main(sys.argv[1:]))
