"""A small HTTP stand-in for the Kubernetes API server: the calls the scheduler extender makes
(geometry Leases, pods, their merge patch, Bindings, Events), so the real ``kubernetes``
client and the extender's own API code run unchanged.

A fake because the real API server runs only in the cluster tier (tests/cluster); this one
keeps what the extender's correctness rests on: every change bumps the object's
resourceVersion, a merge patch naming an older resourceVersion (or another uid) is refused
with 409 Conflict, a Binding of a bound pod or of another uid is refused with 409 and
answered, when accepted, with a Status (not a Binding, as the real one does), and lists honour
a label selector and pagination (limit / continue).
"""

from __future__ import annotations

import copy
import itertools
import json
import threading
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from fake_apiserver import LocalApiServer
from fake_kube import annotation_key_problem
from hygon_dcu_plugin.vocabulary import GEOMETRY_ANNOTATION, GEOMETRY_LABEL

NAMESPACE = "hygon-dcu-system"
LEASE_PREFIX = "/apis/coordination.k8s.io/v1/namespaces/"


def _status(code: int, reason: str, message: str = "") -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success" if code < 400 else "Failure",
        "reason": reason,
        "message": message,
        "code": code,
    }


def _micro_time(seconds: float) -> str:
    import datetime  # noqa: PLC0415

    moment = datetime.datetime.fromtimestamp(seconds, datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# fake_apiserver is found through pytest's path only, so mypy sees it as Any (pyproject.toml).
class FakeCluster(LocalApiServer):  # type: ignore[misc]
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._versions = itertools.count(100)
        self.leases: dict[tuple[str, str], dict[str, Any]] = {}
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.events: list[dict[str, Any]] = []
        self.calls: list[tuple[str, str]] = []  # (method, path without query)
        self.patch_types: list[str] = []
        # Hooks: run (unlocked) before a patch (namespace, name) or a Binding (namespace,
        # name, target node) is applied; the status to refuse the next Bindings with.
        self.before_patch: Callable[[str, str], None] | None = None
        self.before_binding: Callable[[str, str, str], None] | None = None
        self.binding_status: int | None = None
        self.lease_list_status: int | None = None
        cluster = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _reply(self, code: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _body(self) -> Any:
                return json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))

            def do_GET(self) -> None:
                url = urlsplit(self.path)
                query = {k: v[0] for k, v in parse_qs(url.query).items()}
                with cluster.lock:
                    cluster.calls.append(("GET", url.path))
                code, body = cluster.get(url.path, query)
                self._reply(code, body)

            def do_PATCH(self) -> None:
                url = urlsplit(self.path)
                body = self._body()
                with cluster.lock:
                    cluster.calls.append(("PATCH", url.path))
                    cluster.patch_types.append(self.headers.get("Content-Type", ""))
                code, reply = cluster.patch(url.path, self.headers.get("Content-Type", ""), body)
                self._reply(code, reply)

            def do_POST(self) -> None:
                url = urlsplit(self.path)
                body = self._body()
                with cluster.lock:
                    cluster.calls.append(("POST", url.path))
                code, reply = cluster.post(url.path, body)
                self._reply(code, reply)

            def log_message(self, format: str, *args: object) -> None:
                return

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.http.daemon_threads = True
        self.thread = threading.Thread(target=self.http.serve_forever, daemon=True)

    # what tests set up --------------------------------------------------------------------
    def _version(self) -> str:
        return str(next(self._versions))

    def put_lease(
        self,
        node: str,
        text: str | None,
        renewed: float,
        duration: int = 40,
        namespace: str = NAMESPACE,
        labelled: bool = True,
    ) -> None:
        """The geometry Lease of ``node`` as the device plugin writes it."""
        metadata: dict[str, Any] = {"name": node, "namespace": namespace}
        if labelled:
            metadata["labels"] = {GEOMETRY_LABEL: "v1"}
        if text is not None:
            metadata["annotations"] = {GEOMETRY_ANNOTATION: text}
        with self.lock:
            metadata["resourceVersion"] = self._version()
            self.leases[(namespace, node)] = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": metadata,
                "spec": {
                    "holderIdentity": f"hygon-dcu-device-plugin-{node}",
                    "leaseDurationSeconds": duration,
                    "renewTime": _micro_time(renewed),
                },
            }

    def add_pod(
        self,
        name: str,
        containers: dict[str, dict[str, str]],
        namespace: str = "ml",
        phase: str = "Pending",
        node: str = "",
    ) -> dict[str, Any]:
        """A pod as the API server stores it; returns a copy (what the scheduler sends)."""
        pod: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": str(uuid.uuid4()),
                "creationTimestamp": "2026-11-29T10:00:00Z",
            },
            "spec": {
                "schedulerName": "hygon-dcu-scheduler",
                "containers": [
                    {"name": c, "image": "x", "resources": {"limits": dict(limits)}}
                    for c, limits in containers.items()
                ],
            },
            "status": {"phase": phase},
        }
        if node:
            pod["spec"]["nodeName"] = node
        with self.lock:
            pod["metadata"]["resourceVersion"] = self._version()
            self.pods[(namespace, name)] = pod
            return copy.deepcopy(pod)

    def pod(self, name: str, namespace: str = "ml") -> dict[str, Any]:
        with self.lock:
            return copy.deepcopy(self.pods[(namespace, name)])

    def touch_pod(self, name: str, namespace: str = "ml") -> None:
        """Someone else changed the pod: a new resourceVersion."""
        with self.lock:
            pod = self.pods[(namespace, name)]
            pod["metadata"].setdefault("labels", {})["touched"] = "yes"
            pod["metadata"]["resourceVersion"] = self._version()

    def set_phase(self, name: str, phase: str, namespace: str = "ml") -> None:
        with self.lock:
            pod = self.pods[(namespace, name)]
            pod["status"]["phase"] = phase
            pod["metadata"]["resourceVersion"] = self._version()

    def delete_pod(self, name: str, namespace: str = "ml") -> None:
        with self.lock:
            del self.pods[(namespace, name)]

    # the API ------------------------------------------------------------------------------
    @staticmethod
    def _selected(obj: dict[str, Any], selector: str | None) -> bool:
        if not selector:
            return True
        key, _eq, value = selector.partition("=")
        return bool(obj["metadata"].get("labels", {}).get(key) == value)

    @staticmethod
    def _page(items: list[dict[str, Any]], query: dict[str, str], kind: str) -> dict[str, Any]:
        start = int(query.get("continue", "0") or "0")
        limit = int(query.get("limit", "0") or "0") or len(items) or 1
        page = copy.deepcopy(items[start : start + limit])  # the page only: lists stay cheap
        metadata: dict[str, Any] = {"resourceVersion": "1"}
        if start + limit < len(items):
            metadata["continue"] = str(start + limit)
        return {"apiVersion": "v1", "kind": kind, "metadata": metadata, "items": page}

    def get(self, path: str, query: dict[str, str]) -> tuple[int, Any]:
        parts = path.strip("/").split("/")
        with self.lock:
            if path.startswith(LEASE_PREFIX) and len(parts) == 6 and parts[5] == "leases":
                if self.lease_list_status is not None:
                    return self.lease_list_status, _status(self.lease_list_status, "Injected")
                items = [
                    lease
                    for (ns, _name), lease in sorted(self.leases.items())
                    if ns == parts[4] and self._selected(lease, query.get("labelSelector"))
                ]
                return 200, self._page(items, query, "LeaseList")
            if path.startswith(LEASE_PREFIX) and len(parts) == 7 and parts[5] == "leases":
                lease = self.leases.get((parts[4], parts[6]))
                if lease is None:
                    return 404, _status(404, "NotFound")
                return 200, copy.deepcopy(lease)
            if parts == ["api", "v1", "pods"]:
                items = [
                    pod
                    for _key, pod in sorted(self.pods.items())
                    if self._selected(pod, query.get("labelSelector"))
                ]
                return 200, self._page(items, query, "PodList")
            if len(parts) == 6 and parts[:3] == ["api", "v1", "namespaces"] and parts[4] == "pods":
                pod = self.pods.get((parts[3], parts[5]))
                if pod is None:
                    return 404, _status(404, "NotFound")
                return 200, copy.deepcopy(pod)
        return 404, _status(404, "NotFound", f"no route {path}")

    def patch(self, path: str, content_type: str, body: Any) -> tuple[int, Any]:
        parts = path.strip("/").split("/")
        if not (len(parts) == 6 and parts[:3] == ["api", "v1", "namespaces"]):
            return 404, _status(404, "NotFound")
        if content_type != "application/merge-patch+json":
            return 415, _status(415, "UnsupportedMediaType", content_type)
        if self.before_patch is not None:
            self.before_patch(parts[3], parts[5])
        with self.lock:
            pod = self.pods.get((parts[3], parts[5]))
            if pod is None:
                return 404, _status(404, "NotFound")
            meta = body.get("metadata", {})
            if meta.get("uid") not in (None, pod["metadata"]["uid"]):
                return 409, _status(409, "Conflict", "Precondition failed: UID")
            if meta.get("resourceVersion") not in (None, pod["metadata"]["resourceVersion"]):
                return 409, _status(
                    409, "Conflict", "the object has been modified; please apply your changes"
                )
            for field in ("annotations", "labels"):
                patch = meta.get(field, {})
                problems = [p for p in map(annotation_key_problem, patch) if p]
                if problems:
                    return 422, _status(422, "Invalid", problems[0])
                target = pod["metadata"].setdefault(field, {})
                for key, value in patch.items():
                    if value is None:
                        target.pop(key, None)
                    else:
                        target[key] = value
            pod["metadata"]["resourceVersion"] = self._version()
            return 200, copy.deepcopy(pod)

    def post(self, path: str, body: Any) -> tuple[int, Any]:
        parts = path.strip("/").split("/")
        if len(parts) == 7 and parts[:3] == ["api", "v1", "namespaces"] and parts[6] == "binding":
            if self.before_binding is not None:
                self.before_binding(parts[3], parts[5], str(body.get("target", {}).get("name")))
            if self.binding_status is not None:
                return self.binding_status, _status(self.binding_status, "Injected")
            with self.lock:
                pod = self.pods.get((parts[3], parts[5]))
                if pod is None:
                    return 404, _status(404, "NotFound")
                uid = body.get("metadata", {}).get("uid")
                if uid not in (None, pod["metadata"]["uid"]):
                    return 409, _status(409, "Conflict", "Precondition failed: UID")
                if pod["spec"].get("nodeName"):
                    return 409, _status(
                        409,
                        "Conflict",
                        f"pod {parts[5]} is already assigned to node {pod['spec']['nodeName']}",
                    )
                target = body.get("target", {})
                if target.get("kind") != "Node" or not target.get("name"):
                    return 422, _status(422, "Invalid", "target must be a Node")
                pod["spec"]["nodeName"] = target["name"]
                pod["metadata"]["resourceVersion"] = self._version()
            return 201, _status(201, "")
        if len(parts) == 5 and parts[:3] == ["api", "v1", "namespaces"] and parts[4] == "events":
            with self.lock:
                self.events.append(body)
            return 201, body
        return 404, _status(404, "NotFound", f"no route {path}")

    def events_for(self, name: str, reason: str) -> list[dict[str, Any]]:
        with self.lock:
            return [
                e
                for e in self.events
                if e.get("involvedObject", {}).get("name") == name and e.get("reason") == reason
            ]
