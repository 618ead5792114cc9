"""Static checks of the fleet_report role and playbooks/report.yml: syntax and the argument
spec against the defaults (ansible-lint runs over the whole tree in its own test-all stage)."""

from __future__ import annotations

import subprocess

import yaml

from .runner import BIN, REPO, ansible_env

ROLE = REPO / "roles" / "fleet_report"
PLAYBOOK = REPO / "playbooks" / "report.yml"


def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, capture_output=True, text=True, env=ansible_env(), cwd=REPO, check=False
    )


def test_playbook_passes_syntax_check() -> None:
    proc = run([str(BIN / "ansible-playbook"), "--syntax-check", "-i", "localhost,", str(PLAYBOOK)])
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_entry_point_has_its_task_file_and_every_default_is_documented() -> None:
    specs = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())["argument_specs"]
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    assert set(specs) == {"main", "write"}
    for entry in specs:
        assert (ROLE / "tasks" / f"{entry}.yml").is_file(), entry
    documented = {
        name: option["default"]
        for spec in specs.values()
        for name, option in spec["options"].items()
        if "default" in option
    }
    assert documented == defaults
