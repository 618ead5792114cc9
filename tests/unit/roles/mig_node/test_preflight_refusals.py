"""A run that could not finish refuses in preflight, before its first disruptive step.

The disruptive steps are cordon, eviction, park (the fake cluster's request log shows every write)
and, on the node, instance destruction and the switch (the simulator's state shows them). A run
that cannot see who holds /dev/kfd (node steps not run as root; no dev/kfd under
hygon_dcu_host_root) used to do all of that and fail at the switch, or switch blind.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import simnode
import yaml

from .fake_cluster import FakeCluster, cluster_vars, running, writes
from .runner import NODE_PYTHON, PlaybookRun, node_vars, run_playbook

# Kubernetes steps on: every cluster step a kubernetes client start.
pytestmark = pytest.mark.slow

NOBODY = 65534
# The node steps of the unprivileged run need an interpreter that user may execute (the test
# venv's may live under root's home).
SYSTEM_PYTHON = "/usr/bin/python3"


def refusal(run: PlaybookRun, host: str = "localhost") -> str:
    messages = run.failure_messages(host)
    assert messages, run.output
    return " ".join(messages[-1].split())


def wrong_root(tmp_path: Path) -> str:
    """A hygon_dcu_host_root typo: a directory that is not the node's root (no dev/kfd)."""
    path = tmp_path / "srv" / "node-7"
    path.mkdir(parents=True)
    return str(path)


@pytest.fixture
def readable_node(sim_build: Any) -> Iterator[simnode.SimNode]:
    """A simulated node that a user other than root can read (pytest's tmp_path is root's own)."""
    parent = Path(tempfile.mkdtemp(prefix="hygon-dcu-node-"))
    try:
        parent.chmod(0o755)
        yield simnode.init(parent / "node")
    finally:
        shutil.rmtree(parent, ignore_errors=True)


@pytest.mark.parametrize("check", [False, True], ids=["real", "check"])
def test_a_host_root_without_dev_kfd_is_refused_before_the_cordon(
    sim_node: simnode.SimNode, tmp_path: Path, check: bool
) -> None:
    for cluster in running(FakeCluster(sim_node)):
        # The library, hy-smi and the simulator's environment still reach the node: only the
        # holder scan is pointed at the wrong place.
        variables = cluster_vars(cluster, tmp_path, hygon_dcu_host_root=wrong_root(tmp_path))

        run = run_playbook("enable_mig", *(["--check"] if check else []), extra_vars=variables)

        assert run.returncode != 0, run.output
        message = refusal(run)
        assert (
            "stage 'preflight' failed in task 'Require a scan that can see every holder of "
            "/dev/kfd'" in message
        )
        assert f"{tmp_path}/srv/node-7/dev/kfd does not exist" in message
        assert f"set hygon_dcu_host_root (now '{tmp_path}/srv/node-7') to the directory" in message
        assert "Nothing was changed" in message
        assert "device plugin not parked by this run; node not cordoned by this run" in message
        assert writes(cluster) == []
        assert cluster.plugin_pod() is not None
        assert sim_node.status().mode == 0
        assert sim_node.ops() == []


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run the node steps as another user")
@pytest.mark.skipif(not os.access(SYSTEM_PYTHON, os.X_OK), reason=f"no {SYSTEM_PYTHON}")
@pytest.mark.skipif(shutil.which("su") is None, reason="no su to become another user")
def test_node_steps_run_without_root_are_refused_before_the_cordon(
    readable_node: simnode.SimNode, tmp_path: Path
) -> None:
    for cluster in running(FakeCluster(readable_node)):
        # The node's steps become an unprivileged user, as when the job's node user is not root
        # and -b was forgotten; the cluster steps run on the control node (localhost, become:
        # false) with the test venv's Python, which has the kubernetes client.
        node = cluster.node_name
        inventory = tmp_path / "hosts.yml"
        hosts = {
            node: {
                "ansible_connection": "local",
                "ansible_python_interpreter": SYSTEM_PYTHON,
                "ansible_become": True,
                "ansible_become_method": "ansible.builtin.su",
                "ansible_become_user": "nobody",
                "ansible_become_flags": "-s /bin/sh",
            },
            "localhost": {"ansible_connection": "local", "ansible_python_interpreter": NODE_PYTHON},
        }
        inventory.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
        variables = cluster_vars(cluster, tmp_path, target=node)

        run = run_playbook(
            "enable_mig", extra_vars=variables, inventory=str(inventory), node_python=None
        )

        assert run.returncode != 0, run.output
        message = refusal(run, node)
        assert (
            "stage 'preflight' failed in task 'Require a scan that can see every holder of "
            "/dev/kfd'" in message
        )
        assert f"by this scan, which runs as uid {NOBODY}" in message
        assert "run the node steps as root (ansible-playbook -b, or become: true" in message
        assert writes(cluster) == []
        assert cluster.plugin_pod() is not None
        assert readable_node.status().mode == 0
        assert readable_node.ops() == []


def carve_one(node: simnode.SimNode) -> str:
    for argv in (["-mig", "1"], ["mig", "-cgi", "2g.15gb", "-C", "-i", "0"]):
        subprocess.run(
            [str(simnode.HY_SMI_PATH), *argv], env=node.env(), capture_output=True, check=True
        )
    (instance,) = node.status().compute_instances
    return str(instance.uuid)


@pytest.mark.parametrize(
    ("playbook", "extra"),
    [
        ("disable_mig", {}),
        ("converge", {"hygon_dcu_mig_state": "disabled"}),
        (
            "reboot_recovery",
            {"hygon_dcu_mig_state": "disabled", "hygon_dcu_recover_apply_mode": True},
        ),
    ],
)
def test_every_switching_playbook_refuses_a_wrong_host_root_before_destroying_instances(
    sim_node: simnode.SimNode, tmp_path: Path, playbook: str, extra: dict[str, Any]
) -> None:
    uuid = carve_one(sim_node)
    ops_before = sim_node.ops()
    variables = node_vars(sim_node, hygon_dcu_host_root=wrong_root(tmp_path), **extra)

    run = run_playbook(playbook, extra_vars=variables)

    assert run.returncode != 0, run.output
    message = refusal(run)
    assert "stage 'preflight' failed" in message
    assert f"{tmp_path}/srv/node-7/dev/kfd does not exist" in message
    # The node is as it was: mode on, its instance alive, nothing destroyed or switched.
    assert sim_node.status().mode == 1
    assert [ci.uuid for ci in sim_node.status().compute_instances] == [uuid]
    assert sim_node.ops() == ops_before
