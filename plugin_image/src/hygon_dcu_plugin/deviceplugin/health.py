"""/healthz (liveness) and /readyz (registered with the kubelet) on one listener, /metrics on
another: the kubelet's probes reach the pod's address, while /metrics is bound where the
config says (loopback by default), so other pods cannot read it."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from hygon_dcu_plugin.exposition import CONTENT_TYPE

# What a GET of one path answers: status, body, Content-Type.
Page = Callable[[], tuple[int, str, str]]


class _Server(ThreadingHTTPServer):
    daemon_threads = True


class _Server6(_Server):
    address_family = socket.AF_INET6


class Listener:
    """HTTP on ``address`` (HOST:PORT, an IPv6 host in brackets): GET of a path of ``pages``,
    404 for any other."""

    def __init__(self, address: str, pages: Mapping[str, Page], name: str) -> None:
        host, _ignored, port = address.rpartition(":")
        host = host.strip("[]")

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                page = pages.get(self.path)
                if page is None:
                    self._send(404, "not found\n", "text/plain")
                else:
                    self._send(*page())

            def _send(self, code: int, body: str, kind: str) -> None:
                data = body.encode()
                self.send_response(code)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: object) -> None:
                return  # probes every few seconds would flood the structured log

        server = _Server6 if ":" in host else _Server
        self.server = server((host, int(port)), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True, name=name)

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        if self.thread.is_alive():  # shutdown() waits for a serve_forever that never ran
            self.server.shutdown()
        self.server.server_close()


def _check(probe: Callable[[], bool]) -> Page:
    return lambda: (200, "ok\n", "text/plain") if probe() else (503, "not ok\n", "text/plain")


class HealthServer(Listener):
    """The kubelet's probes: /healthz and /readyz, nothing else."""

    def __init__(self, address: str, live: Callable[[], bool], ready: Callable[[], bool]) -> None:
        super().__init__(address, {"/healthz": _check(live), "/readyz": _check(ready)}, "health")


class MetricsServer(Listener):
    """/metrics (Prometheus text), nothing else."""

    def __init__(self, address: str, metrics: Callable[[], str]) -> None:
        def page() -> tuple[int, str, str]:
            return 200, metrics(), CONTENT_TYPE

        super().__init__(address, {"/metrics": page}, "metrics")
