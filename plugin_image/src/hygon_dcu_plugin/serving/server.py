"""The bounded HTTPS server both of the image's HTTPS programs (the admission webhook, the
scheduler extender) serve from: each subclasses ``BoundedServer`` and ``BoundedHandler`` with its
own endpoints (``post_paths``, ``_answer``, ``_health``) and composes its own metrics
(``ServerMetrics``).

Standard library only (http.server and ssl). The TLS handshake runs in the connection's own
thread, with the certificate current at that moment, so a slow client never stalls the
accept loop and a rotated certificate is served from the next handshake on.

Memory and time are bounded whatever clients send:
- at most ``max_connections`` connections (each a thread). When all are taken, a new one
  takes the place of the one idle longest (never one in a handshake or a request), or is
  closed at once, unread, when none is idle; and one client address has at most half of them
  in a handshake or a request. So clients that connect and send nothing, or begin handshakes
  or requests they never finish, do not keep the API server and the kubelet's probes out;
- a handshake within ``HANDSHAKE_TIMEOUT`` of the accept; a request's line and headers within
  ``HEAD_TIMEOUT`` of its first byte and ``MAX_HEADER_BYTES``, all of it within
  ``REQUEST_TIMEOUT``;
- bodies of at most ``max_body`` bytes, refused on Content-Length before they are read; the
  bodies held at once share ``IN_FLIGHT_BODIES * max_body`` bytes;
- one parse at a time (it holds the GIL anyway), and none whose memory bound
  (``bounded_json.parse_cost``) exceeds ``parse_budget``; and glibc keeps one heap
  (``malloc_tuning``), so what one parse freed is what the next one uses.
The webhook's server says what that sums to against its Deployment's memory limit.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import logging
import signal
import socket
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType
from typing import Any, TypeVar

from hygon_dcu_plugin.serving.body import BadBody, BodyTooCostly, parse_body
from hygon_dcu_plugin.serving.budget import ByteBudget, ConnectionSlots, Slot
from hygon_dcu_plugin.serving.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from hygon_dcu_plugin.serving.metrics import ServerMetrics
from hygon_dcu_plugin.serving.reader import (
    ConnectionReader,
    HeadersTooLarge,
    RequestDeadlineExceeded,
    RequestRefused,
    wait_readable,
)
from hygon_dcu_plugin.serving.tls import CertificateError, CertificateReloader

Parsed = TypeVar("Parsed")
Bound = TypeVar("Bound")

log = logging.getLogger(__name__)

# The API server refuses request bodies over 3 MiB, and only CREATE (one object) is sent here.
DEFAULT_MAX_BODY = 3 * 1024 * 1024
# A pod whose parse would take more is refused (413) before it is parsed; a 3 MiB pod of
# ordinary text and structure fits.
DEFAULT_PARSE_BUDGET = 24 * 1024 * 1024
DEFAULT_MAX_CONNECTIONS = 64
# How many largest bodies may be held (read, waiting for or in the parse) at once.
IN_FLIGHT_BODIES = 4
# The API server waits 5 s (timeoutSeconds) for an answer; a request slower than this to
# arrive is not one it still waits for.
REQUEST_TIMEOUT = 10.0
# From the accept, for the whole handshake; and from a request's first byte, for its line and
# headers (under 1 KiB from the API server, sent in one write). Clients on the pod network
# take milliseconds; a client that takes seconds holds a thread for nothing.
HANDSHAKE_TIMEOUT = 3.0
HEAD_TIMEOUT = 3.0
# Between requests on a kept-alive connection (which gives way sooner to a new connection
# when every slot is taken).
IDLE_TIMEOUT = 30.0
# One client address may have at most 1/CLIENT_SHARE of the connections busy at once.
CLIENT_SHARE = 2
# The API server's request line and headers take well under 1 KiB.
MAX_HEADER_BYTES = 32 * 1024
# After the last answer on a connection, what is still read (and dropped) before closing.
LINGER_SECONDS = 1.0
LINGER_BYTES = 64 * 1024


class BoundedServer(ThreadingHTTPServer):
    """A thread per connection, at most ``max_connections`` of them (budget.ConnectionSlots:
    idle connections give way to new ones, one client address gets at most half the busy
    ones). A slow client holds its thread only as long as the deadlines let it: the
    handshake within HANDSHAKE_TIMEOUT of the accept, a request's line and headers within
    HEAD_TIMEOUT of its first byte, the whole request within ``request_timeout``."""

    daemon_threads = True
    # The kernel's backlog (capped by net.core.somaxconn): the accept loop takes connections
    # at once and never waits on a slot, so this only absorbs bursts between two accepts; a
    # full backlog would leave clients' connects hanging.
    request_queue_size = 1024

    def __init__(
        self,
        address: tuple[str, int],
        certificates: CertificateReloader,
        metrics: ServerMetrics,
        *,
        max_body: int = DEFAULT_MAX_BODY,
        connection_timeout: float = IDLE_TIMEOUT,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        parse_budget: int = DEFAULT_PARSE_BUDGET,
        request_timeout: float = REQUEST_TIMEOUT,
    ) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self.certificates = certificates
        self.metrics = metrics
        self.max_body = max_body
        self.connection_timeout = connection_timeout
        self.request_timeout = request_timeout
        self.max_connections = max_connections
        self.parse_budget = parse_budget
        self.bodies = ByteBudget(IN_FLIGHT_BODIES * max_body)
        # One parse at a time: parses hold the GIL, so two at once would double the peak
        # memory without answering sooner.
        self.parse_lock = threading.Lock()
        self.slots = ConnectionSlots(max_connections, max(1, max_connections // CLIENT_SHARE))
        # Set on SIGTERM: /healthz fails so the endpoint is taken out of the Service, while
        # reviews are still answered until the shutdown delay is over.
        self.draining = threading.Event()
        super().__init__(address, self.handler())

    def process_request(self, request: Any, client_address: Any) -> None:
        # Runs in the accept loop: a connection is given a slot (in place of an idle one if
        # need be) or closed at once, unread, so the excess costs neither a thread nor a
        # handshake.
        client = str(client_address[0])
        slot, evicted = self.slots.admit(request, client)
        if evicted is not None:
            log.info(
                "connection_evicted",
                extra={
                    "client": evicted.client,
                    "idle_seconds": round(time.monotonic() - evicted.idle_since, 3),
                    "for_client": client,
                },
            )
        if slot is None:
            self.shutdown_request(request)
            self._refused(
                client, "every connection is in a handshake or a request", self.max_connections
            )
            return
        thread = threading.Thread(
            target=self._serve_connection, args=(request, client_address, slot), daemon=True
        )
        try:
            thread.start()
        except BaseException:
            self.slots.release(slot)
            self.shutdown_request(request)
            raise

    def handler(self) -> type[BoundedHandler]:
        """The request handler class: each program's server names its own."""
        raise NotImplementedError

    def begin(self, slot: Slot) -> bool:
        """Count the connection busy: a handshake or a request began on it. False when it must
        be closed instead (evicted, or its client at its share; that is logged here)."""
        if self.slots.begin(slot):
            return True
        if not slot.evicted:
            self._refused(
                slot.client,
                f"the client already has {self.slots.per_client} connections in a handshake "
                "or a request; finish those first",
                self.slots.per_client,
            )
        return False

    def _refused(self, client: str, why: str, limit: int) -> None:
        self.metrics.connection_refused()
        log.warning(
            "connection_refused",
            extra={"client": client, "why": why, "limit": limit},
        )

    def _serve_connection(self, request: socket.socket, client_address: Any, slot: Slot) -> None:
        """The connection's thread: the handshake, then its requests, then a gentle close."""
        connection = None
        try:
            connection = self._handshake(request, str(client_address[0]), slot)
            if connection is not None:
                self.handler()(connection, client_address, self, slot)
                _linger(connection)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            # The slot first: an eviction must never shut down a descriptor reused after close.
            self.slots.release(slot)
            if connection is not None:
                connection.close()
            self.shutdown_request(request)  # the plain socket (detached once wrapped)

    def _handshake(self, request: socket.socket, client: str, slot: Slot) -> ssl.SSLSocket | None:
        """The TLS connection, or None (said why) when it could not be made."""
        deadline = time.monotonic() + HANDSHAKE_TIMEOUT
        # Headers and body go out as separate writes; without NODELAY, Nagle plus the
        # client's delayed ACK would add ~40 ms to every review.
        with contextlib.suppress(OSError):
            request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # Until its first byte the connection is idle: evictable, and not the client's share.
        if not wait_readable(request, HANDSHAKE_TIMEOUT):
            self._handshake_failed(client, f"no handshake began within {HANDSHAKE_TIMEOUT:g} s")
            return None
        if not self.begin(slot):
            return None
        # The ssl module keeps one deadline for the whole handshake, not one per read.
        request.settimeout(max(deadline - time.monotonic(), 0.001))
        try:
            connection = self.certificates.context().wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError) as error:
            self._handshake_failed(client, str(error))
            return None
        self.slots.rehome(slot, connection)
        self.slots.end(slot)
        connection.settimeout(self.connection_timeout)
        return connection

    def _handshake_failed(self, client: str, error: str) -> None:
        self.metrics.handshake_failure()
        log.warning("tls_handshake_failed", extra={"client": client, "error": error})

    def handle_error(self, request: Any, client_address: Any) -> None:
        # socketserver would print a traceback to stderr; keep the log structured.
        log.error("connection_failed", extra={"client": str(client_address[0])}, exc_info=True)


