"""A tiny HTTP stand-in for the Kubernetes API server: just the pod calls the plugin makes
(get, merge-patch, list/watch), so the real `kubernetes` client and CLI can be exercised."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from fake_kube import annotation_key_problem


class FakeApiServer:
    def __init__(self) -> None:
        self.pods: dict[str, dict[str, Any]] = {}
        self.patches: list[tuple[str, dict[str, Any]]] = []
        self.lock = threading.Lock()
        self.list_calls = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _reply(self, code: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _pod_key(self) -> str | None:
                parts = self.path.split("?")[0].strip("/").split("/")
                # api/v1/namespaces/<ns>/pods/<name>
                if len(parts) == 6 and parts[:3] == ["api", "v1", "namespaces"]:
                    return f"{parts[3]}/{parts[5]}"
                return None

            def do_GET(self) -> None:
                key = self._pod_key()
                if key is not None:
                    with server.lock:
                        pod = server.pods.get(key)
                    if pod is None:
                        self._reply(
                            404,
                            {
                                "kind": "Status",
                                "apiVersion": "v1",
                                "code": 404,
                                "reason": "NotFound",
                                "status": "Failure",
                            },
                        )
                    else:
                        self._reply(200, pod)
                    return
                if self.path.startswith("/api/v1/pods") and "watch=true" in self.path:
                    # No events: hold the stream briefly, then end it (the client re-watches).
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.end_headers()
                    time.sleep(1.0)
                    return
                if self.path.startswith("/api/v1/pods"):
                    with server.lock:
                        server.list_calls += 1
                        items = list(server.pods.values())
                    self._reply(
                        200,
                        {
                            "apiVersion": "v1",
                            "kind": "PodList",
                            "metadata": {"resourceVersion": "1"},
                            "items": items,
                        },
                    )
                    return
                self._reply(404, {"kind": "Status", "code": 404, "status": "Failure"})

            def do_PATCH(self) -> None:
                key = self._pod_key()
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server.lock:
                    pod = server.pods.get(key or "")
                    if pod is None:
                        self._reply(404, {"kind": "Status", "code": 404, "status": "Failure"})
                        return
                    if body.get("metadata", {}).get("uid") not in (None, pod["metadata"]["uid"]):
                        self._reply(422, {"kind": "Status", "code": 422, "status": "Failure"})
                        return
                    patch = body.get("metadata", {}).get("annotations", {})
                    problems = [p for p in map(annotation_key_problem, patch) if p]
                    if problems:
                        self._reply(
                            422,
                            {
                                "kind": "Status",
                                "code": 422,
                                "status": "Failure",
                                "reason": "Invalid",
                                "message": problems[0],
                            },
                        )
                        return
                    annotations = pod["metadata"].setdefault("annotations", {})
                    annotations.update(patch)
                    server.patches.append((key or "", body))
                self._reply(200, pod)

            def log_message(self, format: str, *args: object) -> None:
                return

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.http.daemon_threads = True
        self.thread = threading.Thread(target=self.http.serve_forever, daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.http.shutdown()
        self.http.server_close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http.server_address[1]}"

    def kubeconfig(self, path: Path) -> Path:
        path.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "current-context": "fake",
                    "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
                    "users": [{"name": "fake", "user": {"token": "fake"}}],
                    "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
                }
            )
        )
        return path

    def add_pod(
        self,
        namespace: str,
        name: str,
        uid: str,
        limits: dict[str, str],
        phase: str = "Pending",
        container: str = "main",
    ) -> None:
        with self.lock:
            self.pods[f"{namespace}/{name}"] = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": name,
                    "namespace": namespace,
                    "uid": uid,
                    "creationTimestamp": "2026-11-29T10:00:00Z",
                },
                "spec": {
                    "nodeName": "node-1",
                    "containers": [
                        {"name": container, "image": "x", "resources": {"limits": limits}}
                    ],
                },
                "status": {"phase": phase},
            }

    def set_phase(self, namespace: str, name: str, phase: str) -> None:
        with self.lock:
            self.pods[f"{namespace}/{name}"]["status"]["phase"] = phase

    def delete_pod(self, namespace: str, name: str) -> None:
        with self.lock:
            self.pods.pop(f"{namespace}/{name}", None)
