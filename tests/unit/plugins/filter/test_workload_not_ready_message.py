"""workload_not_ready_message: why a DaemonSet or Deployment of the device plugin is not ready."""

from __future__ import annotations

from typing import Any

from ansible_collections.hygon.dcu.plugins.filter.workload_not_ready_message import (
    FilterModule,
    workload_not_ready_message,
)

NAMESPACE = "hygon-dcu-system"


def workload(kind: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "selector": {"matchLabels": {"app.kubernetes.io/name": name}},
            "template": {"spec": {"nodeSelector": {"hygon.com/dcu.present": "true"}}},
        },
    }


def message(kind: str, name: str, **seen: Any) -> str:
    arguments: dict[str, Any] = {"status": {}, "pods": [], "warnings": [], **seen}
    return workload_not_ready_message(
        workload(kind, name),
        wait={"msg": "timed out waiting"},
        timeout=300,
        selector=[f"app.kubernetes.io/name={name}"],
        park_label="hygon.com/dcu.device-plugin",
        park_value="parked",
        **arguments,
    )


CREATING = {
    "metadata": {"name": "hygon-dcu-admission-7d9f-abcde"},
    "spec": {"nodeName": "gpu-node-7"},
    "status": {
        "phase": "Pending",
        "conditions": [
            {"type": "PodScheduled", "status": "True"},
            {"type": "Ready", "status": "False", "reason": "ContainersNotReady", "message": "m"},
        ],
        "containerStatuses": [
            {
                "name": "webhook",
                "ready": False,
                "state": {"waiting": {"reason": "ContainerCreating"}},
            }
        ],
    },
}
FAILED_MOUNT = {
    "involvedObject": {"kind": "Pod", "name": "hygon-dcu-admission-7d9f-abcde"},
    "type": "Warning",
    "reason": "FailedMount",
    "message": 'secret "hygon-dcu-admission-tls" not found',
}


def test_a_deployment_with_a_stuck_pod_names_the_pod_its_state_and_its_warnings() -> None:
    got = message(
        "Deployment",
        "hygon-dcu-admission",
        status={"replicas": 1, "unavailableReplicas": 1, "conditions": [{"type": "Available"}]},
        pods=[CREATING],
        warnings=[FAILED_MOUNT],
    )

    assert got == (
        f"Deployment {NAMESPACE}/hygon-dcu-admission is not ready\n"
        "after 300 s: timed out waiting\n"
        f"Namespace {NAMESPACE}, pod selector app.kubernetes.io/name=hygon-dcu-admission.\n"
        "Status: replicas=1, unavailableReplicas=1.\n"
        "Pod hygon-dcu-admission-7d9f-abcde on node gpu-node-7:\n"
        "phase Pending; container webhook not ready(waiting: ContainerCreating ); Ready False:"
        " ContainersNotReady m.\n"
        "Event on hygon-dcu-admission-7d9f-abcde: FailedMount:"
        ' secret "hygon-dcu-admission-tls" not found\n'
    )


def test_a_daemonset_without_pods_names_the_nodes_it_selects() -> None:
    got = message("DaemonSet", "hygon-dcu-device-plugin")

    assert got == (
        f"DaemonSet {NAMESPACE}/hygon-dcu-device-plugin is not ready\n"
        "after 300 s: timed out waiting\n"
        f"Namespace {NAMESPACE}, pod selector app.kubernetes.io/name=hygon-dcu-device-plugin.\n"
        "Status: none yet.\n"
        "Nodes: those labelled hygon.com/dcu.present=true and not"
        " hygon.com/dcu.device-plugin=parked.\n"
        "No pod matches the selector (no Hygon node, or every one is parked).\n"
    )


def test_a_pod_not_yet_scheduled_and_a_workload_not_found() -> None:
    pending = {"metadata": {"name": "p"}, "spec": {}, "status": {}}

    got = workload_not_ready_message(
        workload("Deployment", "w"),
        wait={},
        timeout=5,
        selector=["a=b", "c=d"],
        status={},
        pods=[pending],
        warnings=[],
        park_label="l",
        park_value="v",
    )

    assert "after 5 s: not found\n" in got
    assert "pod selector a=b,c=d.\n" in got
    assert "Pod p on node (none: not scheduled):\nphase unknown.\n" in got
    assert "Nodes:" not in got


def test_only_the_last_ten_warnings_are_shown() -> None:
    warnings = [{"involvedObject": {"name": "p"}, "reason": f"R{n}"} for n in range(12)]

    got = message("Deployment", "w", warnings=warnings)

    assert "Event on p: R1:" not in got
    assert got.endswith(
        "Event on p: R2: \n" + "".join(f"Event on p: R{n}: \n" for n in range(3, 12))
    )


def test_the_plugin_exposes_the_filter_by_its_name() -> None:
    assert FilterModule().filters() == {"workload_not_ready_message": workload_not_ready_message}
