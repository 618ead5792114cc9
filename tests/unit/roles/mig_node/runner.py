"""Runs the collection's playbooks with ansible-playbook as a subprocess, the way operators do."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import simnode

REPO = Path(__file__).resolve().parents[4]
ROLE = REPO / "roles" / "mig_node"
# The venv under test is the one running pytest: its ansible-playbook, and its collections
# directory (the link to this repository) when it has one, as tests/tools/floor_test.sh sets up.
BIN = Path(sys.executable).parent
_VENV_COLLECTIONS = Path(sys.prefix) / "collections"
COLLECTIONS = (
    _VENV_COLLECTIONS
    if (_VENV_COLLECTIONS / "ansible_collections" / "hygon" / "dcu").exists()
    else REPO / ".venv" / "collections"
)
# The node's interpreter (ansible_python_interpreter); floor_test.sh sets it to the oldest
# Python the role claims for nodes.
NODE_PYTHON = os.environ.get("HYGON_DCU_NODE_PYTHON", sys.executable)
RECAP = re.compile(
    r"^localhost\s*:\s*ok=\d+\s+changed=(\d+)\s+unreachable=\d+\s+failed=(\d+)", re.M
)


def ansible_env(show_custom_stats: bool = True) -> dict[str, str]:
    return {
        **os.environ,
        "ANSIBLE_COLLECTIONS_PATH": str(COLLECTIONS),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
        "ANSIBLE_LOCALHOST_WARNING": "0",
        "ANSIBLE_INVENTORY_UNPARSED_WARNING": "0",
        "ANSIBLE_RETRY_FILES_ENABLED": "0",
        "ANSIBLE_SHOW_CUSTOM_STATS": "1" if show_custom_stats else "0",
        "ANSIBLE_PIPELINING": "1",
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
    }


@dataclass
class PlaybookRun:
    returncode: int
    output: str
    changed: int | None
    failed: int | None

    def failure_messages(self, host: str = "localhost") -> list[str]:
        """The ``msg`` of every task that failed on ``host`` (printed as JSON after ``=>``)."""
        messages = []
        for line in self.output.splitlines():
            if line.startswith(f"fatal: [{host}]: FAILED! => "):
                payload = json.loads(line.split("=> ", 1)[1])
                messages.append(str(payload.get("msg", "")))
        return messages


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
    argv = [str(BIN / "ansible-playbook"), f"hygon.dcu.{playbook}", "-i", inventory, "-c", "local"]
    if node_python is not None:
        argv += ["-e", f"ansible_python_interpreter={node_python}"]
    argv += args
    if extra_vars:
        argv += ["-e", json.dumps(extra_vars)]
    proc = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        env=ansible_env(show_custom_stats),
        cwd=REPO,
        check=False,
    )
    output = proc.stdout + proc.stderr
    recap = RECAP.search(output)
    return PlaybookRun(
        returncode=proc.returncode,
        output=output,
        changed=int(recap.group(1)) if recap else None,
        failed=int(recap.group(2)) if recap else None,
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
