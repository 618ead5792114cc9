"""A simulated power loss under a `restartPolicy: Always` workload, then reboot_recovery.

The kubelet restarts the container with its checkpointed Allocate answer; the partition is gone
(instances do not survive a reboot) and containerd creates the missing conf file as a
directory. The plugin must say so on the pod; reboot_recovery (or the plugin's opt-in setting)
deletes the pod so its Deployment makes one that gets a new partition.
Leaves: partition mode on, no workload, no instance.
"""

from __future__ import annotations

import subprocess
import time
from typing import Any

from e2e_support import (
    CLUSTER_SH,
    WORKLOAD_NAMESPACE,
    Kube,
    Playbooks,
    SimNode,
    granted_uuid,
    partition_pod,
    wait_for,
)
from privileges import assert_privileges_as_documented

DEPLOYMENT = "survivor"


def cluster(*args: str) -> None:
    subprocess.run([str(CLUSTER_SH), *args], check=True, timeout=300)


def survivor_deployment() -> dict[str, Any]:
    template = partition_pod(
        "unused", command=["sh", "-c", "dcu-probe && exec sleep 3600"], restart_policy="Always"
    )
    template["metadata"] = {"labels": {"app": DEPLOYMENT}}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": DEPLOYMENT, "namespace": WORKLOAD_NAMESPACE},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": DEPLOYMENT}},
            "template": {"metadata": template["metadata"], "spec": template["spec"]},
        },
    }


def survivor_pods(kube: Kube) -> list[dict[str, Any]]:
    pods: list[dict[str, Any]] = kube.json(
        "get", "pods", "-n", WORKLOAD_NAMESPACE, "-l", f"app={DEPLOYMENT}"
    )["items"]
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def running_with_partition(kube: Kube, cluster_sim: SimNode) -> tuple[str, str] | None:
    """(pod name, uuid) of a survivor pod whose probe saw its live partition."""
    for pod in survivor_pods(kube):
        name = pod["metadata"]["name"]
        uuid = granted_uuid(kube, name)
        statuses = pod.get("status", {}).get("containerStatuses", [])
        if not uuid or not statuses or not statuses[0].get("state", {}).get("running"):
            continue
        if uuid in cluster_sim.live_uuids() and f"mig_uuid={uuid}" in kube.logs(name):
            return name, uuid
    return None


def power_loss(cluster_sim: SimNode) -> None:
    cluster("kill-kubelet")
    cluster("kill-containers")
    cluster_sim.reboot()
    cluster("start-kubelet")


def lost_partition_event(kube: Kube, name: str) -> dict[str, Any] | None:
    for event in kube.events_for(name):
        if (
            event.get("type") == "Warning"
            and "partition" in event.get("message", "").lower()
            and event.get("source", {})
            .get("component", event.get("reportingComponent", ""))
            .startswith("hygon")
        ):
            found: dict[str, Any] = event
            return found
    return None


def test_power_loss_warned_then_reboot_recovery_replaces_the_pod(
    kube: Kube, cluster_sim: SimNode, playbooks: Playbooks
) -> None:
    kube.apply(survivor_deployment())
    name, uuid = wait_for(
        "the survivor running with its partition",
        lambda: running_with_partition(kube, cluster_sim),
        240,
    )
    power_loss(cluster_sim)
    assert uuid not in cluster_sim.live_uuids()
    wait_for("a Ready plugin pod after the power loss", kube.ready_plugin_pod, 240)
    started = time.monotonic()
    event = wait_for(
        f"a Warning Event from the plugin on {name}", lambda: lost_partition_event(kube, name), 60
    )
    print(
        f"\nlost-partition Event {time.monotonic() - started:.1f} s after the plugin was Ready: "
        f"{event['reason']}: {event['message']}"
    )

    recovery = playbooks.run(
        "hygon.dcu.reboot_recovery",
        "-e",
        f"target={kube.node}",
        "-e",
        "hygon_dcu_recover_delete_stale_pods=true",
    )
    assert name in recovery.output, recovery.output[-4000:]
    replacement = wait_for(
        "the Deployment's replacement running with a partition",
        lambda: running_with_partition(kube, cluster_sim),
        240,
    )
    assert replacement[0] != name
    assert replacement[1] != uuid


def test_power_loss_with_self_healing_on(
    kube: Kube, cluster_sim: SimNode, playbooks: Playbooks
) -> None:
    playbooks.run(
        "hygon.dcu.deploy_device_plugin",
        "-e",
        f"hygon_dcu_api_host={kube.node}",
        "-e",
        "hygon_dcu_device_plugin_delete_pods_with_lost_partitions=true",
        # and the webhook off, which nothing here needs: its account goes with it
        "-e",
        "hygon_dcu_device_plugin_webhook_enabled=false",
        # and the node's labels kept by the plugin
        "-e",
        "hygon_dcu_device_plugin_node_labels=true",
    )
    wait_for("a Ready plugin pod with self-healing on", kube.ready_plugin_pod, 240)
    # the opt-ins, and only they, let the plugin delete pods and label nodes; the webhook's
    # account holds nothing
    assert_privileges_as_documented(
        kube, webhook_enabled=False, delete_pods_with_lost_partitions=True, node_labels=True
    )
    # A capability label removed by hand is put back by the plugin on its next pass.
    count = kube.node_object()["metadata"]["labels"]["hygon.com/dcu.count"]
    kube.run("label", "node", kube.node, "hygon.com/dcu.count-")
    wait_for(
        "the plugin to put hygon.com/dcu.count back",
        lambda: kube.node_object()["metadata"]["labels"].get("hygon.com/dcu.count") == count,
        120,
    )
    name, uuid = wait_for(
        "the survivor running with its partition",
        lambda: running_with_partition(kube, cluster_sim),
        240,
    )
    power_loss(cluster_sim)
    replacement = wait_for(
        "the plugin replaced the pod, and the new one has a partition",
        lambda: (r := running_with_partition(kube, cluster_sim)) and r[0] != name and r,
        300,
    )
    assert replacement[1] != uuid
    kube.run(
        "delete", "deployment", "-n", WORKLOAD_NAMESPACE, DEPLOYMENT, "--wait=true", timeout=180
    )
    wait_for("no instance left", lambda: not cluster_sim.live_uuids(), 120)
    playbooks.run("hygon.dcu.deploy_device_plugin", "-e", f"hygon_dcu_api_host={kube.node}")
