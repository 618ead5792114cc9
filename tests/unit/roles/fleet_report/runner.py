"""Runs ``ansible-playbook hygon.dcu.report`` as a subprocess against an inventory of simulated
nodes, the way operators run it."""

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
import yaml

REPO = Path(__file__).resolve().parents[4]
BIN = Path(sys.executable).parent

RECAP = re.compile(r"^(\S+)\s*:\s*ok=\d+\s+changed=(\d+)\s+unreachable=\d+\s+failed=(\d+)", re.M)


def ansible_env() -> dict[str, str]:
    return {
        **os.environ,
        "ANSIBLE_COLLECTIONS_PATH": str(REPO / ".venv" / "collections"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
        "ANSIBLE_LOCALHOST_WARNING": "0",
        "ANSIBLE_RETRY_FILES_ENABLED": "0",
        "ANSIBLE_PIPELINING": "1",
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
    }


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
    argv = [str(BIN / "ansible-playbook"), "hygon.dcu.report", "-i", str(inventory), *args]
    if extra_vars:
        argv += ["-e", json.dumps(extra_vars)]
    proc = subprocess.run(
        argv, capture_output=True, text=True, env=ansible_env(), cwd=REPO, check=False
    )
    output = proc.stdout + proc.stderr
    recap = {m.group(1): (int(m.group(2)), int(m.group(3))) for m in RECAP.finditer(output)}
    return ReportRun(
        returncode=proc.returncode,
        output=output,
        changed={host: c for host, (c, _f) in recap.items()},
        failed={host: f for host, (_c, f) in recap.items()},
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
