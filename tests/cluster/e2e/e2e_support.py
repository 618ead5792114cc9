"""Helpers of the cluster tier's end-to-end tests (see conftest.py for the fixtures).

Run by the `cluster` stage through `tests/cluster/run_e2e.sh`, which brings the cluster up,
loads the image the image stage built and tears everything down afterwards. The tests share one
cluster and one simulated node and run in file order: deploy, the molecule scenario, workloads,
restarts, power loss. Each module leaves the node in partition mode with the plugin Ready, or
says in its docstring what it leaves.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hygon_dcu_plugin import geometry, reservation
from hygon_dcu_plugin.vocabulary import (
    FAMILY,
    GEOMETRY_ANNOTATION,
    RESERVATION_ANNOTATION,
    SCHEDULER_NAME,
    SLICE_MEMORY_MIB,
    SLICED,
)
from playbook_runner import PlaybookRun, run_playbook

REPO = Path(__file__).resolve().parents[3]
VENV_BIN = REPO / ".venv" / "bin"
SIMULATOR = REPO / "tests" / "simulator"
CLUSTER_SH = REPO / "tests" / "cluster" / "cluster.sh"
# A host path the DaemonSet can mount at its own path (the simulated node's root).
SIM_ROOT = Path(os.environ.get("HYGON_DCU_E2E_SIM_ROOT", "/var/lib/hygon-dcu-e2e/node"))
HOST_HYHAL = Path("/opt/hyhal")
NAMESPACE = "hygon-dcu-system"
WORKLOAD_NAMESPACE = "e2e"
WORKLOAD_IMAGE = os.environ.get("HYGON_DCU_WORKLOAD_IMAGE", "localhost/hygon-dcu-workload:test")
PLUGIN_IMAGE = os.environ.get("HYGON_DCU_TEST_IMAGE", "localhost/hygon-dcu-plugin:test")
PLUGIN_SELECTOR = "app.kubernetes.io/name=hygon-dcu-device-plugin"


def required_env(name: str) -> str:
    value = os.environ.get(name, "")
    if not value:
        pytest.fail(f"{name} is not set: run these tests through tests/cluster/run_e2e.sh")
    return value


def wait_for(what: str, probe: Callable[[], Any], timeout: float, interval: float = 0.5) -> Any:
    """Poll probe until it returns something truthy; fail naming what and the last value."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            last = probe()
        except subprocess.CalledProcessError as exc:
            last = f"{exc.cmd[-3:]} failed: {exc.stderr or exc.stdout}"
            value = None
        else:
            value = last
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}; last saw: {last!r}")
        time.sleep(interval)


