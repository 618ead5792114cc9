"""What the mig_node role's cluster steps depend on beyond the API server itself, played on the
shared fake (tests/support/fake_api_server) for a simulated node (tests/simulator). The Node,
the pods and the device-plugin DaemonSet are objects in the fake's store, so its GET, list,
patch, delete and selectors serve them; ``FakeCluster`` is the Behaviour that plays:

- the device-plugin DaemonSet controller: its pod runs on the node while the DaemonSet's
  nodeSelector (``hygon.com/dcu.present=true``) and node affinity (not
  ``hygon.com/dcu.device-plugin=parked``) select it; while it runs, a real process holds the
  node's /dev/kfd (as the real plugin does), and it serves the mode the node had when it started;
- the kubelet: the node's allocatable resources follow what a Ready plugin pod serves;
- PodDisruptionBudgets: the Eviction subresource refuses a listed pod with HTTP 429 a set number
  of times (``None``: forever);
- workload pods: each pod requesting a hygon.com/ resource holds /dev/kfd until it is gone; an
  evicted pod named in ``stopping_lists`` stays listed, terminating, for that many pod listings.

Two switches break the device plugin the ways operators meet: ``plugin_deployed=False`` (no
DaemonSet in the namespace, so no pod) and ``plugin_starts_ready=False`` (the pod stays Pending,
its container waiting in ImagePullBackOff).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import simnode
from fake_api_server import Behaviour, FakeApiServer, Reply, Request, failure, status_body
from fake_api_server import pod as pod_object

from .runner import node_vars

PLUGIN_NAMESPACE = "hygon-dcu-system"
PLUGIN_LABELS = {"app.kubernetes.io/name": "hygon-dcu-device-plugin"}
PARK_LABEL = "hygon.com/dcu.device-plugin"
PRESENT_LABEL = "hygon.com/dcu.present"
PLUGIN_DAEMONSET = "hygon-dcu-device-plugin"
TERMINATING_SINCE = "2026-01-01T00:00:00Z"
_HOLD = (
    "import os, sys\nos.open(sys.argv[1], os.O_RDONLY)\nprint('ready', flush=True)\n"
    "sys.stdin.read()\n"
)
# (namespace, name) of a pod
PodKey = tuple[str, str]


def _requests_dcu(pod: dict[str, Any]) -> bool:
    for container in pod["spec"]["containers"]:
        resources = container.get("resources") or {}
        names = [*(resources.get("limits") or {}), *(resources.get("requests") or {})]
        if any(name.startswith("hygon.com/") for name in names):
            return True
    return False


def _is_ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _schedules_on(daemonset: dict[str, Any], node: dict[str, Any]) -> bool:
    """Whether the DaemonSet's nodeSelector and required node affinity select ``node``."""
    labels = node["metadata"].get("labels") or {}
    pod_spec = daemonset["spec"]["template"]["spec"]
    if any(labels.get(key) != value for key, value in pod_spec["nodeSelector"].items()):
        return False
    affinity = pod_spec["affinity"]["nodeAffinity"]
    for term in affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]:
        for expression in term["matchExpressions"]:
            assert expression["operator"] == "NotIn", "the plugin's affinity only uses NotIn"
            if labels.get(expression["key"]) in expression["values"]:
                return False
    return True


def _plugin_daemonset() -> dict[str, Any]:
    """The device-plugin DaemonSet as deployed, as far as the role reads it."""
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {
            "name": PLUGIN_DAEMONSET,
            "namespace": PLUGIN_NAMESPACE,
            "labels": dict(PLUGIN_LABELS),
        },
        "spec": {
            "selector": {"matchLabels": dict(PLUGIN_LABELS)},
            "template": {
                "metadata": {"labels": dict(PLUGIN_LABELS)},
                "spec": {
                    "nodeSelector": {PRESENT_LABEL: "true"},
                    "affinity": {
                        "nodeAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": {
                                "nodeSelectorTerms": [
                                    {
                                        "matchExpressions": [
                                            {
                                                "key": PARK_LABEL,
                                                "operator": "NotIn",
                                                "values": ["parked"],
                                            }
                                        ]
                                    }
                                ]
                            }
                        }
                    },
                    "containers": [{"name": "plugin", "image": "registry.local/p:1"}],
                },
            },
        },
        "status": {"desiredNumberScheduled": 0, "numberReady": 0},
    }


def _plugin_not_ready() -> dict[str, Any]:
    return {
        "phase": "Pending",
        "conditions": [{"type": "Ready", "status": "False", "reason": "ContainersNotReady"}],
        "containerStatuses": [
            {
                "name": "plugin",
                "ready": False,
                "state": {"waiting": {"reason": "ImagePullBackOff"}},
            }
        ],
    }


