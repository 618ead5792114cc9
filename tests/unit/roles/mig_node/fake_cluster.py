"""A small in-process Kubernetes API for the mig_node role's cluster steps, tied to a simulated
node (tests/simulator). We have no cluster here; this serves the calls kubernetes.core makes
(discovery, Node get/patch, Pod list/get/patch/delete, the Eviction subresource) and plays the
parts the role depends on:

- the device-plugin DaemonSet: its pod runs on the node unless the node carries
  ``hygon.com/dcu.device-plugin=parked``; while it runs, a real process holds the node's
  /dev/kfd (as the real plugin does), and it serves the mode the node had when it started;
- the kubelet: the node's allocatable resources follow what a Ready plugin pod serves;
- PodDisruptionBudgets: an eviction of a listed pod is refused with HTTP 429 a set number of
  times (``None``: forever);
- workload pods: each pod requesting a hygon.com/ resource holds /dev/kfd until it is evicted.

Two switches break the device plugin the ways operators meet: ``plugin_deployed=False`` (no
DaemonSet in the namespace, so no pod) and ``plugin_starts_ready=False`` (the pod stays Pending,
its container waiting in ImagePullBackOff). The DaemonSet selects the node by
``hygon.com/dcu.present=true``, as the real one does.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import threading
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import simnode

from .runner import node_vars

PLUGIN_NAMESPACE = "hygon-dcu-system"
PLUGIN_LABELS = {"app.kubernetes.io/name": "hygon-dcu-device-plugin"}
PARK_LABEL = "hygon.com/dcu.device-plugin"
PRESENT_LABEL = "hygon.com/dcu.present"
PLUGIN_DAEMONSET = "hygon-dcu-device-plugin"
_HOLD = (
    "import os, sys\nos.open(sys.argv[1], os.O_RDONLY)\nprint('ready', flush=True)\n"
    "sys.stdin.read()\n"
)


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def _selected(obj: dict[str, Any], labels: str | None, fields: str | None) -> bool:
    own = obj["metadata"].get("labels") or {}
    for term in filter(None, (labels or "").split(",")):
        key, _ignored, value = term.partition("=")
        if own.get(key) != value:
            return False
    for term in filter(None, (fields or "").split(",")):
        key, _ignored, value = term.partition("=")
        if key == "spec.nodeName" and obj["spec"].get("nodeName") != value:
            return False
        if key == "metadata.name" and obj["metadata"]["name"] != value:
            return False
    return True


def _requests_dcu(pod: dict[str, Any]) -> bool:
    for container in pod["spec"]["containers"]:
        resources = container.get("resources") or {}
        names = [*(resources.get("limits") or {}), *(resources.get("requests") or {})]
        if any(name.startswith("hygon.com/") for name in names):
            return True
    return False


@dataclass
class FakeCluster:
    node: simnode.SimNode
    node_name: str = "gpu-node-1"
    pods: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    pdb_refusals: dict[str, int | None] = field(default_factory=dict)
    eviction_attempts: dict[str, int] = field(default_factory=dict)
    # An evicted pod named here stays listed, terminating, for that many pod listings (a
    # workload that takes a while to stop).
    stopping_lists: dict[str, int] = field(default_factory=dict)
    requests: list[tuple[str, str]] = field(default_factory=list)
    plugin_starts: int = 0
    plugin_deployed: bool = True
    plugin_starts_ready: bool = True
    server: ThreadingHTTPServer | None = None
    _lock: threading.RLock = field(default_factory=threading.RLock)
    _holders: dict[tuple[str, str], subprocess.Popen[str]] = field(default_factory=dict)
    _served_mode: str = ""
    _plugin_ready: bool = False

    def __post_init__(self) -> None:
        self.node_object: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.node_name,
                "uid": "node-uid",
                "resourceVersion": "1",
                "labels": {PRESENT_LABEL: "true"},
            },
            "spec": {},
            "status": {"allocatable": {"cpu": "64"}, "capacity": {"cpu": "64"}},
        }

    # --- workloads -------------------------------------------------------------------------
    def add_pod(
        self,
        name: str,
        namespace: str = "ml",
        limits: dict[str, str] | None = None,
        owner: str = "ReplicaSet",
        labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None,
    ) -> None:
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": f"uid-{name}",
                "resourceVersion": "1",
                "labels": labels or {"app": name},
                "annotations": annotations or {},
                "ownerReferences": [
                    {
                        "apiVersion": "apps/v1",
                        "kind": owner,
                        "name": f"{name}-owner",
                        "uid": f"o-{name}",
                        "controller": True,
                    }
                ],
            },
            "spec": {
                "nodeName": self.node_name,
                "containers": [
                    {
                        "name": "main",
                        "image": "registry.local/app:1",
                        "resources": {"limits": limits or {}},
                    }
                ],
            },
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
        }
        with self._lock:
            self.pods[(namespace, name)] = pod
            if _requests_dcu(pod):
                self._hold((namespace, name))

    def _hold(self, key: tuple[str, str]) -> None:
        proc = subprocess.Popen(
            [sys.executable, "-c", _HOLD, str(self.node.kfd)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != "ready":
            raise RuntimeError(f"holder for {key} did not start")
        self._holders[key] = proc

    def _release(self, key: tuple[str, str]) -> None:
        proc = self._holders.pop(key, None)
        if proc is not None:
            proc.kill()
            proc.wait()
            for stream in (proc.stdin, proc.stdout):
                if stream:
                    stream.close()

    def _delete_pod(self, key: tuple[str, str]) -> None:
        self.pods.pop(key, None)
        self._release(key)

    # --- the device-plugin DaemonSet and the kubelet ---------------------------------------
    def plugin_pod(self) -> dict[str, Any] | None:
        return next(
            (pod for (ns, _ignored), pod in self.pods.items() if ns == PLUGIN_NAMESPACE), None
        )

    def served_mode(self) -> str:
        return self._served_mode if self.plugin_pod() and self._plugin_ready else ""

    def start(self) -> None:
        """Start serving, with the plugin pod already running on the node."""
        self._reconcile()
        self._reconcile()
        handler = type("Handler", (_Handler,), {"cluster": self})
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
        with self._lock:
            for key in list(self._holders):
                self._release(key)

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def write_kubeconfig(self, path: Path) -> Path:
        path.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "current-context": "fake",
                    "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
                    "users": [{"name": "fake", "user": {"token": "fake-token"}}],
                    "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
                }
            )
        )
        return path

    def _reconcile(self) -> None:
        """One step of the DaemonSet controller and the kubelet, run before every request."""
        labels = self.node_object["metadata"].get("labels") or {}
        parked = labels.get(PARK_LABEL) == "parked"
        selected = self.plugin_deployed and labels.get(PRESENT_LABEL) == "true" and not parked
        pod = self.plugin_pod()
        if pod is not None and not selected:
            self._delete_pod((PLUGIN_NAMESPACE, pod["metadata"]["name"]))
            self._plugin_ready = False
        elif pod is None and selected:
            self.plugin_starts += 1
            name = f"hygon-dcu-device-plugin-{self.plugin_starts}"
            self.pods[(PLUGIN_NAMESPACE, name)] = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": name,
                    "namespace": PLUGIN_NAMESPACE,
                    "uid": f"uid-{name}",
                    "resourceVersion": "1",
                    "labels": dict(PLUGIN_LABELS),
                    "ownerReferences": [
                        {
                            "apiVersion": "apps/v1",
                            "kind": "DaemonSet",
                            "name": "hygon-dcu-device-plugin",
                            "uid": "ds",
                            "controller": True,
                        }
                    ],
                },
                "spec": {
                    "nodeName": self.node_name,
                    "containers": [{"name": "plugin", "image": "registry.local/p:1"}],
                },
                "status": {"phase": "Pending", "conditions": []},
            }
            self._hold((PLUGIN_NAMESPACE, name))
            # A mode change is never noticed by a running plugin: it serves the mode it saw.
            self._served_mode = "enabled" if self.node.status().mode == 1 else "disabled"
            self._plugin_ready = False
        elif pod is not None and not self._plugin_ready and not self.plugin_starts_ready:
            pod["status"] = {
                "phase": "Pending",
                "conditions": [
                    {"type": "Ready", "status": "False", "reason": "ContainersNotReady"}
                ],
                "containerStatuses": [
                    {
                        "name": "plugin",
                        "ready": False,
                        "state": {"waiting": {"reason": "ImagePullBackOff"}},
                    }
                ],
            }
        elif pod is not None and not self._plugin_ready:
            pod["status"] = {
                "phase": "Running",
                "conditions": [{"type": "Ready", "status": "True"}],
            }
            self._plugin_ready = True
        allocatable = {"cpu": "64"}
        if self.served_mode() == "enabled":
            allocatable.update(
                {
                    "hygon.com/dcu.partitioned": "8",
                    "hygon.com/dcu": "0",
                    "hygon.com/dcu.partitioned.mig-2g.15gb": "8",
                }
            )
        elif self.served_mode() == "disabled":
            allocatable.update({"hygon.com/dcu": str(self.node.cards)})
        self.node_object["status"]["allocatable"] = allocatable

    def daemonset(self) -> dict[str, Any]:
        scheduled = int(self.plugin_pod() is not None)
        return {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {
                "name": PLUGIN_DAEMONSET,
                "namespace": PLUGIN_NAMESPACE,
                "labels": dict(PLUGIN_LABELS),
                "resourceVersion": "1",
            },
            "spec": {
                "selector": {"matchLabels": dict(PLUGIN_LABELS)},
                "template": {"spec": {"nodeSelector": {PRESENT_LABEL: "true"}}},
            },
            "status": {
                "desiredNumberScheduled": scheduled,
                "numberReady": int(scheduled == 1 and self._plugin_ready),
            },
        }

    # --- API ---------------------------------------------------------------------------------
    def handle(self, method: str, url: str, body: Any) -> tuple[int, Any]:
        parsed = urllib.parse.urlparse(url)
        query = dict(urllib.parse.parse_qsl(parsed.query))
        parts = [p for p in parsed.path.split("/") if p]
        with self._lock:
            self.requests.append((method, parsed.path))
            self._reconcile()
            return self._route(method, parts, query, body)

    def _route(
        self, method: str, parts: list[str], query: dict[str, str], body: Any
    ) -> tuple[int, Any]:
        if parts == ["version"]:
            return 200, {"major": "1", "minor": "30", "gitVersion": "v1.30.0"}
        if parts == ["api"]:
            return 200, {"kind": "APIVersions", "versions": ["v1"]}
        if parts == ["apis"]:
            apps = {"groupVersion": "apps/v1", "version": "v1"}
            return 200, {
                "kind": "APIGroupList",
                "apiVersion": "v1",
                "groups": [{"name": "apps", "versions": [apps], "preferredVersion": apps}],
            }
        if parts == ["apis", "apps", "v1"]:
            return 200, {
                "kind": "APIResourceList",
                "groupVersion": "apps/v1",
                "resources": [
                    {
                        "name": "daemonsets",
                        "singularName": "daemonset",
                        "namespaced": True,
                        "kind": "DaemonSet",
                        "verbs": ["get", "list"],
                    }
                ],
            }
        if parts[:4] == ["apis", "apps", "v1", "namespaces"] and parts[5:] == ["daemonsets"]:
            items = (
                [self.daemonset()] if self.plugin_deployed and parts[4] == PLUGIN_NAMESPACE else []
            )
            return 200, {
                "kind": "DaemonSetList",
                "apiVersion": "apps/v1",
                "metadata": {"resourceVersion": "1"},
                "items": items,
            }
        if parts == ["api", "v1"]:
            verbs = ["get", "list", "patch", "delete", "update", "create", "watch"]
            return 200, {
                "kind": "APIResourceList",
                "groupVersion": "v1",
                "resources": [
                    {
                        "name": "nodes",
                        "singularName": "node",
                        "namespaced": False,
                        "kind": "Node",
                        "verbs": verbs,
                    },
                    {
                        "name": "pods",
                        "singularName": "pod",
                        "namespaced": True,
                        "kind": "Pod",
                        "verbs": verbs,
                    },
                    {
                        "name": "pods/eviction",
                        "singularName": "",
                        "namespaced": True,
                        "group": "policy",
                        "version": "v1",
                        "kind": "Eviction",
                        "verbs": ["create"],
                    },
                ],
            }
        dry_run = query.get("dryRun") == "All"
        if parts[:3] == ["api", "v1", "nodes"] and len(parts) == 4:
            if parts[3] != self.node_name:
                return 404, _status(404, "NotFound", f'nodes "{parts[3]}" not found')
            if method == "PATCH":
                patched = merge_patch(self.node_object, body)
                if not dry_run:
                    self.node_object = patched
                    self._reconcile()
                return 200, copy.deepcopy(patched)
            return 200, copy.deepcopy(self.node_object)
        if parts[:3] == ["api", "v1", "nodes"] and len(parts) == 3:
            return 200, {
                "kind": "NodeList",
                "apiVersion": "v1",
                "metadata": {},
                "items": [copy.deepcopy(self.node_object)],
            }
        namespace = None
        rest = parts[2:]
        if rest[:1] == ["namespaces"]:
            namespace, rest = rest[1], rest[2:]
        if rest[:1] == ["pods"]:
            if len(rest) == 1:
                self._stop_terminating_pods()
                items = [
                    copy.deepcopy(pod)
                    for (ns, _ignored), pod in sorted(self.pods.items())
                    if (namespace is None or ns == namespace)
                    and _selected(pod, query.get("labelSelector"), query.get("fieldSelector"))
                ]
                return 200, {
                    "kind": "PodList",
                    "apiVersion": "v1",
                    "metadata": {"resourceVersion": "1"},
                    "items": items,
                }
            assert namespace is not None
            key = (namespace, rest[1])
            if key not in self.pods:
                return 404, _status(404, "NotFound", f'pods "{rest[1]}" not found')
            if rest[2:] == ["eviction"] and method == "POST":
                return self._evict(key)
            if method == "PATCH":
                patched = merge_patch(self.pods[key], body)
                if not dry_run:
                    self.pods[key] = patched
                return 200, copy.deepcopy(patched)
            if method == "DELETE":
                pod = self.pods[key]
                if not dry_run:
                    self._delete_pod(key)
                return 200, pod
            return 200, copy.deepcopy(self.pods[key])
        return 404, _status(404, "NotFound", f"no route for {method} /{'/'.join(parts)}")

    def _evict(self, key: tuple[str, str]) -> tuple[int, Any]:
        name = key[1]
        self.eviction_attempts[name] = self.eviction_attempts.get(name, 0) + 1
        if name in self.pdb_refusals:
            left = self.pdb_refusals[name]
            if left is None or left > 0:
                if left is not None:
                    self.pdb_refusals[name] = left - 1
                return 429, _status(
                    429,
                    "TooManyRequests",
                    "Cannot evict pod as it would violate the pod's disruption budget.",
                )
        if self.stopping_lists.get(name):
            self.pods[key]["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        else:
            self._delete_pod(key)
        return 201, {"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201}

    def _stop_terminating_pods(self) -> None:
        """One listing more for each terminating pod; those whose time is up go."""
        for key, pod in list(self.pods.items()):
            if "deletionTimestamp" in pod["metadata"]:
                self.stopping_lists[key[1]] -= 1
                if self.stopping_lists[key[1]] <= 0:
                    self._delete_pod(key)


class _Handler(BaseHTTPRequestHandler):
    cluster: FakeCluster

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        body = json.loads(raw) if raw else None
        code, payload = self.cluster.handle(self.command, self.path, body)
        data = json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PATCH = do_DELETE = do_PUT = _serve

    def log_message(self, format: str, *args: Any) -> None:
        pass


def running(cluster: FakeCluster) -> Iterator[FakeCluster]:
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


def cluster_vars(cluster: FakeCluster, tmp_path: Path, **overrides: Any) -> dict[str, Any]:
    """The role variables for a run against ``cluster`` and its simulated node, Kubernetes on."""
    settings: dict[str, Any] = {
        "hygon_dcu_manage_kubernetes": True,
        "hygon_dcu_node_name": cluster.node_name,
        "hygon_dcu_kubeconfig": str(cluster.write_kubeconfig(tmp_path / "kubeconfig")),
        "hygon_dcu_eviction_timeout": 20,
        "hygon_dcu_plugin_timeout": 20,
        "hygon_dcu_holders_timeout": 10,
        "hygon_dcu_resources_timeout": 20,
    }
    return node_vars(cluster.node, **{**settings, **overrides})


def writes(cluster: FakeCluster) -> list[tuple[str, str]]:
    """Every request that could change the cluster (cordon, eviction, park, ...), in order."""
    return [(method, path) for method, path in cluster.requests if method != "GET"]
