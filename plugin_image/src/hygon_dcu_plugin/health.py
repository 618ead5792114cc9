"""/healthz (liveness), /readyz (registered with the kubelet) and /metrics over HTTP."""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class HealthServer:
    def __init__(
        self,
        address: str,
        live: Callable[[], bool],
        ready: Callable[[], bool],
        metrics: Callable[[], str],
    ) -> None:
        host, _ignored, port = address.rpartition(":")
        checks = {"/healthz": live, "/readyz": ready}

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path == "/metrics":
                    self._send(200, metrics(), "text/plain; version=0.0.4")
                elif self.path in checks:
                    ok = checks[self.path]()
                    self._send(200 if ok else 503, "ok\n" if ok else "not ok\n", "text/plain")
                else:
                    self._send(404, "not found\n", "text/plain")

            def _send(self, code: int, body: str, kind: str) -> None:
                data = body.encode()
                self.send_response(code)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: object) -> None:
                return  # probes every few seconds would flood the structured log

        self.server = ThreadingHTTPServer((host.strip("[]"), int(port)), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True, name="health")

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
