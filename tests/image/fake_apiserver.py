"""A Kubernetes API server as far as the device plugin's `kubernetes` client can tell: plain
HTTP, the pod endpoints the plugin calls, and a log of every request (method, path, verb).

The plugin in the container reaches it through a kubeconfig naming http://127.0.0.1:PORT
(the container shares the test's network namespace).
"""

from __future__ import annotations

import json
import threading
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

CREATED = "2026-01-01T00:00:00Z"


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]

    @property
    def access(self) -> tuple[str, str, str]:
        """(apiGroup, resource, verb) in RBAC terms."""
        parts = self.path.strip("/").split("/")
        resource = "pods" if "pods" in parts else "/".join(parts)
        if self.method == "PATCH":
            return ("", resource, "patch")
        if parts[-1] == "pods":
            watching = self.query.get("watch", ["false"])[0] in ("true", "1")
            return ("", resource, "watch" if watching else "list")
        return ("", resource, "get")


@dataclass
class FakeApiServer:
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    stopping: threading.Event = field(default_factory=threading.Event)
    server: ThreadingHTTPServer | None = None

    def add_pod(
        self, namespace: str, name: str, node: str, containers: dict[str, dict[str, str]]
    ) -> dict[str, Any]:
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": str(uuid.uuid4()),
                "creationTimestamp": CREATED,
                "resourceVersion": "1",
                "annotations": {},
            },
            "spec": {
                "nodeName": node,
                "containers": [
                    {"name": cname, "image": "workload", "resources": {"limits": limits}}
                    for cname, limits in containers.items()
                ],
            },
            "status": {"phase": "Pending"},
        }
        with self.lock:
            self.pods[f"{namespace}/{name}"] = pod
        return pod

    def annotations(self, namespace: str, name: str) -> dict[str, str]:
        with self.lock:
            return dict(self.pods[f"{namespace}/{name}"]["metadata"]["annotations"])

    def start(self) -> int:
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _send(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _record(self) -> tuple[Request, list[str]]:
                url = urlparse(self.path)
                request = Request(self.command, url.path, parse_qs(url.query))
                with api.lock:
                    api.requests.append(request)
                return request, url.path.strip("/").split("/")

            def _pod_key(self, parts: list[str]) -> str | None:
                # /api/v1/namespaces/NS/pods/NAME
                if (
                    len(parts) == 6
                    and parts[:3] == ["api", "v1", "namespaces"]
                    and parts[4] == "pods"
                ):
                    return f"{parts[3]}/{parts[5]}"
                return None

            def _not_found(self, what: str) -> None:
                self._send(
                    404,
                    {
                        "kind": "Status",
                        "apiVersion": "v1",
                        "status": "Failure",
                        "reason": "NotFound",
                        "code": 404,
                        "message": f"{what} not found",
                    },
                )

            def do_GET(self) -> None:
                request, parts = self._record()
                if parts == ["api", "v1", "pods"]:
                    if request.access[2] == "watch":
                        # An empty watch that ends after a while, as the API server's
                        # timeoutSeconds does; the client then watches again.
                        self.send_response(200)
                        self.send_header("Content-Type", "application/json")
                        self.send_header("Transfer-Encoding", "chunked")
                        self.end_headers()
                        api.stopping.wait(5.0)
                        self.wfile.write(b"0\r\n\r\n")
                        return
                    with api.lock:
                        items = list(api.pods.values())
                    self._send(
                        200,
                        {
                            "kind": "PodList",
                            "apiVersion": "v1",
                            "metadata": {"resourceVersion": "1"},
                            "items": items,
                        },
                    )
                    return
                key = self._pod_key(parts)
                with api.lock:
                    pod = api.pods.get(key or "")
                if pod is None:
                    self._not_found(self.path)
                    return
                self._send(200, pod)

            def do_PATCH(self) -> None:
                parts = self._record()[1]
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                key = self._pod_key(parts)
                with api.lock:
                    pod = api.pods.get(key or "")
                    if pod is not None:
                        meta = body.get("metadata", {})
                        if meta.get("uid", pod["metadata"]["uid"]) != pod["metadata"]["uid"]:
                            self._send(
                                409,
                                {
                                    "kind": "Status",
                                    "code": 409,
                                    "reason": "Conflict",
                                    "message": "uid changed",
                                },
                            )
                            return
                        pod["metadata"]["annotations"].update(meta.get("annotations", {}))
                if pod is None:
                    self._not_found(self.path)
                    return
                self._send(200, pod)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return int(self.server.server_address[1])

    def stop(self) -> None:
        self.stopping.set()
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()

    def kubeconfig(self, port: int) -> str:
        return json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "fake", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
                "users": [{"name": "plugin", "user": {"token": "test"}}],
                "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "plugin"}}],
                "current-context": "fake",
            }
        )
