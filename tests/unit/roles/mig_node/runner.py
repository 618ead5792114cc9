"""Runs the collection's playbooks with ansible-playbook as a subprocess, the way operators do
(tests/support/playbook_runner.py), pointed at simulated nodes."""

from __future__ import annotations

import os
import sys
from typing import Any

import simnode
from playbook_runner import BIN, REPO, PlaybookRun, ansible_env
from playbook_runner import run_playbook as run_ansible_playbook

__all__ = [
    "BIN",
    "NODE_PYTHON",
    "REPO",
    "ROLE",
    "PlaybookRun",
    "ansible_env",
    "node_vars",
    "run_playbook",
]

ROLE = REPO / "roles" / "mig_node"
# The node's interpreter (ansible_python_interpreter); floor_test.sh sets it to the oldest
# Python the role claims for nodes.
NODE_PYTHON = os.environ.get("HYGON_DCU_NODE_PYTHON", sys.executable)


def run_playbook(
    playbook: str,
    *args: str,
    extra_vars: dict[str, Any] | None = None,
    inventory: str = "localhost,",
    show_custom_stats: bool = True,
    node_python: str | None = NODE_PYTHON,
) -> PlaybookRun:
    """``ansible-playbook hygon.dcu.<playbook> -i localhost, -c local ARGS -e EXTRA_VARS``.

    ``node_python=None`` leaves each host's interpreter to the inventory."""
    argv = [f"hygon.dcu.{playbook}", "-i", inventory, "-c", "local"]
    if node_python is not None:
        argv += ["-e", f"ansible_python_interpreter={node_python}"]
    return run_ansible_playbook(
        [*argv, *args],
        extra_vars=extra_vars,
        env=ansible_env(show_custom_stats=show_custom_stats),
    )


def node_vars(node: simnode.SimNode, **overrides: Any) -> dict[str, Any]:
    """The role variables that point the role at a simulated node, Kubernetes off."""
    root = str(node.root)
    return {
        "target": "localhost",
        "hygon_dcu_manage_kubernetes": False,
        "hygon_dcu_host_root": root,
        "hygon_dcu_library_path": f"{root}/opt/hyhal/lib/libhydmi_mig.so.1",
        "hygon_dcu_hy_smi_path": f"{root}/opt/hyhal/bin/hy-smi",
        "hygon_dcu_environment": {simnode.ROOT_ENV: root},
        "hygon_dcu_poll_interval": 1,
        **overrides,
    }
