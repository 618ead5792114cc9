"""A small in-process Kubernetes API server for the device_plugin role's apply path.

We have no cluster here; this serves what kubernetes.core's k8s and k8s_info send for the role's
objects (discovery, GET, server-side apply PATCH, DELETE) with the API server behaviour the role
relies on:

- ``/version`` reports ``version`` (1.MINOR); discovery serves PodDisruptionBudget as
  ``policy/v1`` from 1.21 and as ``policy/v1beta1`` before, as the real servers do;
- server-side apply (``application/apply-patch+yaml``) creates or updates an object, refuses a
  request without ``fieldManager`` (as the real server does), refuses a namespaced object whose
  namespace does not exist (404) and, when the applied configuration changes nothing, answers
  with the stored object untouched (same resourceVersion) from 1.21 on; on 1.20 such an apply
  still rewrites managedFields and the resourceVersion, as measured on a real 1.20.2 server;
- ``dryRun=All`` answers with what would be stored (or deleted) and stores (deletes) nothing;
- before 1.28 an object carrying ``matchConditions`` is refused (500, "field not declared in
  schema"), as a 1.20 server does;
- any other PATCH content type or a POST is refused (415 / 405): the role must not fall back to
  client-side apply without a test noticing;
- the DaemonSet and Deployment controllers: one step before every request marks a workload
  whose spec generation is not yet observed as rolled out, unless its kind is in
  ``stalled_kinds`` (a rollout that never finishes);
- DELETE removes the object; deleting a Namespace removes what is in it;
- Pods and Events are listed (with equality label selectors) from what a test ``seed``s.

Single field manager only: the applied configuration replaces the object's content, which is
what server-side apply does when one manager owns every field it sets.
"""

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

import yaml

APPLY_PATCH = "application/apply-patch+yaml"
# Metadata the server owns: removed before comparing a stored object with a rendered one.
SERVER_METADATA = ("uid", "resourceVersion", "generation", "creationTimestamp", "managedFields")


@dataclass(frozen=True)
class ResourceType:
    group_version: str
    plural: str
    kind: str
    namespaced: bool


BASE_RESOURCE_TYPES = (
    ResourceType("v1", "namespaces", "Namespace", False),
    ResourceType("v1", "serviceaccounts", "ServiceAccount", True),
    ResourceType("v1", "configmaps", "ConfigMap", True),
    ResourceType("v1", "secrets", "Secret", True),
    ResourceType("v1", "services", "Service", True),
    ResourceType("apps/v1", "daemonsets", "DaemonSet", True),
    ResourceType("apps/v1", "deployments", "Deployment", True),
    ResourceType("rbac.authorization.k8s.io/v1", "clusterroles", "ClusterRole", False),
    ResourceType(
        "rbac.authorization.k8s.io/v1", "clusterrolebindings", "ClusterRoleBinding", False
    ),
    ResourceType("rbac.authorization.k8s.io/v1", "roles", "Role", True),
    ResourceType("rbac.authorization.k8s.io/v1", "rolebindings", "RoleBinding", True),
    ResourceType("networking.k8s.io/v1", "networkpolicies", "NetworkPolicy", True),
    ResourceType("v1", "pods", "Pod", True),
    ResourceType("v1", "events", "Event", True),
    ResourceType("coordination.k8s.io/v1", "leases", "Lease", True),
    ResourceType(
        "admissionregistration.k8s.io/v1",
        "validatingwebhookconfigurations",
        "ValidatingWebhookConfiguration",
        False,
    ),
)


def resource_types(minor: int) -> tuple[ResourceType, ...]:
    """What a server of Kubernetes 1.<minor> serves of the kinds the role uses."""
    pdb_version = "policy/v1" if minor >= 21 else "policy/v1beta1"
    return (
        *BASE_RESOURCE_TYPES,
        ResourceType(pdb_version, "poddisruptionbudgets", "PodDisruptionBudget", True),
    )


