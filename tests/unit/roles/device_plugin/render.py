"""Runs the device_plugin role in render mode (no cluster) and reads what it would apply."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from playbook_runner import REPO, PlaybookRun, run_playbook

__all__ = ["REPO", "RoleRun", "run_role"]

PLAYBOOK = REPO / "playbooks" / "deploy_device_plugin.yml"


@dataclass
class RoleRun(PlaybookRun):
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
    run = run_playbook([str(PLAYBOOK), *(["--check"] if check else [])], extra_vars=variables)
    return RoleRun(run.returncode, run.output, run.hosts, render_dir)
