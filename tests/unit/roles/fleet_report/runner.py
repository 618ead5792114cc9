"""Runs ``ansible-playbook hygon.dcu.report`` as a subprocess against an inventory of simulated
nodes, the way operators run it."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import simnode
import yaml
from playbook_runner import BIN, REPO, ansible_env, run_playbook

__all__ = ["BIN", "REPO", "ReportRun", "ansible_env", "hy_smi", "run_report", "write_inventory"]


@dataclass
class ReportRun:
    returncode: int
    output: str
    changed: dict[str, int]
    failed: dict[str, int]


def write_inventory(
    path: Path,
    nodes: dict[str, simnode.SimNode],
    other_hosts: dict[str, dict[str, Any]] | None = None,
    **group_vars: Any,
) -> Path:
    """One host per simulated node (all reached locally), plus ``other_hosts`` with their own
    variables, in group hygon_dcu_nodes."""
    hosts: dict[str, dict[str, Any]] = {
        name: {
            "hygon_dcu_host_root": str(node.root),
            "hygon_dcu_library_path": f"{node.root}/opt/hyhal/lib/libhydmi_mig.so.1",
            "hygon_dcu_environment": {simnode.ROOT_ENV: str(node.root)},
        }
        for name, node in nodes.items()
    }
    hosts.update(other_hosts or {})
    inventory = {
        "all": {
            "children": {
                "hygon_dcu_nodes": {
                    "hosts": hosts,
                    "vars": {
                        "ansible_connection": "local",
                        "ansible_python_interpreter": sys.executable,
                        **group_vars,
                    },
                }
            }
        }
    }
    path.write_text(yaml.safe_dump(inventory))
    return path


def run_report(inventory: Path, *args: str, **extra_vars: Any) -> ReportRun:
    run = run_playbook(["hygon.dcu.report", "-i", str(inventory), *args], extra_vars=extra_vars)
    return ReportRun(
        returncode=run.returncode,
        output=run.output,
        changed={host: c for host, (c, _f) in run.hosts.items()},
        failed={host: f for host, (_c, f) in run.hosts.items()},
    )


def hy_smi(node: simnode.SimNode, *args: str) -> None:
    """The simulator's hy-smi: sets a node up the way an operator would, not through the product."""
    subprocess.run(
        [str(simnode.HY_SMI_PATH), *args],
        env=node.env(),
        capture_output=True,
        text=True,
        check=True,
    )