# The object key: (kind, namespace or "", name).
Key = tuple[str, str, str]


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: dict[str, str]
    content_type: str
    body: Any


def failure(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def without_server_fields(obj: dict[str, Any]) -> dict[str, Any]:
    """The object as a client wrote it: no status, no server-owned metadata."""
    stripped = copy.deepcopy(obj)
    stripped.pop("status", None)
    for name in SERVER_METADATA:
        stripped["metadata"].pop(name, None)
    return stripped


def _rolled_out(obj: dict[str, Any]) -> dict[str, Any]:
    generation = obj["metadata"]["generation"]
    if obj["kind"] == "DaemonSet":
        # one Hygon node in this cluster
        return {
            "observedGeneration": generation,
            "desiredNumberScheduled": 1,
            "currentNumberScheduled": 1,
            "updatedNumberScheduled": 1,
            "numberReady": 1,
            "numberAvailable": 1,
            "numberMisscheduled": 0,
        }
    replicas = obj["spec"].get("replicas", 1)
    return {
        "observedGeneration": generation,
        "replicas": replicas,
        "updatedReplicas": replicas,
        "readyReplicas": replicas,
        "availableReplicas": replicas,
    }


@dataclass
class FakeApiServer:
    version: str = "1.30"
    stalled_kinds: frozenset[str] = frozenset()
    objects: dict[Key, dict[str, Any]] = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)
    # "apply Kind/name", "rolled out Kind/name", "delete Kind/name", in the order they happened
    events: list[str] = field(default_factory=list)
    server: ThreadingHTTPServer | None = None
    _lock: threading.RLock = field(default_factory=threading.RLock)
    _version: int = 1
    _clock: int = 0

    @property
    def minor(self) -> int:
        return int(self.version.split(".")[1])

    @property
    def types(self) -> tuple[ResourceType, ...]:
        return resource_types(self.minor)

    def seed(self, obj: dict[str, Any]) -> None:
        """Store an object as another client would have (pods, events)."""
        metadata = obj["metadata"]
        with self._lock:
            self.objects[(obj["kind"], metadata.get("namespace", ""), metadata["name"])] = (
                copy.deepcopy(obj)
            )

    # --- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        handler = type("Handler", (_Handler,), {"api": self})
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def write_kubeconfig(self, path: Path) -> Path:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake", "user": {"token": "fake-token"}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
        }
        path.write_text(json.dumps(config))
        return path

    def get(self, kind: str, name: str, namespace: str = "") -> dict[str, Any] | None:
        with self._lock:
            found = self.objects.get((kind, namespace, name))
            return copy.deepcopy(found) if found is not None else None

    # --- controllers ---------------------------------------------------------------------------
    def _next_version(self) -> str:
        self._version += 1
        return str(self._version)

    def _reconcile(self) -> None:
        for obj in self.objects.values():
            if obj["kind"] not in ("DaemonSet", "Deployment") or obj["kind"] in self.stalled_kinds:
                continue
            status = obj.get("status") or {}
            if status.get("observedGeneration") != obj["metadata"]["generation"]:
                obj["status"] = _rolled_out(obj)
                obj["metadata"]["resourceVersion"] = self._next_version()
                self.events.append(f"rolled out {obj['kind']}/{obj['metadata']['name']}")

    # --- API -----------------------------------------------------------------------------------
    def handle(self, method: str, url: str, content_type: str, raw: bytes) -> tuple[int, Any]:
        parsed = urllib.parse.urlparse(url)
        query = dict(urllib.parse.parse_qsl(parsed.query))
        parts = [part for part in parsed.path.split("/") if part]
        body = yaml.safe_load(raw) if raw else None
        with self._lock:
            self.requests.append(Request(method, parsed.path, query, content_type, body))
            self._reconcile()
            return self._route(method, parts, query, content_type, body)

    def _discovery(self, parts: list[str]) -> dict[str, Any] | None:
        if parts == ["version"]:
            return {"major": "1", "minor": str(self.minor), "gitVersion": f"v{self.version}.2"}
        if parts == ["api"]:
            return {"kind": "APIVersions", "versions": ["v1"]}
        if parts == ["apis"]:
            group_versions = sorted({t.group_version for t in self.types} - {"v1"})
            groups = []
            for group_version in group_versions:
                entry = {"groupVersion": group_version, "version": group_version.split("/")[1]}
                groups.append(
                    {
                        "name": group_version.split("/")[0],
                        "versions": [entry],
                        "preferredVersion": entry,
                    }
                )
            return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}
        group_version = "/".join(parts[1:])
        if (parts[:1] == ["api"] and len(parts) == 2) or (
            parts[:1] == ["apis"] and len(parts) == 3
        ):
            verbs = ["create", "delete", "get", "list", "patch", "update", "watch"]
            resources = [
                {
                    "name": t.plural,
                    "singularName": t.kind.lower(),
                    "namespaced": t.namespaced,
                    "kind": t.kind,
                    "verbs": verbs,
                }
                for t in self.types
                if t.group_version == group_version
            ]
            return {
                "kind": "APIResourceList",
                "groupVersion": group_version,
                "resources": resources,
            }
        return None

    def _route(
        self, method: str, parts: list[str], query: dict[str, str], content_type: str, body: Any
    ) -> tuple[int, Any]:
        discovered = self._discovery(parts) if method == "GET" else None
        if discovered is not None:
            return 200, discovered
        prefix_length = 2 if parts[:1] == ["api"] else 3
        group_version = "/".join(parts[1:prefix_length])
        rest = parts[prefix_length:]
        namespace = ""
        if rest[:1] == ["namespaces"] and len(rest) >= 3:
            namespace, rest = rest[1], rest[2:]
        resource_type = next(
            (t for t in self.types if t.group_version == group_version and rest[:1] == [t.plural]),
            None,
        )
        if resource_type is None or len(rest) > 2:
            return 404, failure(404, "NotFound", f"no route for {method} /{'/'.join(parts)}")
        if len(rest) == 1:
            if method != "GET":
                return 405, failure(405, "MethodNotAllowed", f"{method} on a collection")
            items = [
                copy.deepcopy(obj)
                for (kind, obj_namespace, _name), obj in sorted(self.objects.items())
                if kind == resource_type.kind
                and (not namespace or obj_namespace == namespace)
                and _selected(obj, query.get("labelSelector", ""))
            ]
            return 200, {
                "kind": f"{resource_type.kind}List",
                "apiVersion": group_version,
                "metadata": {"resourceVersion": str(self._version)},
                "items": items,
            }
        key = (resource_type.kind, namespace, rest[1])
        if method == "GET":
            if key not in self.objects:
                return 404, failure(
                    404, "NotFound", f'{resource_type.plural} "{rest[1]}" not found'
                )
            return 200, copy.deepcopy(self.objects[key])
        if method == "PATCH":
            if content_type != APPLY_PATCH:
                return 415, failure(415, "UnsupportedMediaType", f"{content_type} not served")
            return self._apply(resource_type, key, query, body)
        if method == "DELETE":
            return self._delete(key, body, dry_run=query.get("dryRun") == "All")
        return 405, failure(405, "MethodNotAllowed", f"{method} not served")

    def _apply(
        self, resource_type: ResourceType, key: Key, query: dict[str, str], body: Any
    ) -> tuple[int, Any]:
        manager = query.get("fieldManager", "")
        if not manager:
            return 400, failure(
                400, "BadRequest", "PATCH with apply-patch+yaml requires fieldManager"
            )
        if not isinstance(body, dict) or (body.get("apiVersion"), body.get("kind")) != (
            resource_type.group_version,
            resource_type.kind,
        ):
            return 400, failure(400, "BadRequest", "body does not match the resource path")
        if body.get("metadata", {}).get("name") != key[2] or (
            body["metadata"].get("namespace", key[1]) != key[1]
        ):
            return 400, failure(400, "BadRequest", "body name or namespace differs from the path")
        if resource_type.namespaced and ("Namespace", "", key[1]) not in self.objects:
            return 404, failure(404, "NotFound", f'namespaces "{key[1]}" not found')
        if self.minor < 28 and "matchConditions" in json.dumps(body):
            return 500, failure(
                500,
                "InternalError",
                ".webhooks[name=...].matchConditions: field not declared in schema",
            )
        existing = self.objects.get(key)
        applied = copy.deepcopy(body)
        applied.pop("status", None)
        if resource_type.namespaced:
            applied["metadata"]["namespace"] = key[1]
        label = f"{key[0]}/{key[2]}"
        dry_run = query.get("dryRun") == "All"
        if existing is not None and without_server_fields(existing) == applied:
            if self.minor >= 21:
                # a no-op apply: nothing is written, the resourceVersion stays
                return 200, copy.deepcopy(existing)
            # 1.20: the same content, but managedFields get a new timestamp (and a write)
            rewritten = copy.deepcopy(existing)
            rewritten["metadata"]["managedFields"] = self._managed_fields(manager, resource_type)
            if not dry_run:
                rewritten["metadata"]["resourceVersion"] = self._next_version()
                self.objects[key] = rewritten
                self.events.append(f"no-op apply {label}")
            return 200, copy.deepcopy(rewritten)
        if existing is None:
            server_metadata: dict[str, Any] = {
                "uid": f"uid-{len(self.events)}-{key[2]}",
                "creationTimestamp": "2026-01-01T00:00:00Z",
                "generation": 1,
            }
            code = 201
        else:
            server_metadata = {
                name: existing["metadata"][name] for name in ("uid", "creationTimestamp")
            }
            server_metadata["generation"] = existing["metadata"]["generation"] + 1
            applied["status"] = existing.get("status", {})
            code = 200
        applied["metadata"].update(server_metadata)
        applied["metadata"]["managedFields"] = self._managed_fields(manager, resource_type)
        if dry_run:
            applied["metadata"]["resourceVersion"] = (
                existing["metadata"]["resourceVersion"] if existing else ""
            )
            return code, applied
        applied["metadata"]["resourceVersion"] = self._next_version()
        self.objects[key] = applied
        self.events.append(f"apply {label}")
        return code, copy.deepcopy(applied)

    def _managed_fields(self, manager: str, resource_type: ResourceType) -> list[dict[str, Any]]:
        self._clock += 1
        return [
            {
                "manager": manager,
                "operation": "Apply",
                "apiVersion": resource_type.group_version,
                "time": f"2026-01-01T00:{self._clock // 60:02d}:{self._clock % 60:02d}Z",
            }
        ]

    def _delete(self, key: Key, body: Any, *, dry_run: bool) -> tuple[int, Any]:
        if key not in self.objects:
            return 404, failure(404, "NotFound", f'"{key[2]}" not found')
        if dry_run:
            # what would be deleted; nothing is (check mode sends this)
            return 200, copy.deepcopy(self.objects[key])
        deleted = self.objects.pop(key)
        self.events.append(f"delete {key[0]}/{key[2]}")
        if key[0] == "Namespace":
            for inner in [k for k in self.objects if k[1] == key[2]]:
                del self.objects[inner]
        return 200, deleted


def _selected(obj: dict[str, Any], selector: str) -> bool:
    """Equality-based label selector (a=b,c=d), what the role sends."""
    labels = obj["metadata"].get("labels") or {}
    for term in filter(None, selector.split(",")):
        name, _equals, value = term.partition("=")
        if labels.get(name) != value:
            return False
    return True


class _Handler(BaseHTTPRequestHandler):
    api: FakeApiServer

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip()
        code, payload = self.api.handle(self.command, self.path, content_type, raw)
        data = json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PATCH = do_DELETE = do_PUT = _serve

    def log_message(self, format: str, *args: Any) -> None:
        pass


def running(api: FakeApiServer) -> Iterator[FakeApiServer]:
    api.start()
    try:
        yield api
    finally:
        api.stop()
