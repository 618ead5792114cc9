"""Runs the device_plugin role in render mode (no cluster) and reads what it would apply."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[4]
PLAYBOOK = REPO / "playbooks" / "deploy_device_plugin.yml"
COLLECTIONS = REPO / ".venv" / "collections"
ANSIBLE_PLAYBOOK = Path(sys.executable).with_name("ansible-playbook")
RECAP = re.compile(
    r"^localhost\s*:\s*ok=\d+\s+changed=(\d+)\s+unreachable=\d+\s+failed=(\d+)", re.M
)


@dataclass
class RoleRun:
    returncode: int
    output: str
    changed: int | None
    failed: int | None
    render_dir: Path

    def objects(self) -> list[dict[str, Any]]:
        """Every rendered manifest, in the order the role applies them."""
        manifests = self.render_dir / "manifests.yaml"
        return [obj for obj in yaml.safe_load_all(manifests.read_text()) if obj is not None]

    def find(self, kind: str, name: str | None = None) -> dict[str, Any]:
        found = [
            obj
            for obj in self.objects()
            if obj["kind"] == kind and (name is None or obj["metadata"]["name"] == name)
        ]
        assert len(found) == 1, f"{kind}/{name}: {len(found)} objects rendered"
        return found[0]


def run_role(render_dir: Path, *, check: bool = False, **extra_vars: Any) -> RoleRun:
    """ansible-playbook deploy_device_plugin.yml with render_dir and extra_vars (JSON)."""
    variables = {"hygon_dcu_device_plugin_render_dir": str(render_dir), **extra_vars}
    env = {
        **os.environ,
        "ANSIBLE_COLLECTIONS_PATH": str(COLLECTIONS),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
        "ANSIBLE_LOCALHOST_WARNING": "0",
        "ANSIBLE_INVENTORY_UNPARSED_WARNING": "0",
        "ANSIBLE_RETRY_FILES_ENABLED": "0",
    }
    proc = subprocess.run(
        [
            str(ANSIBLE_PLAYBOOK),
            str(PLAYBOOK),
            "-e",
            json.dumps(variables),
            *(["--check"] if check else []),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        check=False,
    )
    output = proc.stdout + proc.stderr
    recap = RECAP.search(output)
    return RoleRun(
        returncode=proc.returncode,
        output=output,
        changed=int(recap.group(1)) if recap else None,
        failed=int(recap.group(2)) if recap else None,
        render_dir=render_dir,
    )