@dataclass(eq=False)
class FakeCluster(Behaviour):
    """The Behaviour above and the fake API server it is plugged into (``api``), for ``node``."""

    node: simnode.SimNode
    node_name: str = "gpu-node-1"
    pdb_refusals: dict[str, int | None] = field(default_factory=dict)
    eviction_attempts: dict[str, int] = field(default_factory=dict)
    # An evicted pod named here stays listed, terminating, for that many pod listings (a
    # workload that takes a while to stop).
    stopping_lists: dict[str, int] = field(default_factory=dict)
    plugin_starts: int = 0
    plugin_deployed: bool = True
    plugin_starts_ready: bool = True
    api: FakeApiServer = field(init=False, repr=False)
    _holders: dict[PodKey, subprocess.Popen[str]] = field(default_factory=dict, init=False)
    _terminating: dict[PodKey, int] = field(default_factory=dict, init=False)
    _served_mode: str = field(default="", init=False)

    def __post_init__(self) -> None:
        self.api = FakeApiServer(behaviours=[self])
        self.api.seed(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": self.node_name, "labels": {PRESENT_LABEL: "true"}},
                "spec": {},
                "status": {"allocatable": {"cpu": "64"}, "capacity": {"cpu": "64"}},
            }
        )

    # --- what tests set up and read ----------------------------------------------------------
    @property
    def node_object(self) -> dict[str, Any]:
        node = self.api.get("Node", self.node_name)
        assert node is not None, "the Node is never deleted"
        return node

    @property
    def pods(self) -> dict[PodKey, dict[str, Any]]:
        """Every stored pod (a copy), by (namespace, name)."""
        return {
            (pod["metadata"]["namespace"], pod["metadata"]["name"]): pod
            for pod in self.api.objects_of("Pod")
        }

    def add_pod(
        self,
        name: str,
        namespace: str = "ml",
        limits: dict[str, str] | None = None,
        owner: str = "ReplicaSet",
        labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None,
    ) -> None:
        pod = pod_object(
            name,
            namespace,
            node=self.node_name,
            containers={"main": limits or {}},
            phase="Running",
            ready=True,
            labels=labels or {"app": name},
            annotations=annotations or {},
            owner=owner,
        )
        with self.api.lock:
            self.api.seed(pod)
            if _requests_dcu(pod):
                self._hold((namespace, name))

    def plugin_pod(self) -> dict[str, Any] | None:
        return next(iter(self.api.objects_of("Pod", PLUGIN_NAMESPACE)), None)

    def served_mode(self) -> str:
        pod = self.plugin_pod()
        return self._served_mode if pod is not None and _is_ready(pod) else ""

    def start(self) -> None:
        """Start serving, with the plugin pod already running on the node."""
        self.reconcile()
        self.reconcile()
        self.api.start()

    def stop(self) -> None:
        self.api.stop()
        with self.api.lock:
            for key in list(self._holders):
                self._release(key)

    # --- /dev/kfd held by the pods -----------------------------------------------------------
    def _hold(self, key: PodKey) -> None:
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

    def _release(self, key: PodKey) -> None:
        proc = self._holders.pop(key, None)
        if proc is not None:
            proc.kill()
            proc.wait()
            for stream in (proc.stdin, proc.stdout):
                if stream:
                    stream.close()

    def _delete_pod(self, key: PodKey, why: str) -> None:
        self.api.remove("Pod", key[1], key[0])
        self.api.history.append(f"{why} Pod/{key[1]}")
        self._terminating.pop(key, None)
        self._release(key)

    # --- the Behaviour -----------------------------------------------------------------------
    def before(self, api: FakeApiServer, request: Request) -> Reply | None:
        self.reconcile()
        route = request.route
        if route is not None and (route.plural, route.subresource) == ("pods", "eviction"):
            return self._evict(request, (route.namespace, route.name))
        if request.is_for("pods", method="GET", named=False) and not request.watching:
            self._count_terminating_listing()
        return None

    def after(self, api: FakeApiServer, request: Request, reply: Reply) -> None:
        # The controllers react to a write at once (a parked node loses its plugin pod, a
        # deleted pod lets go of /dev/kfd), not only at the next request.
        if request.method != "GET":
            self.reconcile()

    def _evict(self, request: Request, key: PodKey) -> Reply:
        if request.method != "POST":
            return failure(405, "MethodNotAllowed", "an Eviction is only created")
        name = key[1]
        with self.api.lock:
            if self.api.get("Pod", name, key[0]) is None:
                return failure(404, "NotFound", f'pods "{name}" not found')
            self.eviction_attempts[name] = self.eviction_attempts.get(name, 0) + 1
            if name in self.pdb_refusals:
                left = self.pdb_refusals[name]
                if left is None or left > 0:
                    if left is not None:
                        self.pdb_refusals[name] = left - 1
                    return failure(
                        429,
                        "TooManyRequests",
                        "Cannot evict pod as it would violate the pod's disruption budget.",
                    )
            if self.stopping_lists.get(name):
                self._terminating[key] = self.stopping_lists[name]
                self.api.change(
                    "Pod", name, key[0], metadata={"deletionTimestamp": TERMINATING_SINCE}
                )
            else:
                self._delete_pod(key, "evict")
        return Reply(201, status_body(201, ""))

    def _count_terminating_listing(self) -> None:
        """One listing more for each terminating pod; those whose time is up go."""
        with self.api.lock:
            for key in list(self._terminating):
                self._terminating[key] -= 1
                if self._terminating[key] <= 0:
                    self._delete_pod(key, "delete")

    # --- the DaemonSet controller and the kubelet ----------------------------------------------
    def reconcile(self) -> None:
        """One step of the DaemonSet controller and the kubelet."""
        api = self.api
        with api.lock:
            for key in [k for k in self._holders if api.get("Pod", k[1], k[0]) is None]:
                self._release(key)
            daemonset = self._deployed_daemonset()
            selected = daemonset is not None and _schedules_on(daemonset, self.node_object)
            pod = self.plugin_pod()
            if pod is not None and not selected:
                self._delete_pod((PLUGIN_NAMESPACE, pod["metadata"]["name"]), "delete")
            elif pod is None and selected:
                assert daemonset is not None
                self._start_plugin(daemonset)
            elif pod is not None and not _is_ready(pod):
                self._set_status(
                    "Pod",
                    pod["metadata"]["name"],
                    PLUGIN_NAMESPACE,
                    {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
                    if self.plugin_starts_ready
                    else _plugin_not_ready(),
                )
            self._set_status(
                "Node",
                self.node_name,
                "",
                {**self.node_object["status"], "allocatable": self._allocatable()},
            )
            if daemonset is not None:
                pod = self.plugin_pod()
                self._set_status(
                    "DaemonSet",
                    PLUGIN_DAEMONSET,
                    PLUGIN_NAMESPACE,
                    {
                        "desiredNumberScheduled": int(pod is not None),
                        "numberReady": int(pod is not None and _is_ready(pod)),
                    },
                )

    def _deployed_daemonset(self) -> dict[str, Any] | None:
        """The stored DaemonSet, there or not as ``plugin_deployed`` says."""
        stored = self.api.get("DaemonSet", PLUGIN_DAEMONSET, PLUGIN_NAMESPACE)
        if self.plugin_deployed and stored is None:
            return self.api.seed(_plugin_daemonset())
        if not self.plugin_deployed and stored is not None:
            self.api.remove("DaemonSet", PLUGIN_DAEMONSET, PLUGIN_NAMESPACE)
            return None
        return stored

    def _start_plugin(self, daemonset: dict[str, Any]) -> None:
        self.plugin_starts += 1
        name = f"{PLUGIN_DAEMONSET}-{self.plugin_starts}"
        template = daemonset["spec"]["template"]
        self.api.seed(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": name,
                    "namespace": PLUGIN_NAMESPACE,
                    "labels": dict(template["metadata"]["labels"]),
                    "ownerReferences": [
                        {
                            "apiVersion": "apps/v1",
                            "kind": "DaemonSet",
                            "name": PLUGIN_DAEMONSET,
                            "uid": daemonset["metadata"]["uid"],
                            "controller": True,
                        }
                    ],
                },
                "spec": {"nodeName": self.node_name, "containers": template["spec"]["containers"]},
                "status": {"phase": "Pending", "conditions": []},
            }
        )
        self.api.history.append(f"create Pod/{name}")
        self._hold((PLUGIN_NAMESPACE, name))
        # A mode change is never noticed by a running plugin: it serves the mode it saw.
        self._served_mode = "enabled" if self.node.status().mode == 1 else "disabled"

    def _allocatable(self) -> dict[str, str]:
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
            # Whole cards and, the simulated driver having the slice library, 4 slices a card.
            allocatable.update(
                {
                    "hygon.com/dcu": str(self.node.cards),
                    "hygon.com/dcu.sliced": str(4 * self.node.cards),
                }
            )
        return allocatable

    def _set_status(self, kind: str, name: str, namespace: str, status: dict[str, Any]) -> None:
        """Replace the object's status; a new resourceVersion only when it changed, so that
        a run that changes nothing (check mode) finds every object as it was."""
        stored = self.api.objects[(kind, namespace, name)]
        if stored.get("status") != status:
            stored["status"] = status
            stored["metadata"]["resourceVersion"] = self.api.next_version()


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
        "hygon_dcu_kubeconfig": str(cluster.api.kubeconfig(tmp_path / "kubeconfig")),
        "hygon_dcu_eviction_timeout": 20,
        "hygon_dcu_plugin_timeout": 20,
        "hygon_dcu_holders_timeout": 10,
        "hygon_dcu_resources_timeout": 20,
    }
    return node_vars(cluster.node, **{**settings, **overrides})


def writes(cluster: FakeCluster) -> list[tuple[str, str]]:
    """Every request that could change the cluster (cordon, eviction, park, ...), in order."""
    return [(request.method, request.path) for request in cluster.api.writes()]