@dataclass
class Kube:
    kubectl: str
    kubeconfig: str
    node: str

    def run(
        self, *args: str, check: bool = True, stdin: str | None = None, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self.kubectl, "--kubeconfig", self.kubeconfig, *args],
            input=stdin,
            capture_output=True,
            text=True,
            check=check,
            timeout=timeout,
        )

    def json(self, *args: str) -> Any:
        return json.loads(self.run(*args, "-o", "json").stdout)

    def apply(
        self, manifest: dict[str, Any], check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        return self.run("apply", "-f", "-", stdin=json.dumps(manifest), check=check)

    def node_object(self) -> dict[str, Any]:
        node: dict[str, Any] = self.json("get", "node", self.node)
        return node

    def allocatable(self) -> dict[str, str]:
        status = self.node_object().get("status", {})
        return dict(status.get("allocatable", {}))

    def pod(self, name: str, namespace: str = WORKLOAD_NAMESPACE) -> dict[str, Any] | None:
        done = self.run("get", "pod", "-n", namespace, name, "-o", "json", check=False)
        if done.returncode != 0:
            if "NotFound" in done.stderr:
                return None
            raise subprocess.CalledProcessError(
                done.returncode, done.args, done.stdout, done.stderr
            )
        pod: dict[str, Any] = json.loads(done.stdout)
        return pod

    def plugin_pods(self) -> list[dict[str, Any]]:
        pods: list[dict[str, Any]] = self.json(
            "get", "pods", "-n", NAMESPACE, "-l", PLUGIN_SELECTOR
        )["items"]
        return pods

    def ready_plugin_pod(self) -> dict[str, Any] | None:
        for pod in self.plugin_pods():
            if pod["metadata"].get("deletionTimestamp"):
                continue
            conditions = pod.get("status", {}).get("conditions", [])
            if any(c["type"] == "Ready" and c["status"] == "True" for c in conditions):
                return pod
        return None

    def events_for(self, name: str, namespace: str = WORKLOAD_NAMESPACE) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = self.json(
            "get", "events", "-n", namespace, "--field-selector", f"involvedObject.name={name}"
        )["items"]
        return events

    def logs(self, name: str, namespace: str = WORKLOAD_NAMESPACE) -> str:
        return self.run("logs", "-n", namespace, name, check=False).stdout

    def delete_pod(self, name: str, namespace: str = WORKLOAD_NAMESPACE, wait: bool = True) -> None:
        self.run(
            "delete",
            "pod",
            "-n",
            namespace,
            name,
            "--ignore-not-found",
            f"--wait={'true' if wait else 'false'}",
            "--grace-period=1",
            timeout=180,
        )


@dataclass
class SimNode:
    """The simulated node the DaemonSet serves, read the way the driver keeps it."""

    root: Path
    sim: Any = field(repr=False)

    def status(self) -> Any:
        return self.sim.open_node(str(self.root)).status()

    def live_uuids(self) -> set[str]:
        return {ci.uuid for ci in self.status().compute_instances}

    def gpu_instance_count(self) -> int:
        return len(self.status().gpu_instances)

    def mode_on(self) -> bool:
        return bool(self.status().mode)

    def reboot(self) -> None:
        self.sim.open_node(str(self.root)).reboot()


@dataclass
class Playbooks:
    inventory: Path
    env: dict[str, str]

    def run(self, name: str, *extra: str, check: bool = True) -> PlaybookRun:
        args = ["-i", str(self.inventory), name, *extra]
        done = run_playbook(args, env=self.env, timeout=1500)
        if check and done.returncode != 0:
            pytest.fail(
                f"ansible-playbook {' '.join(args)} failed ({done.returncode}):\n"
                f"{done.output[-8000:]}"
            )
        return done


def partition_pod(
    name: str,
    profile: str = "2g.15gb",
    command: list[str] | None = None,
    restart_policy: str = "Never",
    container: str = "work",
    limits: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A pod asking one partition (or the given ``limits``) that runs the simulator's workload
    probe in the container the kubelet and containerd made from the plugin's Allocate answer.
    The probe reads the simulated driver's state (ROOT/.sim, read-only), everything else from
    its own view."""
    root = str(SIM_ROOT)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": WORKLOAD_NAMESPACE},
        "spec": {
            "restartPolicy": restart_policy,
            "terminationGracePeriodSeconds": 1,
            "enableServiceLinks": False,
            "automountServiceAccountToken": False,
            "containers": [
                {
                    "name": container,
                    "image": WORKLOAD_IMAGE,
                    "imagePullPolicy": "Never",
                    "command": command or ["dcu-probe"],
                    "env": [{"name": "HYDMI_SIM_ROOT", "value": root}],
                    "resources": {
                        "limits": limits or {FAMILY: "1", f"{FAMILY}.mig-{profile}": "1"}
                    },
                    "volumeMounts": [
                        {"name": "driver-state", "mountPath": f"{root}/.sim", "readOnly": True}
                    ],
                }
            ],
            "volumes": [
                {"name": "driver-state", "hostPath": {"path": f"{root}/.sim", "type": "Directory"}}
            ],
        },
    }


def idle_pod(name: str) -> dict[str, Any]:
    """A pod that asks nothing of the product, on the node: what a stolen token would aim at."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": WORKLOAD_NAMESPACE, "labels": {"app": "idle"}},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "automountServiceAccountToken": False,
            "containers": [
                {
                    "name": "idle",
                    "image": WORKLOAD_IMAGE,
                    "imagePullPolicy": "Never",
                    "command": ["sleep", "3600"],
                }
            ],
        },
    }


def patch_as(
    kube: Kube, account: str, name: str, patch: dict[str, Any]
) -> subprocess.CompletedProcess[str]:
    """A merge patch of the workload pod ``name`` by one of the role's service accounts, as its
    token would send it (the admin impersonates the account: RBAC and admission see it)."""
    return kube.run(
        "--as",
        f"system:serviceaccount:{NAMESPACE}:{account}",
        "patch",
        "pod",
        "-n",
        WORKLOAD_NAMESPACE,
        name,
        "--type",
        "merge",
        "-p",
        json.dumps(patch),
        check=False,
    )


def refusal_without_profile(kube: Kube, name: str) -> str:
    """Creates a pod that asks the partition family without a profile, which the admission
    webhook refuses: the creation must fail and leave no pod. Returns kubectl's stderr."""
    pod = partition_pod(name)
    pod["spec"]["containers"][0]["resources"] = {"limits": {FAMILY: "1"}}
    done = kube.apply(pod, check=False)
    assert done.returncode != 0, done.stdout
    assert kube.pod(name) is None
    return done.stderr