def _linger(connection: socket.socket) -> None:
    """Before closing, read what the client still sends, for a moment and a few KiB at most.

    Closing with unread bytes makes the kernel reset the connection, and a reset can destroy
    the answer (a 413 or 408) before the client reads it.
    """
    with contextlib.suppress(OSError):
        connection.shutdown(socket.SHUT_WR)
        deadline = time.monotonic() + LINGER_SECONDS
        drained = 0
        while drained < LINGER_BYTES:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            connection.settimeout(left)
            chunk = connection.recv(16384)
            if not chunk:
                break
            drained += len(chunk)


class BoundedHandler(BaseHTTPRequestHandler):
    server: BoundedServer
    protocol_version = "HTTP/1.1"  # the API server keeps connections alive
    sys_version = ""
    reader: ConnectionReader
    # What is POSTed where (handed to _answer), and the name busy answers give the server:
    # each program's handler sets its own, and its own _answer.
    post_paths: Mapping[str, str] = {}
    service = "server"

    def __init__(
        self, request: Any, client_address: Any, server: BoundedServer, slot: Slot
    ) -> None:
        self.slot = slot  # the connection's place in server.slots
        super().__init__(request, client_address, server)

    def setup(self) -> None:
        super().setup()
        self.rfile.close()  # replaced by a reader that keeps the request's deadlines
        self.reader = ConnectionReader(
            self.connection,
            idle_timeout=self.server.connection_timeout,
            head_timeout=HEAD_TIMEOUT,
            request_timeout=self.server.request_timeout,
            write_timeout=self.server.connection_timeout,
            # Not a lambda over self: handler -> reader -> closure -> handler would be a
            # reference cycle per connection, left for the cyclic collector (gc_pauses.py).
            on_start=functools.partial(self.server.begin, self.slot),
        )
        self.rfile = io.BufferedReader(self.reader)

    def handle_one_request(self) -> None:
        # BaseHTTPRequestHandler's, with the request's byte allowance and deadline.
        self.reader.start_request(MAX_HEADER_BYTES)
        self.headers = None  # type: ignore[assignment]  # until parse_request sets them
        self.command, self.path, self.requestline = "", "", ""
        self.request_version = self.protocol_version
        try:
            self.raw_requestline = self.rfile.readline(MAX_HEADER_BYTES + 1)
            if not self.raw_requestline:
                self.close_connection = True
                return
            if not self.reader.started:  # read from bytes that came with the previous request
                self.reader.start()
            if not self.parse_request():
                return
            method = getattr(self, "do_" + self.command, None)
            if method is None:
                self._method_not_allowed(self._allowed_methods())
                return
            method()
            self.wfile.flush()
        except RequestRefused:
            self.close_connection = True  # said why in BoundedServer.begin
        except HeadersTooLarge:
            self.close_connection = True
            self._error(
                HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE,
                "headers-too-large",
                f"the request line and headers are over {MAX_HEADER_BYTES} bytes",
            )
        except RequestDeadlineExceeded as error:
            self.close_connection = True
            self._error(HTTPStatus.REQUEST_TIMEOUT, "read-timeout", str(error))
        except TimeoutError:
            self.close_connection = True  # an idle kept-alive connection: close it quietly
        except OSError as error:  # the client went away mid-request: nobody to answer
            self.close_connection = True
            log.debug("connection_lost", extra={"error": str(error)})
        finally:
            self.server.slots.end(self.slot)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        # http.server's own refusals (bad request line, too many headers), as JSON like ours.
        status = HTTPStatus(code)
        self.close_connection = True
        self._error(status, "bad-http", message or status.phrase)

    def _health(self) -> tuple[HTTPStatus, str]:
        """The /healthz answer: failing while draining, so the endpoint leaves the Service."""
        if self.server.draining.is_set():
            return HTTPStatus.SERVICE_UNAVAILABLE, "shutting down"
        return HTTPStatus.OK, "ok"

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/healthz":
            status, text = self._health()
            self._send(status, (text + "\n").encode(), "text/plain; charset=utf-8")
        elif path == "/metrics":
            body = self.server.metrics.render().encode()
            self._send(HTTPStatus.OK, body, METRICS_CONTENT_TYPE)
        elif path in self.post_paths:
            self._method_not_allowed("POST")
        else:
            self._error(HTTPStatus.NOT_FOUND, "not-found", f"no endpoint at {path}")

    def do_HEAD(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/healthz":
            status = self._health()[0]
        elif path == "/metrics":
            status = HTTPStatus.OK
        else:
            status = HTTPStatus.NOT_FOUND
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self) -> None:
        started = time.monotonic()
        path = self.path.split("?", 1)[0]
        target = self.post_paths.get(path)
        if target is None:
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
        length = self._body_length()
        if length is None:
            return
        if not self.server.bodies.acquire(length, self.reader.remaining()):
            self._busy(f"the {self.service} holds as many request bodies as it may; retry")
            return
        try:
            self._answer(target, length, started)
        finally:
            self.server.bodies.release(length)

    def _parsed(self, length: int, busy: str, work: Callable[[Any], Parsed]) -> Parsed | None:
        """Read the body, parse it and hand the document to ``work``, all under the server's
        parse lock (see BoundedServer); None once a refusal or an error has been answered."""
        body = self._read_body(length)
        if body is None:
            return None
        if not self.server.parse_lock.acquire(timeout=self.reader.remaining()):
            self._busy(busy)
            return None
        try:
            return work(parse_body(body, self.server.parse_budget))
        except BodyTooCostly as error:
            self.close_connection = True
            self._error(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, error.reason, error.message)
        except BadBody as error:
            self._error(HTTPStatus.BAD_REQUEST, error.reason, error.message)
        except Exception:  # a bug here must still answer, never drop the connection
            log.error("request_failed", extra={"service": self.service}, exc_info=True)
            self._error(
                HTTPStatus.INTERNAL_SERVER_ERROR,
                "internal-error",
                f"the {self.service} failed to answer this request; see its log",
            )
        finally:
            self.server.parse_lock.release()
        return None

    def _answer(self, target: str, length: int, started: float) -> None:
        """Read, check and answer the body POSTed to ``target`` (a value of post_paths)."""
        raise NotImplementedError

    def _busy(self, message: str) -> None:
        self.close_connection = True
        self._error(HTTPStatus.SERVICE_UNAVAILABLE, "overloaded", message, {"Retry-After": "1"})

    def do_PUT(self) -> None:
        self._method_not_allowed(self._allowed_methods())

    do_DELETE = do_PUT
    do_PATCH = do_PUT
    do_OPTIONS = do_PUT

    def _allowed_methods(self) -> str:
        return "POST" if self.path.split("?", 1)[0] in self.post_paths else "GET, HEAD"

    def _body_length(self) -> int | None:
        """The announced body length if it is acceptable; else answers and returns None."""
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
        text = length_header.strip()
        # Digits only (int() would take "+5", "1_000" and any number of digits).
        length = int(text) if text.isascii() and text.isdigit() and len(text) <= 18 else -1
        if length < 0:
            self.close_connection = True
            self._error(
                HTTPStatus.BAD_REQUEST,
                "bad-content-length",
                f"Content-Length {length_header[:40]!r} is not a byte count",
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
        return length

    def _body_unread(self) -> bool:
        if self.reader.body_allowed:
            return False
        headers = getattr(self, "headers", None)
        if headers is None:
            return False
        return bool(headers.get("Transfer-Encoding")) or headers.get("Content-Length", "0") != "0"

    def _read_body(self, length: int) -> bytes | None:
        self.reader.allow_body(length)
        try:
            body = self.rfile.read(length)
        except RequestDeadlineExceeded as error:
            self.close_connection = True
            self._error(HTTPStatus.REQUEST_TIMEOUT, "read-timeout", str(error))
            return None
        except OSError as error:
            # The client vanished mid-body (TLS EOF, reset): nobody to answer.
            self.close_connection = True
            self.server.metrics.bad_request("short-body")
            log.warning(
                "bad_request",
                extra={
                    "reason": "short-body",
                    "error": str(error),
                    "method": self.command,
                    "path": self.path,
                },
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
        log.warning(
            "bad_request",
            extra={
                "status": int(status),
                "reason": reason,
                "why": message,
                "method": self.command,
                "path": self.path,
            },
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
        if self._body_unread():
            # Its bytes would be read as the next request: end the connection instead.
            self.close_connection = True
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        try:
            self.end_headers()
            self.wfile.write(body)
        except OSError:  # the client is gone or not reading: nobody to answer
            self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:
        # Requests are logged once, as structured events, by the handlers above.
        log.debug("http", extra={"detail": format % args})

    def log_error(self, format: str, *args: Any) -> None:
        log.warning("http_error", extra={"detail": format % args})


# The --max-connections help of both HTTPS servers (the extender's composes this server).
MAX_CONNECTIONS_HELP = (
    "connections over this many take the place of the one idle longest, or are closed at once "
    "when none is idle; one client address may have half of them busy"
)


def bind_or_explain(address: str, port: int, bind: Callable[[], Bound]) -> Bound | None:
    """``bind()``, or None with why logged when a certificate cannot be read or the address
    taken: the program then exits 2 (a usage error), as for its other startup failures."""
    try:
        return bind()
    except CertificateError as error:
        log.error("startup_failed", extra={"error": str(error)})
    except OSError as error:
        log.error(
            "startup_failed",
            extra={"error": f"cannot listen on {address}:{port}: {error.strerror}"},
        )
    return None


def stop_on_signals(server: BoundedServer, delay_seconds: float) -> None:
    """SIGTERM or SIGINT: drain (/healthz fails) for ``delay_seconds``, then shut down; a
    second signal shuts down at once."""

    def stop(signum: int, _frame: FrameType | None) -> None:
        delay = 0.0 if server.draining.is_set() else delay_seconds
        server.draining.set()
        log.info("stopping", extra={"signal": signal.Signals(signum).name, "delay_seconds": delay})
        # shutdown() waits for serve_forever to return: call it off the serving thread.
        timer = threading.Timer(delay, server.shutdown)
        timer.daemon = True
        timer.start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
