"""The product on a real single-node Kubernetes 1.20 cluster (tests/cluster/cluster.sh).

Run by the `cluster` stage through `tests/cluster/run_e2e.sh`, which brings the cluster up,
loads the image the image stage built and tears everything down afterwards. The tests share one
cluster and one simulated node and run in file order: deploy, the molecule scenario, workloads,
restarts, power loss. Each module says what state it leaves the node in.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator

import pytest
from e2e_support import (
    HOST_HYHAL,
    PLUGIN_IMAGE,
    SIM_ROOT,
    SIMULATOR,
    VENV_BIN,
    WORKLOAD_NAMESPACE,
    Kube,
    Playbooks,
    SimNode,
    required_env,
    wait_for,
)
from playbook_runner import ansible_env


@pytest.fixture(scope="session")
def kube() -> Kube:
    return Kube(
        kubectl=required_env("HYGON_DCU_CLUSTER_KUBECTL"),
        kubeconfig=required_env("KUBECONFIG"),
        node=required_env("HYGON_DCU_CLUSTER_NODE"),
    )


@pytest.fixture(scope="session")
def cluster_sim() -> Iterator[SimNode]:
    import simnode  # noqa: PLC0415  (tests/simulator is on pytest's path)

    subprocess.run(["make", "-s", "-C", str(SIMULATOR)], check=True)
    if SIM_ROOT.exists():
        shutil.rmtree(SIM_ROOT)
    SIM_ROOT.parent.mkdir(parents=True, exist_ok=True)
    simnode.init(str(SIM_ROOT), model="c3000-bw", cards=2)
    # The DaemonSet a site gets mounts the host's /opt/hyhal (type Directory) even when it serves
    # a simulated node; the plugin itself reads the simulator's copy under the node's root.
    made_hyhal = not HOST_HYHAL.exists()
    HOST_HYHAL.mkdir(parents=True, exist_ok=True)
    yield SimNode(SIM_ROOT, simnode)
    if made_hyhal:
        HOST_HYHAL.rmdir()


@pytest.fixture(scope="session")
def playbooks(
    kube: Kube, cluster_sim: SimNode, tmp_path_factory: pytest.TempPathFactory
) -> Playbooks:
    root = str(cluster_sim.root)
    host_vars = {
        "ansible_connection": "local",
        "ansible_python_interpreter": str(VENV_BIN / "python"),
        "hygon_dcu_node_name": kube.node,
        "hygon_dcu_kubeconfig": kube.kubeconfig,
        "hygon_dcu_host_root": root,
        "hygon_dcu_library_path": f"{root}/opt/hyhal/lib/libhydmi_mig.so.1",
        "hygon_dcu_hy_smi_path": f"{root}/opt/hyhal/bin/hy-smi",
        "hygon_dcu_environment": {"HYDMI_SIM_ROOT": root},
        "hygon_dcu_manage_kubernetes": True,
        "hygon_dcu_poll_interval": 2,
        "hygon_dcu_holders_timeout": 120,
        "hygon_dcu_instances_timeout": 60,
        "hygon_dcu_device_plugin_image": PLUGIN_IMAGE,
        "hygon_dcu_device_plugin_image_pull_policy": "Never",
        "hygon_dcu_device_plugin_simulated_node": {
            "root": root,
            "library_dir": str(SIMULATOR / "build"),
        },
        "hygon_dcu_device_plugin_reclaim_grace_seconds": 5,
        "hygon_dcu_device_plugin_resync_seconds": 5,
        "hygon_dcu_device_plugin_webhook_replicas": 1,
    }
    inventory = tmp_path_factory.mktemp("inventory") / "hosts.json"
    inventory.write_text(
        json.dumps(
            {
                "all": {
                    "hosts": {kube.node: host_vars},
                    "children": {"hygon_dcu_nodes": {"hosts": {kube.node: {}}}},
                }
            }
        )
    )
    return Playbooks(inventory, ansible_env())


@pytest.fixture(scope="session")
def workload_namespace(kube: Kube) -> str:
    # Before 1.30 the webhook checks only namespaces that opt in with this label
    # (roles/device_plugin/README.md); from 1.30 its matchConditions select the pods instead.
    kube.apply(
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {
                "name": WORKLOAD_NAMESPACE,
                "labels": {"hygon.com/dcu.admission": "enabled"},
            },
        }
    )
    # The namespace's default ServiceAccount appears a moment after the namespace.
    wait_for(
        "the e2e namespace's default ServiceAccount",
        lambda: (
            kube.run("get", "sa", "-n", WORKLOAD_NAMESPACE, "default", check=False).returncode == 0
        ),
        60,
    )
    return str(WORKLOAD_NAMESPACE)
