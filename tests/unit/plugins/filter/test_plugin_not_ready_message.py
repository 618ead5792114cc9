"""plugin_not_ready_message: why the device-plugin pod on a node is not Ready."""

from __future__ import annotations

from typing import Any

from ansible_collections.hygon.dcu.plugins.filter.plugin_not_ready_message import (
    FilterModule,
    plugin_not_ready_message,
)

LABEL = "hygon.com/dcu.present"
HEAD = (
    "No Ready device-plugin pod on node 'gpu-7' after 3 s\n"
    "(namespace hygon-dcu-system, selector app.kubernetes.io/name=hygon-dcu-device-plugin)."
)


def message(pods: dict[str, Any], daemonsets: dict[str, Any], node: dict[str, Any]) -> str:
    return plugin_not_ready_message(
        pods,
        daemonsets=daemonsets,
        node=node,
        node_name="gpu-7",
        timeout=3,
        namespace="hygon-dcu-system",
        selector="app.kubernetes.io/name=hygon-dcu-device-plugin",
        present_label=LABEL,
    )


def labelled(value: str = "true") -> dict[str, Any]:
    return {"resources": [{"metadata": {"name": "gpu-7", "labels": {LABEL: value}}}]}


def daemonset(ready: int, desired: int) -> dict[str, Any]:
    return {
        "metadata": {"name": "hygon-dcu-device-plugin"},
        "spec": {"template": {"spec": {"nodeSelector": {LABEL: "true"}}}},
        "status": {"numberReady": ready, "desiredNumberScheduled": desired},
    }


CRASHING = {
    "metadata": {"name": "plugin-x"},
    "status": {
        "phase": "Running",
        "containerStatuses": [
            {"name": "sidecar", "ready": True, "state": {"running": {}}},
            {
                "name": "plugin",
                "ready": False,
                "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off"}},
            },
        ],
    },
}


def test_a_pod_that_is_not_ready_is_described_with_its_containers_and_what_to_read() -> None:
    got = message({"resources": [CRASHING]}, {"resources": [daemonset(0, 1)]}, labelled())

    assert got == (
        f"{HEAD}\n"
        "Pod plugin-x: phase Running, container plugin waiting (CrashLoopBackOff).\n"
        "DaemonSet hygon-dcu-device-plugin: 0 of\n"
        '1 pod(s) Ready, nodeSelector\n{"hygon.com/dcu.present": "true"}.\n'
        "Read the pod's events and logs (kubectl -n hygon-dcu-system describe pod; kubectl logs)."
    )


def test_no_pod_and_no_daemonset_say_how_to_deploy() -> None:
    got = message({"resources": []}, {"resources": []}, labelled())

    assert got == (
        f"{HEAD}\n"
        "No pod with that selector is on the node.\n"
        "Namespace hygon-dcu-system has no DaemonSet: deploy the device plugin"
        " (hygon.dcu.deploy_device_plugin)\n"
        "with the same hygon_dcu_namespace, or set hygon_dcu_namespace to where it runs.\n"
        "If the DaemonSet schedules no pod here, compare its nodeSelector and tolerations with"
        " the node's labels and taints."
    )


def test_a_node_without_the_present_label_is_sent_to_label_nodes() -> None:
    got = message({"resources": []}, {"resources": [daemonset(2, 2)]}, labelled("false"))

    assert got.endswith(
        "Node 'gpu-7' lacks hygon.com/dcu.present=true, which the DaemonSet's nodeSelector\n"
        "requires: run hygon.dcu.label_nodes for it."
    )
    # An unreadable Node tells no label either.
    assert "lacks" in message({"resources": []}, {"resources": []}, {"failed": True})


def test_listings_that_failed_are_reported_as_such() -> None:
    got = message(
        {"failed": True, "msg": "pods is forbidden"},
        {"failed": True, "msg": "daemonsets.apps is forbidden"},
        labelled(),
    )

    assert "\nListing the pods failed: pods is forbidden.\n" in got
    assert "\nListing the DaemonSets failed: daemonsets.apps is forbidden.\n" in got
    assert "Listing the DaemonSets failed: no message." in message(
        {"resources": []}, {"failed": True}, labelled()
    )


def test_a_pod_without_status_is_in_no_known_phase() -> None:
    bare = {"metadata": {"name": "plugin-y"}}
    starting = {
        "metadata": {"name": "plugin-z"},
        "status": {"phase": "Pending", "containerStatuses": [{"name": "plugin"}]},
    }

    got = message({"resources": [bare, starting]}, {"resources": []}, labelled())

    assert "\nPod plugin-y: phase unknown.\n" in got
    assert "\nPod plugin-z: phase Pending, container plugin in no state.\n" in got


def test_the_plugin_exposes_the_filter_by_its_name() -> None:
    assert FilterModule().filters() == {"plugin_not_ready_message": plugin_not_ready_message}
