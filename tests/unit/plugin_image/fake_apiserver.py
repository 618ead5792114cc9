"""A tiny HTTP stand-in for the Kubernetes API server: just the calls the plugin makes (pods:
get, merge-patch, list/watch; the geometry Lease: get, create, update with the API server's
resourceVersion check; Leases listed by label, a page at a time with limit and continue), so
the real `kubernetes` client and CLI can be exercised.

Lease faults a real server shows only by chance: ``lease_status`` answers every Lease call
with that HTTP status (an outage), ``lease_hold`` makes every Lease call wait until the event
is set (a hung server), ``interfere`` makes that many GETs be followed by another writer's
update (the next update from the reader then conflicts), ``expire_continues`` answers that
many Lease lists that carry a continue token with 410 Expired (the token outlived etcd's
compaction)."""

from __future__ import annotations

import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from fake_kube import annotation_key_problem

LEASES = "/apis/coordination.k8s.io/v1/namespaces/"
# metav1.MicroTime is parsed with Go's RFC3339Micro layout: exactly six fraction digits.
MICRO_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}(Z|[+-]\d\d:\d\d)")
_ANNOTATIONS_MAX = 256 * 1024  # the API server's limit on all annotations of an object


def _status(code: int, reason: str, message: str = "") -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "code": code,
        "reason": reason,
        "message": message,
    }


def lease_problem(lease: dict[str, Any]) -> str | None:
    """What the API server's validation would refuse in a Lease body (the fields the plugin
    writes), or None."""
    spec = lease.get("spec") or {}
    for key in ("renewTime", "acquireTime"):
        value = spec.get(key)
        if value is not None and not (isinstance(value, str) and MICRO_TIME.fullmatch(value)):
            return f"spec.{key}: {value!r} is not a MicroTime (RFC3339 with 6 fraction digits)"
    duration = spec.get("leaseDurationSeconds")
    if duration is not None and (not isinstance(duration, int) or duration <= 0):
        return f"spec.leaseDurationSeconds: {duration!r} must be a positive whole number"
    annotations = (lease.get("metadata") or {}).get("annotations") or {}
    if sum(len(k) + len(v) for k, v in annotations.items()) > _ANNOTATIONS_MAX:
        return "metadata.annotations: Too long: must have at most 262144 bytes"
    problems = [p for p in map(annotation_key_problem, annotations) if p]
    return problems[0] if problems else None


class LocalApiServer:
    """What every fake API server of these tests shares: an HTTP server on 127.0.0.1
    (``self.http``, served by ``self.thread``) and a kubeconfig that points at it."""

    http: ThreadingHTTPServer
    thread: threading.Thread

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


