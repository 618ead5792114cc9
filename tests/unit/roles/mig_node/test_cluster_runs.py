"""The mig_node role with its Kubernetes steps on, against the shared fake API server with
fake_cluster.FakeCluster plugged in (it plays the device-plugin DaemonSet, the kubelet and
PodDisruptionBudgets) and a simulated node whose /dev/kfd is really held by the plugin and
workload pods."""

from __future__ import annotations

import copy
import json
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import simnode

from .fake_cluster import (
    PARK_LABEL,
    PRESENT_LABEL,
    FakeCluster,
    cluster_vars,
    running,
    writes,
)
from .runner import run_playbook

EVICT_LABEL = "hygon.com/dcu.evict"
STATE_LABEL = "hygon.com/dcu.mig.config.state"
MODE_LABEL = "hygon.com/dcu.mig.mode"

# Several playbook runs each, every cluster step a kubernetes client start: tens of seconds.
pytestmark = pytest.mark.slow


@pytest.fixture
def cluster(sim_node: simnode.SimNode) -> Iterator[FakeCluster]:
    yield from running(FakeCluster(sim_node))


@pytest.mark.floor
def test_enable_evicts_only_dcu_pods_through_their_budget_and_restarts_the_plugin(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    cluster.add_pod("trainer", limits={"hygon.com/dcu.partitioned": "1", "cpu": "2"})
    cluster.add_pod("web", limits={"cpu": "1"})
    cluster.pdb_refusals["trainer"] = 2
    first_plugin = cluster.plugin_pod()
    assert first_plugin is not None
    node_before, pods_before = copy.deepcopy(cluster.node_object), copy.deepcopy(cluster.pods)

    # Check mode: the cluster sees only server-side dry runs, the node nothing at all.
    check = run_playbook("enable_mig", "--check", extra_vars=cluster_vars(cluster, tmp_path))
    assert check.returncode == 0, check.output
    assert check.changed
    assert cluster.node_object == node_before
    assert cluster.pods == pods_before
    assert cluster.eviction_attempts == {}
    assert cluster.node.status().mode == 0

    run = run_playbook("enable_mig", extra_vars=cluster_vars(cluster, tmp_path))

    assert run.returncode == 0, run.output
    assert cluster.node.status().mode == 1
    # The budget refused twice, the third eviction went through; the CPU pod was left alone.
    assert cluster.eviction_attempts == {"trainer": 3}
    assert ("ml", "trainer") not in cluster.pods
    assert EVICT_LABEL not in cluster.pods[("ml", "web")]["metadata"]["labels"]
    # A fresh plugin pod serves the new mode; the node is unparked and schedulable again.
    plugin = cluster.plugin_pod()
    assert plugin is not None
    assert plugin["metadata"]["name"] != first_plugin["metadata"]["name"]
    assert cluster.served_mode() == "enabled"
    assert PARK_LABEL not in cluster.node_object["metadata"]["labels"]
    assert cluster.node_object["spec"].get("unschedulable") is False


SLICE_LIMITS = {"hygon.com/dcu.sliced": "1", "hygon.com/dcu.sliced.memory-mib": "8192"}


def test_enable_refuses_while_pods_hold_slices_naming_them_before_any_change(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    cluster.add_pod("notebook", limits=SLICE_LIMITS)
    cluster.add_pod("trainer", limits={"hygon.com/dcu": "1"})
    for extra in (("--check",), ()):
        run = run_playbook("enable_mig", *extra, extra_vars=cluster_vars(cluster, tmp_path))
        assert run.returncode != 0, run.output
        message = run.failure_messages()[-1]
        assert "1 pod(s) hold logical slices (ml/notebook)" in message, message
        assert "hygon_dcu_drain_slices=true" in message
        assert writes(cluster) == []
        assert cluster.node.status().mode == 0
        assert ("ml", "notebook") in cluster.pods


def test_enable_with_drain_slices_evicts_the_slice_pods_and_switches(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    cluster.add_pod("notebook", limits=SLICE_LIMITS)
    # The notebook's slice, left behind as a plugin that is parked leaves it: the switch
    # destroys it before the mode goes on (the library refuses the mode while a vdev lives).
    assert cluster.node.create_vdevs(0, "20", "16384").returncode == 0
    settings = cluster_vars(cluster, tmp_path, hygon_dcu_drain_slices=True)
    node_before, pods_before = copy.deepcopy(cluster.node_object), copy.deepcopy(cluster.pods)

    check = run_playbook("enable_mig", "--check", extra_vars=settings)
    assert check.returncode == 0, check.output
    assert check.changed
    assert cluster.node_object == node_before and cluster.pods == pods_before
    assert cluster.eviction_attempts == {}
    assert cluster.node.status().mode == 0 and len(cluster.node.status().vdevs) == 1

    run = run_playbook("enable_mig", extra_vars=settings)
    assert run.returncode == 0, run.output
    assert ("ml", "notebook") not in cluster.pods
    status = cluster.node.status()
    assert status.mode == 1 and status.vdevs == []
    for args in ((), ("--check",)):
        again = run_playbook("enable_mig", *args, extra_vars=settings)
        assert again.returncode == 0 and again.changed == 0, again.output

    # Back: whole cards and slices are advertised again, which disable_mig waits for.
    back = run_playbook("disable_mig", extra_vars=cluster_vars(cluster, tmp_path))
    assert back.returncode == 0, back.output
    assert cluster.served_mode() == "disabled"
    allocatable = cluster.node_object["status"]["allocatable"]
    assert allocatable["hygon.com/dcu"] == "2" and allocatable["hygon.com/dcu.sliced"] == "8"


def test_a_node_already_in_the_mode_is_not_even_cordoned(
    sim_node: simnode.SimNode, tmp_path: Path
) -> None:
    subprocess.run(
        [str(simnode.HY_SMI_PATH), "-mig", "1"], env=sim_node.env(), check=True, capture_output=True
    )
    for cluster in running(FakeCluster(sim_node)):
        run = run_playbook("enable_mig", extra_vars=cluster_vars(cluster, tmp_path))

        assert run.returncode == 0, run.output
        # Nothing is cordoned, evicted or parked: only the Node's labels are made true, once.
        assert [path for _method, path in writes(cluster)] == [f"/api/v1/nodes/{cluster.node_name}"]
        assert run.changed == 1
        assert cluster.node_object["metadata"]["labels"][STATE_LABEL] == "success"
        again = run_playbook("enable_mig", extra_vars=cluster_vars(cluster, tmp_path))
        assert again.returncode == 0 and again.changed == 0, again.output
        assert len(writes(cluster)) == 1


def test_a_holder_that_never_leaves_unparks_the_plugin_and_uncordons(
    cluster: FakeCluster, tmp_path: Path, kfd_holder: Callable[[Path], Any]
) -> None:
    kfd_holder(cluster.node.kfd)

    run = run_playbook(
        "enable_mig", extra_vars=cluster_vars(cluster, tmp_path, hygon_dcu_holders_timeout=2)
    )

    assert run.returncode != 0
    message = run.failure_messages()[-1]
    assert "stage 'wait for /dev/kfd holders' failed" in message
    assert "NODE STATE: partition mode disabled" in message
    assert "device plugin unparked" in message
    assert "node uncordoned" in message
    assert cluster.node.status().mode == 0
    assert PARK_LABEL not in cluster.node_object["metadata"]["labels"]
    assert cluster.node_object["spec"].get("unschedulable") is False
    assert cluster.plugin_pod() is not None


def test_a_budget_that_never_allows_the_eviction_fails_clearly_before_any_switch(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    cluster.add_pod("trainer", limits={"hygon.com/dcu": "1"})
    cluster.pdb_refusals["trainer"] = None

    run = run_playbook(
        "enable_mig", extra_vars=cluster_vars(cluster, tmp_path, hygon_dcu_eviction_timeout=3)
    )

    assert run.returncode != 0
    message = run.failure_messages()[-1]
    assert "stage 'evict' failed" in message
    # kubernetes.core 6 names the budget, 5 says "Too Many Requests"; the stage hint says both.
    assert "retried while a PodDisruptionBudget refuses them (HTTP 429)" in message
    assert "device plugin not parked by this run" in message
    assert "node uncordoned" in message
    assert cluster.eviction_attempts["trainer"] >= 2
    assert ("ml", "trainer") in cluster.pods
    assert cluster.node.status().mode == 0
    assert cluster.node_object["spec"].get("unschedulable") is False


@pytest.mark.floor
def test_recover_restarts_a_plugin_serving_the_old_mode_and_deletes_lost_grants_on_request(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    # The plugin pod started while the mode was off; then the driver's persisted mode came up
    # on (a boot that applied a switch). The running plugin holds /dev/kfd, so hy-smi cannot be
    # used here: set the simulated driver's mode file directly.
    with cluster.node.locked():
        (cluster.node.sim_dir / "mode").write_text("1\n")
    grant = {
        "card": "0000:09:00.0",
        "profile": "2g.15gb",
        "placement": "0:1",
        "uuid": "9e1c44b0-1d2b-4c4e-8f1a-2b3c4d5e6f70",
    }
    cluster.add_pod(
        "trainer",
        limits={"hygon.com/dcu.partitioned": "1"},
        annotations={"hygon.com/dcu.partition.main": json.dumps(grant)},
    )
    cluster.add_pod("web", limits={"cpu": "1"})
    assert cluster.served_mode() == "disabled"

    run = run_playbook(
        "reboot_recovery",
        extra_vars=cluster_vars(
            cluster,
            tmp_path,
            hygon_dcu_mig_state="enabled",
            hygon_dcu_recover_delete_stale_pods=True,
        ),
    )

    assert run.returncode == 0, run.output
    assert cluster.plugin_starts == 2
    assert cluster.served_mode() == "enabled"
    assert ("ml", "trainer") not in cluster.pods
    assert ("ml", "web") in cluster.pods
    assert "1 pod(s) hold a partition grant that no longer exists: ml/trainer" in run.output


def test_a_node_name_the_cluster_does_not_know_is_refused_before_anything_happens(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    run = run_playbook(
        "enable_mig", extra_vars=cluster_vars(cluster, tmp_path, hygon_dcu_node_name="gpu-node-404")
    )

    assert run.returncode != 0
    message = run.failure_messages()[-1]
    assert "the cluster has no Node named 'gpu-node-404'" in message
    assert "node not cordoned by this run" in message
    assert writes(cluster) == []
    assert cluster.node.status().mode == 0


@pytest.mark.floor
def test_disable_with_a_full_drain_evicts_everything_but_daemonsets_and_destroys_instances(
    sim_node: simnode.SimNode, tmp_path: Path
) -> None:
    for args in (["-mig", "1"], ["mig", "-cgi", "2g.15gb", "-C", "-i", "0"]):
        subprocess.run(
            [str(simnode.HY_SMI_PATH), *args], env=sim_node.env(), check=True, capture_output=True
        )
    for cluster in running(FakeCluster(sim_node)):
        cluster.add_pod("trainer", limits={"hygon.com/dcu.partitioned": "1"})
        cluster.add_pod("web", limits={"cpu": "1"})
        cluster.stopping_lists["web"] = 3  # takes a while to stop: the wait says so each poll
        assert cluster.served_mode() == "enabled"

        run = run_playbook(
            "disable_mig", extra_vars=cluster_vars(cluster, tmp_path, hygon_dcu_full_drain=True)
        )

        assert run.returncode == 0, run.output
        assert "RETRYING: [localhost]: Wait until the drained pods are gone" in run.output
        assert [key for key in cluster.pods if key[0] == "ml"] == []
        assert cluster.plugin_starts == 2
        assert cluster.served_mode() == "disabled"
        assert cluster.node_object["status"]["allocatable"]["hygon.com/dcu"] == "2"
        assert cluster.node_object["spec"].get("unschedulable") is False
        status = sim_node.status()
        assert status.mode == 0
        assert status.gpu_instances == [] and status.compute_instances == []


@pytest.mark.floor
def test_label_nodes_sets_the_present_label_once_and_check_mode_predicts_it(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    cluster.api.change("Node", cluster.node_name, metadata={"labels": {PRESENT_LABEL: None}})
    settings = cluster_vars(cluster, tmp_path)

    check = run_playbook("label_nodes", "--check", extra_vars=settings)
    assert check.returncode == 0, check.output
    assert check.changed == 2
    assert PRESENT_LABEL not in cluster.node_object["metadata"]["labels"]

    first = run_playbook("label_nodes", extra_vars=settings)
    assert first.returncode == 0, first.output
    assert first.changed == 2  # the present label, then the capability labels
    labels = cluster.node_object["metadata"]["labels"]
    assert labels[PRESENT_LABEL] == "true"
    assert labels[MODE_LABEL] == "off" and labels["hygon.com/dcu.mig.capable"] == "true"

    for args in ([], ["--check"]):
        again = run_playbook("label_nodes", *args, extra_vars=settings)
        assert again.returncode == 0, again.output
        assert again.changed == 0


def test_label_nodes_refuses_a_host_whose_library_counts_no_card(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    cluster.api.change("Node", cluster.node_name, metadata={"labels": {PRESENT_LABEL: None}})
    missing = str(cluster.node.root / "opt" / "nowhere" / "libhydmi_mig.so.1")

    run = run_playbook(
        "label_nodes", extra_vars=cluster_vars(cluster, tmp_path, hygon_dcu_library_path=missing)
    )

    assert run.returncode != 0, run.output
    assert "the management library counts no Hygon DCU" in " ".join(
        run.failure_messages()[-1].split()
    )
    assert PRESENT_LABEL not in cluster.node_object["metadata"]["labels"]
    assert writes(cluster) == []


def plugin_failure(run: Any) -> str:
    assert run.returncode != 0, run.output
    message = " ".join(run.failure_messages()[-1].split())
    assert "stage 'unpark device plugin' failed" in message
    assert f"No Ready device-plugin pod on node '{NODE}' after 3 s" in message
    assert (
        "(namespace hygon-dcu-system, selector app.kubernetes.io/name=hygon-dcu-device-plugin)"
        in (message)
    )
    return message


NODE = "gpu-node-1"


def test_a_missing_daemonset_is_named_with_namespace_selector_and_node(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    cluster.plugin_deployed = False

    run = run_playbook(
        "enable_mig", extra_vars=cluster_vars(cluster, tmp_path, hygon_dcu_plugin_timeout=3)
    )

    message = plugin_failure(run)
    assert "No pod with that selector is on the node." in message
    assert "Namespace hygon-dcu-system has no DaemonSet" in message


def test_a_plugin_pod_that_never_becomes_ready_is_described(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    cluster.plugin_starts_ready = False

    run = run_playbook(
        "enable_mig", extra_vars=cluster_vars(cluster, tmp_path, hygon_dcu_plugin_timeout=3)
    )

    message = plugin_failure(run)
    assert "phase Pending, container plugin waiting (ImagePullBackOff)" in message
    assert "DaemonSet hygon-dcu-device-plugin: 0 of 1 pod(s) Ready" in message


def test_a_node_without_the_present_label_is_told_to_run_label_nodes(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    # Without the label the DaemonSet takes its pod off the node and brings none back.
    cluster.api.change("Node", cluster.node_name, metadata={"labels": {PRESENT_LABEL: None}})

    run = run_playbook(
        "enable_mig", extra_vars=cluster_vars(cluster, tmp_path, hygon_dcu_plugin_timeout=3)
    )

    message = plugin_failure(run)
    assert f"Node '{NODE}' lacks hygon.com/dcu.present=true" in message
    assert "run hygon.dcu.label_nodes" in message


def state_marks(cluster: FakeCluster) -> list[str]:
    """The mode-switch state each real (not dry-run) patch of the Node set, in order."""
    marks = []
    for request in cluster.api.writes():
        if request.method != "PATCH" or "dryRun" in request.query:
            continue
        if request.path != f"/api/v1/nodes/{cluster.node_name}":
            continue
        labels = ((request.body or {}).get("metadata") or {}).get("labels") or {}
        if STATE_LABEL in labels:
            marks.append(labels[STATE_LABEL])
    return marks


def test_the_node_labels_say_the_mode_and_how_each_switch_went(
    cluster: FakeCluster, tmp_path: Path, kfd_holder: Callable[[Path], Any]
) -> None:
    settings = cluster_vars(cluster, tmp_path)
    cards = len(cluster.node.status().cards)

    enable = run_playbook("enable_mig", extra_vars=settings)
    assert enable.returncode == 0, enable.output
    assert state_marks(cluster) == ["pending", "success"]
    labels = cluster.node_object["metadata"]["labels"]
    assert labels[STATE_LABEL] == "success" and labels[MODE_LABEL] == "on"
    assert labels["hygon.com/dcu.count"] == str(cards)
    assert labels["hygon.com/dcu.mig.capable"] == "true"
    # The simulated C-3000 card holds four 1-slice 2g.15gb partitions.
    assert labels["hygon.com/dcu.mig-2g.15gb.count"] == str(4 * cards)

    disable = run_playbook("disable_mig", extra_vars=settings)
    assert disable.returncode == 0, disable.output
    assert state_marks(cluster) == ["pending", "success"] * 2
    assert cluster.node_object["metadata"]["labels"][MODE_LABEL] == "off"

    # A switch that fails half-way (a /dev/kfd holder that never leaves) is marked failed.
    kfd_holder(cluster.node.kfd)
    failing = cluster_vars(cluster, tmp_path, hygon_dcu_holders_timeout=2)
    failed = run_playbook("enable_mig", extra_vars=failing)
    assert failed.returncode != 0
    assert state_marks(cluster)[-2:] == ["pending", "failed"]
    labels = cluster.node_object["metadata"]["labels"]
    assert labels[STATE_LABEL] == "failed" and labels[MODE_LABEL] == "off"
