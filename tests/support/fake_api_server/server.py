"""The fake API server's core: an object store behind HTTP on 127.0.0.1 (see __init__.py)."""

from __future__ import annotations

import copy
import itertools
import json
import secrets
import ssl
import threading
import urllib.parse
from collections.abc import Iterable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

from .behaviour import Behaviour
from .patching import APPLY_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH, merge_patch
from .replies import Reply, failure, status_body
from .requests import Request, Route
from .resources import ResourceType, discovery, resource_types
from .selectors import SelectorError, fields_match, labels_match
from .validation import object_problem

# The object key: (kind, namespace or "", name).
Key = tuple[str, str, str]
# Metadata the server owns: what a client's applied configuration is compared without.
SERVER_METADATA = ("uid", "resourceVersion", "generation", "creationTimestamp", "managedFields")
CREATED = "2026-01-01T00:00:00Z"
_CONFLICT = "the object has been modified; please apply your changes to the latest version"


def without_server_fields(obj: dict[str, Any]) -> dict[str, Any]:
    """The object as a client wrote it: no status, no server-owned metadata."""
    stripped = copy.deepcopy(obj)
    stripped.pop("status", None)
    for name in SERVER_METADATA:
        stripped.get("metadata", {}).pop(name, None)
    return stripped


class FakeApiServer:
    """``version`` is the Kubernetes 1.MINOR served (discovery and version-bound behaviour);
    ``patch_types`` the PATCH content types accepted (others: 415, so a client that falls back
    to another kind of patch is noticed); ``namespaces_must_exist`` refuses a namespaced create
    or apply in a Namespace not stored, as a real server does (tests that seed objects in
    namespaces they never create leave it off); an empty watch is held ``watch_seconds``."""

    def __init__(
        self,
        version: str = "1.30",
        *,
        patch_types: Iterable[str] = (MERGE_PATCH, STRATEGIC_MERGE_PATCH, APPLY_PATCH),
        namespaces_must_exist: bool = False,
        watch_seconds: float = 1.0,
        behaviours: Iterable[Behaviour] = (),
    ) -> None:
        self.version = version
        self.patch_types = frozenset(patch_types)
        self.namespaces_must_exist = namespaces_must_exist
        self.watch_seconds = watch_seconds
        self.behaviours = list(behaviours)
        self.lock = threading.RLock()
        self.objects: dict[Key, dict[str, Any]] = {}
        self.requests: list[Request] = []
        # "create|update|patch|apply|no-op apply|delete Kind/name", in the order they happened
        self.history: list[str] = []
        self.stopping = threading.Event()
        self._versions = itertools.count(100)
        self._resource_version = "100"
        self._uids = itertools.count(1)
        self._clock = itertools.count(1)
        self._http: ThreadingHTTPServer | None = None
        self._scheme = "http"

    # --- lifecycle ---------------------------------------------------------------------------
    def start(self, tls: ssl.SSLContext | None = None) -> FakeApiServer:
        """Serve on a free port of 127.0.0.1; over HTTPS with ``tls`` (a server context), as
        a pod's in-cluster client reaches the API server."""
        handler = type("Handler", (_Handler,), {"api": self})
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._http.daemon_threads = True
        self._scheme = "http"
        if tls is not None:
            self._http.socket = tls.wrap_socket(self._http.socket, server_side=True)
            self._scheme = "https"
        threading.Thread(target=self._http.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()

    def __enter__(self) -> FakeApiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._http is not None, "start() first"
        return int(self._http.server_address[1])

    @property
    def url(self) -> str:
        return f"{self._scheme}://127.0.0.1:{self.port}"

    def kubeconfig(self, path: Path) -> Path:
        """Write a kubeconfig naming this server to ``path``."""
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

    # --- what tests set up and read ----------------------------------------------------------
    @property
    def minor(self) -> int:
        return int(self.version.split(".")[1])

    @property
    def types(self) -> tuple[ResourceType, ...]:
        return resource_types(self.minor)

    def type_of(self, kind: str) -> ResourceType:
        return next(t for t in self.types if t.kind == kind)

    def plug(self, behaviour: Behaviour) -> Behaviour:
        """Plugged ahead of the behaviours already there: a fault or a hook a test adds acts
        before a standing behaviour (Bindings, a controller) answers the request."""
        with self.lock:
            self.behaviours.insert(0, behaviour)
        return behaviour

    def unplug(self, behaviour: Behaviour) -> None:
        self.behaviours.remove(behaviour)

    def next_version(self) -> str:
        self._resource_version = str(next(self._versions))
        return self._resource_version

    def seed(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Store ``obj`` as another client would have (no validation); the server's metadata
        is filled where missing. Returns a copy of what is stored."""
        stored = copy.deepcopy(obj)
        metadata = stored.setdefault("metadata", {})
        if "apiVersion" not in stored:
            stored["apiVersion"] = self.type_of(stored["kind"]).group_version
        metadata.setdefault("uid", self._uid())
        metadata.setdefault("creationTimestamp", CREATED)
        metadata.setdefault("generation", 1)
        with self.lock:
            metadata["resourceVersion"] = self.next_version()
            self.objects[_key_of(stored)] = stored
            return copy.deepcopy(stored)

    def get(self, kind: str, name: str, namespace: str = "") -> dict[str, Any] | None:
        with self.lock:
            found = self.objects.get((kind, namespace, name))
            return copy.deepcopy(found) if found is not None else None

    def objects_of(self, kind: str, namespace: str | None = None) -> list[dict[str, Any]]:
        with self.lock:
            return [
                copy.deepcopy(obj)
                for (k, ns, _name), obj in sorted(self.objects.items())
                if k == kind and namespace in (None, ns)
            ]

    def change(self, kind: str, name: str, namespace: str = "", **fields: Any) -> dict[str, Any]:
        """Someone else changed the object: ``fields`` merged in (a JSON merge patch, e.g.
        status={"phase": "Running"}) and a new resourceVersion. Returns a copy."""
        with self.lock:
            key = (kind, namespace, name)
            changed = merge_patch(self.objects[key], fields)
            changed["metadata"]["resourceVersion"] = self.next_version()
            self.objects[key] = changed
            return copy.deepcopy(changed)

    def remove(self, kind: str, name: str, namespace: str = "") -> dict[str, Any] | None:
        with self.lock:
            return self.objects.pop((kind, namespace, name), None)

    def requests_for(
        self, plural: str, *, method: str | None = None, named: bool | None = None
    ) -> list[Request]:
        with self.lock:
            return [r for r in self.requests if r.is_for(plural, method=method, named=named)]

    def writes(self) -> list[Request]:
        """Every request that could change something, in order."""
        with self.lock:
            return [r for r in self.requests if r.method != "GET"]

    # --- HTTP ----------------------------------------------------------------------------------
    def handle(self, method: str, url: str, content_type: str, raw: bytes) -> Reply:
        parsed = urllib.parse.urlsplit(url)
        parts = [part for part in parsed.path.split("/") if part]
        query = dict(urllib.parse.parse_qsl(parsed.query))
        try:
            body = _decode(content_type, raw)
        except ValueError as error:
            return failure(400, "BadRequest", f"the body is not {content_type}: {error}")
        request = Request(method, parsed.path, query, content_type, body, route=Route.parse(parts))
        with self.lock:
            self.requests.append(request)
        reply = None
        for behaviour in list(self.behaviours):
            reply = behaviour.before(self, request)
            if reply is not None:
                break
        if reply is None:
            with self.lock:
                reply = self._serve(request, parts)
        request.status = reply.status
        for behaviour in list(self.behaviours):
            behaviour.after(self, request, reply)
        return reply

    def _serve(self, request: Request, parts: list[str]) -> Reply:
        if request.method == "GET":
            found = discovery(parts, self.minor)
            if found is not None:
                return Reply(200, found)
        route = request.route
        resource = None
        if route is not None:
            resource = next(
                (
                    t
                    for t in self.types
                    if t.group_version == route.group_version and t.plural == route.plural
                ),
                None,
            )
        if route is None or resource is None or route.subresource:
            return failure(404, "NotFound", f"the server could not find {request.path}")
        if route.namespace and not resource.namespaced:
            return failure(404, "NotFound", f"{resource.plural} are not namespaced")
        dry_run = request.query.get("dryRun") == "All"
        if not route.name:
            if request.method == "GET":
                return self._list(resource, route.namespace, request)
            if request.method == "POST":
                return self._create(resource, route.namespace, request.body, dry_run)
            return failure(405, "MethodNotAllowed", f"{request.method} on a collection")
        key = (resource.kind, route.namespace, route.name)
        if request.method == "GET":
            stored = self.objects.get(key)
            if stored is None:
                return _not_found(resource, route.name)
            return Reply(200, copy.deepcopy(stored))
        if request.method == "PUT":
            return self._update(resource, key, request.body, dry_run)
        if request.method == "PATCH":
            if request.content_type not in self.patch_types:
                return failure(415, "UnsupportedMediaType", f"{request.content_type} not served")
            if request.content_type == APPLY_PATCH:
                return self._apply(resource, key, request.query, request.body, dry_run)
            return self._merge(resource, key, request.body, dry_run)
        if request.method == "DELETE":
            return self._delete(resource, key, request.body, dry_run)
        return failure(405, "MethodNotAllowed", f"{request.method} not served")

    # --- verbs -------------------------------------------------------------------------------
    def _list(self, resource: ResourceType, namespace: str, request: Request) -> Reply:
        if request.watching:
            return Reply(200, None)  # the handler holds an empty watch open
        query = request.query
        try:
            items = [
                obj
                for (kind, obj_namespace, _name), obj in sorted(self.objects.items())
                if kind == resource.kind
                and (not namespace or obj_namespace == namespace)
                and labels_match(obj, query.get("labelSelector", ""))
                and fields_match(obj, query.get("fieldSelector", ""))
            ]
        except SelectorError as error:
            return failure(400, "BadRequest", str(error))
        token = query.get("continue", "")
        if token and not token.isdigit():
            return failure(400, "BadRequest", f"continue {token!r} is not one this server gave")
        start = int(token or "0")
        limit = int(query.get("limit") or "0") or max(len(items), 1)
        metadata: dict[str, Any] = {"resourceVersion": self._resource_version}
        if start + limit < len(items):
            metadata["continue"] = str(start + limit)
        return Reply(
            200,
            {
                "kind": f"{resource.kind}List",
                "apiVersion": resource.group_version,
                "metadata": metadata,
                "items": copy.deepcopy(items[start : start + limit]),  # the page only
            },
        )

    def _refusal(self, resource: ResourceType, namespace: str, body: Any) -> Reply | None:
        """What any write refuses before looking at the stored object."""
        if not isinstance(body, dict):
            return failure(400, "BadRequest", "the body is not an object")
        if body.get("kind", resource.kind) != resource.kind or (
            body.get("apiVersion", resource.group_version) != resource.group_version
        ):
            return failure(400, "BadRequest", "the body's kind does not match the resource path")
        if body.get("metadata", {}).get("namespace", namespace) != namespace:
            return failure(
                400,
                "BadRequest",
                "the namespace of the provided object does not match the namespace sent on the "
                "request",
            )
        if (
            self.namespaces_must_exist
            and resource.namespaced
            and ("Namespace", "", namespace) not in self.objects
        ):
            return failure(404, "NotFound", f'namespaces "{namespace}" not found')
        return None

    def _create(self, resource: ResourceType, namespace: str, body: Any, dry_run: bool) -> Reply:
        refused = self._refusal(resource, namespace, body)
        if refused is not None:
            return refused
        obj = copy.deepcopy(body)
        obj.update(kind=resource.kind, apiVersion=resource.group_version)
        metadata = obj.setdefault("metadata", {})
        if not metadata.get("name"):
            if not metadata.get("generateName"):
                return failure(422, "Invalid", "metadata.name: Required value")
            metadata["name"] = metadata["generateName"] + secrets.token_hex(3)[:5]
        if resource.namespaced:
            metadata["namespace"] = namespace
        key = _key_of(obj)
        if key in self.objects:
            return failure(
                409, "AlreadyExists", f'{resource.plural} "{metadata["name"]}" already exists'
            )
        problem = object_problem(obj)
        if problem:
            return failure(422, "Invalid", problem)
        metadata.pop("resourceVersion", None)
        metadata.update(uid=self._uid(), creationTimestamp=CREATED, generation=1)
        if dry_run:
            return Reply(201, obj)
        metadata["resourceVersion"] = self.next_version()
        self.objects[key] = obj
        self.history.append(f"create {resource.kind}/{metadata['name']}")
        return Reply(201, copy.deepcopy(obj))

    def _update(self, resource: ResourceType, key: Key, body: Any, dry_run: bool) -> Reply:
        refused = self._refusal(resource, key[1], body)
        if refused is not None:
            return refused
        stored = self.objects.get(key)
        if stored is None:
            return _not_found(resource, key[2])
        metadata = body.get("metadata") or {}
        if metadata.get("name") != key[2]:
            return failure(400, "BadRequest", "the name of the object does not match the URL")
        version = metadata.get("resourceVersion")
        if not version:
            return failure(
                422, "Invalid", "metadata.resourceVersion: Invalid value: must be specified"
            )
        if version != stored["metadata"]["resourceVersion"]:
            return failure(409, "Conflict", _CONFLICT)
        if metadata.get("uid") not in (None, stored["metadata"]["uid"]):
            return failure(409, "Conflict", "Precondition failed: UID")
        updated = {
            **copy.deepcopy(body),
            "kind": resource.kind,
            "apiVersion": resource.group_version,
        }
        return self._store_change(resource, key, stored, updated, "update", dry_run)

    def _merge(self, resource: ResourceType, key: Key, body: Any, dry_run: bool) -> Reply:
        stored = self.objects.get(key)
        if stored is None:
            return _not_found(resource, key[2])
        if not isinstance(body, dict):
            return failure(400, "BadRequest", "a merge patch is an object")
        metadata = body.get("metadata") or {}
        if metadata.get("uid") not in (None, stored["metadata"]["uid"]):
            return failure(409, "Conflict", "Precondition failed: UID")
        if metadata.get("resourceVersion") not in (None, stored["metadata"]["resourceVersion"]):
            return failure(409, "Conflict", _CONFLICT)
        patched = merge_patch(stored, body)
        return self._store_change(resource, key, stored, patched, "patch", dry_run)

    def _store_change(
        self,
        resource: ResourceType,
        key: Key,
        stored: dict[str, Any],
        changed: dict[str, Any],
        verb: str,
        dry_run: bool,
    ) -> Reply:
        problem = object_problem(changed)
        if problem:
            return failure(422, "Invalid", problem)
        metadata = changed.setdefault("metadata", {})
        for name in ("uid", "creationTimestamp", "generation"):
            metadata[name] = stored["metadata"].get(name)
        if resource.namespaced:
            metadata["namespace"] = key[1]
        if changed.get("spec") != stored.get("spec"):
            metadata["generation"] = (stored["metadata"].get("generation") or 1) + 1
        if dry_run:
            return Reply(200, changed)
        metadata["resourceVersion"] = self.next_version()
        self.objects[key] = changed
        self.history.append(f"{verb} {resource.kind}/{key[2]}")
        return Reply(200, copy.deepcopy(changed))

    def _apply(
        self,
        resource: ResourceType,
        key: Key,
        query: dict[str, str],
        body: Any,
        dry_run: bool,
    ) -> Reply:
        """Server-side apply with one field manager: the applied configuration replaces the
        object's content, which is what apply does when one manager owns every field it sets.
        A no-op apply writes nothing from 1.21 on; a 1.20 server still rewrites managedFields
        and the resourceVersion (measured on a real 1.20.2 server). Before 1.28 an object
        carrying ``matchConditions`` is refused, as a 1.20 server refuses an unknown field."""
        manager = query.get("fieldManager", "")
        if not manager:
            return failure(400, "BadRequest", "PATCH with apply-patch+yaml requires fieldManager")
        refused = self._refusal(resource, key[1], body)
        if refused is not None:
            return refused
        if "kind" not in body or "apiVersion" not in body:
            return failure(400, "BadRequest", "an applied configuration names its kind")
        if body.get("metadata", {}).get("name") != key[2]:
            return failure(400, "BadRequest", "body name differs from the path")
        if self.minor < 28 and "matchConditions" in json.dumps(body):
            return failure(
                500,
                "InternalError",
                ".webhooks[name=...].matchConditions: field not declared in schema",
            )
        existing = self.objects.get(key)
        applied = copy.deepcopy(body)
        applied.pop("status", None)
        if resource.namespaced:
            applied["metadata"]["namespace"] = key[1]
        label = f"{key[0]}/{key[2]}"
        if existing is not None and without_server_fields(existing) == applied:
            if self.minor >= 21:
                return Reply(200, copy.deepcopy(existing))
            rewritten = copy.deepcopy(existing)
            rewritten["metadata"]["managedFields"] = self._managed_fields(manager, resource)
            if not dry_run:
                rewritten["metadata"]["resourceVersion"] = self.next_version()
                self.objects[key] = rewritten
                self.history.append(f"no-op apply {label}")
            return Reply(200, copy.deepcopy(rewritten))
        problem = object_problem(applied)
        if problem:
            return failure(422, "Invalid", problem)
        if existing is None:
            server: dict[str, Any] = {"uid": self._uid(), "creationTimestamp": CREATED}
            server["generation"] = 1
            code = 201
        else:
            server = {name: existing["metadata"][name] for name in ("uid", "creationTimestamp")}
            server["generation"] = existing["metadata"]["generation"] + 1
            applied["status"] = existing.get("status", {})
            code = 200
        applied["metadata"].update(server)
        applied["metadata"]["managedFields"] = self._managed_fields(manager, resource)
        if dry_run:
            applied["metadata"]["resourceVersion"] = (
                existing["metadata"]["resourceVersion"] if existing else ""
            )
            return Reply(code, applied)
        applied["metadata"]["resourceVersion"] = self.next_version()
        self.objects[key] = applied
        self.history.append(f"apply {label}")
        return Reply(code, copy.deepcopy(applied))

    def _managed_fields(self, manager: str, resource: ResourceType) -> list[dict[str, Any]]:
        tick = next(self._clock)
        return [
            {
                "manager": manager,
                "operation": "Apply",
                "apiVersion": resource.group_version,
                "time": f"2026-01-01T00:{tick // 60:02d}:{tick % 60:02d}Z",
            }
        ]

    def _delete(self, resource: ResourceType, key: Key, body: Any, dry_run: bool) -> Reply:
        stored = self.objects.get(key)
        if stored is None:
            return _not_found(resource, key[2])
        preconditions = (body or {}).get("preconditions") or {}
        if preconditions.get("uid") not in (None, stored["metadata"]["uid"]):
            return failure(409, "Conflict", "Precondition failed: UID")
        if dry_run:
            return Reply(200, copy.deepcopy(stored))
        self._delete_stored(key)
        return Reply(200, stored)

    def _delete_stored(self, key: Key) -> None:
        """Delete as the API server does: a Namespace takes what is in it."""
        self.objects.pop(key, None)
        self.history.append(f"delete {key[0]}/{key[2]}")
        if key[0] == "Namespace":
            for inner in [k for k in self.objects if k[1] == key[2]]:
                del self.objects[inner]

    def _uid(self) -> str:
        return f"00000000-0000-4000-8000-{next(self._uids):012d}"


def _key_of(obj: dict[str, Any]) -> Key:
    metadata = obj["metadata"]
    return (obj["kind"], metadata.get("namespace", ""), metadata["name"])


def _not_found(resource: ResourceType, name: str) -> Reply:
    return failure(404, "NotFound", f'{resource.plural} "{name}" not found')


def _decode(content_type: str, raw: bytes) -> Any:
    if not raw:
        return None
    if content_type == APPLY_PATCH:
        return yaml.safe_load(raw)  # apply bodies may be YAML
    return json.loads(raw)


class _Handler(BaseHTTPRequestHandler):
    api: FakeApiServer
    protocol_version = "HTTP/1.1"
    # Headers and body leave in two writes: on a kept-alive connection Nagle's algorithm would
    # hold the body until the client's delayed ACK (~40 ms a request).
    disable_nagle_algorithm = True

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip()
        reply = self.api.handle(self.command, self.path, content_type, raw)
        if reply.body is None:
            self._empty_watch()
            return
        data = json.dumps(reply.body).encode()
        self.send_response(reply.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _empty_watch(self) -> None:
        # No events, then the end of the stream, as the API server's timeoutSeconds ends a
        # watch: the client watches again.
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.api.stopping.wait(self.api.watch_seconds)
        self.wfile.write(b"0\r\n\r\n")

    do_GET = do_POST = do_PATCH = do_DELETE = do_PUT = _serve

    def log_message(self, format: str, *args: Any) -> None:
        return


def serving(api: FakeApiServer) -> Iterator[FakeApiServer]:
    """For a fixture: ``yield from serving(FakeApiServer(...))``."""
    with api:
        yield api


__all__ = [
    "SERVER_METADATA",
    "FakeApiServer",
    "Key",
    "serving",
    "status_body",
    "without_server_fields",
]
