"""A read-only in-process Kubernetes API serving a fixed set of pods on several nodes: what the
fleet report's kubernetes.core reads need (discovery, pod lists by namespace, field selector
``spec.nodeName=`` and equality label selectors). Every request is recorded, so a test can show
that the report never writes to the cluster."""

from __future__ import annotations

import copy
import json
import threading
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

PLUGIN_NAMESPACE = "hygon-dcu-system"
PLUGIN_LABELS = {"app.kubernetes.io/name": "hygon-dcu-device-plugin"}


def pod(
    name: str,
    node_name: str,
    namespace: str = "ml",
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    ready: bool = True,
    phase: str = "Running",
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{namespace}-{name}",
            "resourceVersion": "7",
            "labels": labels or {"app": name},
            "annotations": annotations or {},
        },
        "spec": {"nodeName": node_name, "containers": [{"name": "main", "image": "app:1"}]},
        "status": {
            "phase": phase,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def plugin_pod(node_name: str, ready: bool) -> dict[str, Any]:
    return pod(
        f"hygon-dcu-device-plugin-{node_name}",
        node_name,
        namespace=PLUGIN_NAMESPACE,
        labels=dict(PLUGIN_LABELS),
        ready=ready,
        phase="Running" if ready else "Pending",
    )


def _selected(obj: dict[str, Any], labels: str, fields: str) -> bool:
    own = obj["metadata"].get("labels") or {}
    for term in filter(None, labels.split(",")):
        key, _sep, value = term.partition("=")
        if own.get(key) != value:
            return False
    for term in filter(None, fields.split(",")):
        key, _sep, value = term.partition("=")
        if key != "spec.nodeName":
            raise ValueError(f"field selector {key} not served")
        if obj["spec"].get("nodeName") != value:
            return False
    return True


_DISCOVERY: dict[tuple[str, ...], Any] = {
    ("version",): {"major": "1", "minor": "30", "gitVersion": "v1.30.0"},
    ("api",): {"kind": "APIVersions", "versions": ["v1"]},
    ("apis",): {"kind": "APIGroupList", "apiVersion": "v1", "groups": []},
    ("api", "v1"): {
        "kind": "APIResourceList",
        "groupVersion": "v1",
        "resources": [
            {
                "name": "pods",
                "singularName": "pod",
                "namespaced": True,
                "kind": "Pod",
                "verbs": ["get", "list", "watch"],
            }
        ],
    },
}


@dataclass
class FakeApi:
    pods: list[dict[str, Any]] = field(default_factory=list)
    requests: list[tuple[str, str]] = field(default_factory=list)
    server: ThreadingHTTPServer | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def handle(self, method: str, url: str) -> tuple[int, Any]:
        parsed = urllib.parse.urlparse(url)
        query = dict(urllib.parse.parse_qsl(parsed.query))
        parts = tuple(p for p in parsed.path.split("/") if p)
        with self._lock:
            self.requests.append((method, parsed.path))
        if method != "GET":
            return 405, {"kind": "Status", "code": 405, "message": "read-only fake"}
        if parts in _DISCOVERY:
            return 200, _DISCOVERY[parts]
        namespace = None
        rest = parts[2:]
        if parts[:2] == ("api", "v1") and rest[:1] == ("namespaces",) and len(rest) >= 2:
            namespace, rest = rest[1], rest[2:]
        if parts[:2] == ("api", "v1") and rest == ("pods",):
            items = [
                copy.deepcopy(p)
                for p in self.pods
                if (namespace is None or p["metadata"]["namespace"] == namespace)
                and _selected(p, query.get("labelSelector", ""), query.get("fieldSelector", ""))
            ]
            return 200, {
                "kind": "PodList",
                "apiVersion": "v1",
                "metadata": {"resourceVersion": "7"},
                "items": items,
            }
        return 404, {"kind": "Status", "code": 404, "message": f"no route {parsed.path}"}

    def start(self) -> None:
        handler = type("Handler", (_Handler,), {"api": self})
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()

    def write_kubeconfig(self, path: Path) -> Path:
        assert self.server is not None
        url = f"http://127.0.0.1:{self.server.server_address[1]}"
        path.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "current-context": "fake",
                    "clusters": [{"name": "fake", "cluster": {"server": url}}],
                    "users": [{"name": "fake", "user": {"token": "fake-token"}}],
                    "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
                }
            )
        )
        return path


class _Handler(BaseHTTPRequestHandler):
    api: FakeApi

    def _serve(self) -> None:
        code, payload = self.api.handle(self.command, self.path)
        data = json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PATCH = do_DELETE = do_PUT = _serve

    def log_message(self, format: str, *args: Any) -> None:
        pass


def serving(api: FakeApi) -> Iterator[FakeApi]:
    api.start()
    try:
        yield api
    finally:
        api.stop()