def slice_pod(name: str, memory_mib: int, command: list[str] | None = None) -> dict[str, Any]:
    """A pod of one container asking one logical slice of ``memory_mib`` MiB, scheduled by the
    extender's scheduler: no node advertises the slice's size resource, which that scheduler
    leaves to the extender (the default one would find the pod fits nowhere)."""
    limits = {SLICED: "1", SLICE_MEMORY_MIB: str(memory_mib)}
    pod = partition_pod(name, command=command, limits=limits)
    pod["spec"]["schedulerName"] = SCHEDULER_NAME
    return pod


def phase(kube: Kube, name: str) -> str | None:
    pod = kube.pod(name)
    return None if pod is None else pod.get("status", {}).get("phase")


def granted_uuid(kube: Kube, name: str) -> str | None:
    """The partition uuid the plugin annotated the pod with (any of its annotations)."""
    pod = kube.pod(name)
    if pod is None:
        return None
    for key, value in pod["metadata"].get("annotations", {}).items():
        if key.startswith("hygon.com/dcu.partition"):
            text = str(value)
            for token in text.replace('"', " ").replace(",", " ").replace(":", " ").split():
                if len(token) == 36 and token.count("-") == 4:
                    return token
    return None


# --- the extender's deployment (test_60, test_62) -------------------------------------------


def deploy_extender(
    playbooks: Playbooks, kube: Kube, policy: str = "binpack", **role_vars: Any
) -> None:
    """The device_plugin role with the extender and its second scheduler; ``role_vars`` are
    further role variables (the role's defaults otherwise)."""
    playbooks.run(
        "hygon.dcu.deploy_device_plugin",
        "-e",
        f"hygon_dcu_api_host={kube.node}",
        "-e",
        json.dumps(
            {
                "hygon_dcu_device_plugin_extender_enabled": True,
                "hygon_dcu_device_plugin_extender_policy": policy,
                "hygon_dcu_device_plugin_scheduler_image": required_env(
                    "HYGON_DCU_CLUSTER_SCHEDULER_IMAGE"
                ),
                **role_vars,
            }
        ),
    )


def ready_deployments(kube: Kube) -> set[str]:
    """The names of the runtime namespace's Deployments that are fully rolled out."""
    items = kube.json("get", "deployments", "-n", NAMESPACE)["items"]
    return {
        d["metadata"]["name"]
        for d in items
        if (status := d.get("status", {})).get("observedGeneration", 0)
        >= d["metadata"]["generation"]
        and status.get("readyReplicas", 0)
        == status.get("updatedReplicas", 0)
        == status.get("replicas", 0)
        == d["spec"].get("replicas", 1)
    }


def extender_ready(kube: Kube) -> bool:
    """The second scheduler's pod (kube-scheduler and the extender side by side) rolled out."""
    return SCHEDULER_NAME in ready_deployments(kube)


def lease(kube: Kube, node: str) -> dict[str, Any] | None:
    done = kube.run("get", "lease", "-n", NAMESPACE, node, "-o", "json", check=False)
    return json.loads(done.stdout) if done.returncode == 0 else None


def published(kube: Kube, node: str) -> geometry.Geometry | None:
    """The geometry the node's plugin publishes in its Lease."""
    obj = lease(kube, node)
    if obj is None:
        return None
    text = obj["metadata"].get("annotations", {}).get(GEOMETRY_ANNOTATION)
    return geometry.decode(text) if text else None


def reserved(pod: dict[str, Any]) -> reservation.Reservation | None:
    """The reservation the extender's bind wrote on the pod, if any."""
    text = pod["metadata"].get("annotations", {}).get(RESERVATION_ANNOTATION)
    return reservation.decode(text) if text else None


def labelled_pods(kube: Kube, label: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = kube.json("get", "pods", "-n", WORKLOAD_NAMESPACE, "-l", label)[
        "items"
    ]
    return items


def delete_labelled_pods(kube: Kube, label: str) -> None:
    """Force-delete the workload pods carrying ``label`` and wait until they are gone."""
    kube.run(
        "delete",
        "pods",
        "-n",
        WORKLOAD_NAMESPACE,
        "-l",
        label,
        "--force",
        "--grace-period=0",
        timeout=180,
    )
    wait_for(f"the pods labelled {label} gone", lambda: not labelled_pods(kube, label), 120)
