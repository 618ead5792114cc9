"""deploy_device_plugin on the real cluster: the DaemonSet serves the simulated node.

Leaves: the runtime deployed, the node in whole-card mode (the simulator starts with the mode
off), the plugin Ready.
"""

from __future__ import annotations

import json

from e2e_support import (
    NAMESPACE,
    Kube,
    Playbooks,
    SimNode,
    idle_pod,
    patch_as,
    wait_for,
)
from hygon_dcu_plugin.vocabulary import WHOLE_CARD, annotation_key
from privileges import assert_privileges_as_documented


def test_node_labelled_for_the_daemonset(kube: Kube, playbooks: Playbooks) -> None:
    # As an operator does it: label_nodes reads the host, then labels its Node.
    playbooks.run("hygon.dcu.label_nodes", "-e", f"target={kube.node}")
    labels = kube.node_object()["metadata"]["labels"]
    assert labels.get("hygon.com/dcu.present") == "true"


def test_deploy_twice_second_run_changes_nothing(
    kube: Kube, playbooks: Playbooks, cluster_sim: SimNode
) -> None:
    first = playbooks.run("hygon.dcu.deploy_device_plugin", "-e", f"hygon_dcu_api_host={kube.node}")
    assert first.changed_total > 0, first.output[-3000:]
    second = playbooks.run(
        "hygon.dcu.deploy_device_plugin", "-e", f"hygon_dcu_api_host={kube.node}"
    )
    assert second.changed_total == 0, second.output[-6000:]


def test_the_node_carries_its_capability_labels_after_deploy(
    kube: Kube, cluster_sim: SimNode
) -> None:
    labels = kube.node_object()["metadata"]["labels"]
    cards = len(cluster_sim.status().cards)
    assert labels["hygon.com/dcu.count"] == str(cards)
    assert labels["hygon.com/dcu.mig.capable"] == "true"
    assert labels["hygon.com/dcu.mig.mode"] == "off"
    # The simulated C-3000's 4 slices a card: four 2g.15gb, two 4g.31gb, one 8g.63gb.
    assert labels["hygon.com/dcu.mig-2g.15gb.count"] == str(4 * cards)
    assert labels["hygon.com/dcu.mig-8g.63gb.count"] == str(cards)


def test_plugin_and_webhook_ready(kube: Kube) -> None:
    wait_for("a Ready device-plugin pod", kube.ready_plugin_pod, 180)
    deployments = kube.json("get", "deployments", "-n", NAMESPACE)["items"]
    assert deployments, "no webhook Deployment"
    for deployment in deployments:
        name = deployment["metadata"]["name"]
        wait_for(
            f"Deployment {name} available",
            lambda name=name: (
                kube.json("get", "deployment", "-n", NAMESPACE, name)
                .get("status", {})
                .get("availableReplicas", 0)
                >= 1
            ),
            180,
        )


def test_each_account_may_do_what_the_docs_say(kube: Kube) -> None:
    # The default deployment: the webhook on, the extender off (its accounts hold nothing).
    assert_privileges_as_documented(kube, webhook_enabled=True)


def test_the_plugins_account_may_patch_a_pods_grant_annotations_and_nothing_else(
    kube: Kube, workload_namespace: str
) -> None:
    # RBAC lets the account patch every pod; the webhook's second entry narrows it to grants.
    name = "write-guard-plugin"
    kube.apply(idle_pod(name))
    try:
        for patch in (
            {"metadata": {"labels": {"app": "payments"}}},
            {"metadata": {"annotations": {"team": "x"}}},
            {"metadata": {"ownerReferences": None, "finalizers": ["example.com/hold"]}},
            {"spec": {"activeDeadlineSeconds": 1}},
        ):
            refused = patch_as(kube, "hygon-dcu-device-plugin", name, patch)
            assert refused.returncode != 0, patch
            assert "may change only its own keys" in refused.stderr, refused.stderr
        grant = json.dumps({"card": "0000:3b:00.0", "container": "idle", "profile": "2g.15gb"})
        key = annotation_key("idle")
        written = patch_as(
            kube, "hygon-dcu-device-plugin", name, {"metadata": {"annotations": {key: grant}}}
        )
        assert written.returncode == 0, written.stderr
        # Any other user is left to RBAC: the admin's label goes through.
        kube.run("label", "pod", "-n", workload_namespace, name, "app=mine", "--overwrite")
        pod = kube.pod(name, workload_namespace)
        assert pod is not None
        assert pod["metadata"]["labels"] == {"app": "mine"}
        annotations = pod["metadata"]["annotations"]
        assert annotations[key] == grant
        assert "team" not in annotations
        assert "finalizers" not in pod["metadata"]
        assert "activeDeadlineSeconds" not in pod["spec"]
    finally:
        kube.delete_pod(name, workload_namespace, wait=False)


def test_whole_cards_advertised_with_the_mode_off(kube: Kube, cluster_sim: SimNode) -> None:
    assert not cluster_sim.mode_on()
    wait_for(
        f"{WHOLE_CARD} = 2 on the node",
        lambda: kube.allocatable().get(WHOLE_CARD) == "2",
        120,
    )
