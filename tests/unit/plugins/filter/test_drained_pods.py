"""drained_pods: the pods a full drain evicts and waits for."""

from __future__ import annotations

from typing import Any

from ansible_collections.hygon.dcu.plugins.filter.drained_pods import FilterModule, drained_pods


def pod(
    namespace: str, name: str, *, owner: str | None = None, mirror: bool = False
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"namespace": namespace, "name": name}
    if owner:
        metadata["ownerReferences"] = [{"kind": owner, "name": "x"}]
    if mirror:
        metadata["annotations"] = {"kubernetes.io/config.mirror": "3f2a"}
    return {"metadata": metadata}


def test_every_pod_but_daemonset_and_mirror_pods_is_waited_for() -> None:
    pods = [
        pod("ml", "trainer", owner="ReplicaSet"),
        pod("kube-system", "kube-proxy-x", owner="DaemonSet"),
        pod("kube-system", "etcd-node", mirror=True),
        pod("default", "bare"),
    ]

    assert drained_pods(pods) == ["ml/trainer", "default/bare"]


def test_a_drained_node_leaves_nothing_to_wait_for() -> None:
    assert drained_pods([]) == []
    assert drained_pods([pod("kube-system", "agent", owner="DaemonSet")]) == []


def test_other_annotations_and_empty_owner_lists_do_not_keep_a_pod() -> None:
    kept = {
        "metadata": {
            "namespace": "ml",
            "name": "job-1",
            "ownerReferences": None,
            "annotations": {"example.com/note": "x"},
        }
    }
    assert drained_pods([kept]) == ["ml/job-1"]


def test_the_plugin_exposes_the_filter_by_its_name() -> None:
    assert FilterModule().filters() == {"drained_pods": drained_pods}