class FakeApiServer(LocalApiServer):
    def __init__(self) -> None:
        self.pods: dict[str, dict[str, Any]] = {}
        self.patches: list[tuple[str, dict[str, Any]]] = []
        self.lock = threading.Lock()
        self.list_calls = 0
        self.leases: dict[str, dict[str, Any]] = {}  # "<namespace>/<name>" -> the stored Lease
        # Every Lease call: (method, "<namespace>/<name>", status answered, body sent or None)
        self.lease_calls: list[tuple[str, str, int, dict[str, Any] | None]] = []
        self.lease_status: int | None = None
        self.lease_hold: threading.Event | None = None
        self.interfere = 0
        self.expire_continues = 0
        self.lease_lists: list[dict[str, str]] = []  # the query of every Lease list
        self._version = 100
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

            def _lease_call(self, method: str) -> bool:
                """Serve a Lease call; False when the path is not a Lease's."""
                path = self.path.split("?")[0]
                if not path.startswith(LEASES):
                    return False
                parts = path[len(LEASES) :].strip("/").split("/")
                body = None
                if method in ("POST", "PUT"):
                    body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if len(parts) == 2 and parts[1] == "leases" and method == "GET":
                    query = {k: v[0] for k, v in parse_qs(urlsplit(self.path).query).items()}
                    self._reply(*server.list_leases(parts[0], query))
                    return True
                if len(parts) == 2 and parts[1] == "leases" and method == "POST":
                    key = f"{parts[0]}/{(body or {}).get('metadata', {}).get('name', '')}"
                elif len(parts) == 3 and parts[1] == "leases" and method in ("GET", "PUT"):
                    key = f"{parts[0]}/{parts[2]}"
                else:
                    self._reply(405, _status(405, "MethodNotAllowed"))
                    return True
                hold = server.lease_hold
                if hold is not None:
                    hold.wait(30)
                code, answer = server.serve_lease(method, key, parts[0], body)
                self._reply(code, answer)
                return True

            def do_POST(self) -> None:
                if not self._lease_call("POST"):
                    self._reply(404, _status(404, "NotFound"))

            def do_PUT(self) -> None:
                if not self._lease_call("PUT"):
                    self._reply(404, _status(404, "NotFound"))

            def do_GET(self) -> None:
                if self._lease_call("GET"):
                    return
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

    def serve_lease(
        self, method: str, key: str, namespace: str, body: dict[str, Any] | None
    ) -> tuple[int, dict[str, Any]]:
        with self.lock:
            code, answer = self._lease(method, key, namespace, body)
            self.lease_calls.append((method, key, code, body))
        return code, answer

    def _lease(
        self, method: str, key: str, namespace: str, body: dict[str, Any] | None
    ) -> tuple[int, dict[str, Any]]:
        if self.lease_status is not None:
            return self.lease_status, _status(self.lease_status, "ServiceUnavailable")
        stored = self.leases.get(key)
        if method == "GET":
            if stored is None:
                return 404, _status(404, "NotFound", f'leases "{key}" not found')
            answer = json.loads(json.dumps(stored))
            if self.interfere:
                self.interfere -= 1
                self._bump(stored)
            return 200, answer
        assert body is not None
        meta = body.get("metadata") or {}
        if meta.get("namespace") not in (None, namespace) or not meta.get("name"):
            return 400, _status(400, "BadRequest", "metadata.namespace/name do not match the URL")
        problem = lease_problem(body)
        if problem:
            return 422, _status(422, "Invalid", problem)
        if method == "POST":
            if stored is not None:
                return 409, _status(409, "AlreadyExists", f'leases "{key}" already exists')
            meta = {**meta, "namespace": namespace, "uid": f"lease-{len(self.leases)}"}
            meta.pop("resourceVersion", None)
        else:
            if stored is None:
                return 404, _status(404, "NotFound", f'leases "{key}" not found')
            version = meta.get("resourceVersion")
            # The plugin always sends one; a real server would take none as unconditional.
            if version != stored["metadata"]["resourceVersion"]:
                return 409, _status(409, "Conflict", "the object has been modified")
            meta = {**meta, "uid": stored["metadata"]["uid"]}
        lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", **body, "metadata": meta}
        self._bump(lease)
        self.leases[key] = lease
        return 201 if method == "POST" else 200, json.loads(json.dumps(lease))

    def list_leases(self, namespace: str, query: dict[str, str]) -> tuple[int, dict[str, Any]]:
        """One LeaseList page: ``labelSelector`` (key=value), ``limit`` and ``continue`` (here
        the index of the page's first Lease)."""
        with self.lock:
            self.lease_lists.append(query)
            token = query.get("continue", "")
            if self.lease_status is not None:
                return self.lease_status, _status(self.lease_status, "ServiceUnavailable")
            if token and self.expire_continues:
                self.expire_continues -= 1
                return 410, _status(
                    410, "Expired", "The provided continue parameter is too old; start a new list"
                )
            label, _equals, value = query.get("labelSelector", "").partition("=")
            keys = sorted(
                key
                for key, lease in self.leases.items()
                if key.startswith(f"{namespace}/")
                and (not label or (lease["metadata"].get("labels") or {}).get(label) == value)
            )
            start = int(token or "0")
            limit = int(query.get("limit") or "0") or len(keys)
            items = [json.loads(json.dumps(self.leases[k])) for k in keys[start : start + limit]]
            metadata: dict[str, Any] = {"resourceVersion": str(self._version)}
            if start + limit < len(keys):
                metadata["continue"] = str(start + limit)
        return 200, {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "LeaseList",
            "metadata": metadata,
            "items": items,
        }

    def _bump(self, lease: dict[str, Any]) -> None:
        self._version += 1
        lease["metadata"]["resourceVersion"] = str(self._version)

    def lease_writes(self) -> list[tuple[str, dict[str, Any]]]:
        """The creates and updates the server accepted, in order: (method, body)."""
        with self.lock:
            return [
                (method, body)
                for method, _key, code, body in self.lease_calls
                if method != "GET" and code in (200, 201) and body is not None
            ]

    def lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        with self.lock:
            stored = self.leases.get(f"{namespace}/{name}")
            return None if stored is None else json.loads(json.dumps(stored))

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
