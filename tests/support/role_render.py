"""Runs the device_plugin role in render mode (no cluster) and reads what it would apply: for the
role's tests and for the observability tests, which read the alert rules and the dashboard the
role renders."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from playbook_runner import REPO, PlaybookRun, run_playbook, run_playbook_on_hosts
from role_certificates import site_certificate_variables

__all__ = [
    "REPO",
    "HostOutcome",
    "Monitoring",
    "RoleRun",
    "render_monitoring",
    "run_role",
    "run_role_on_hosts",
]

PLAYBOOK = REPO / "playbooks" / "deploy_device_plugin.yml"
RENDER_DIR = "hygon_dcu_device_plugin_render_dir"
MANIFESTS = "manifests.yaml"  # in the render dir (device_plugin__render_file)


@dataclass
class RoleRun(PlaybookRun):
    render_dir: Path

    def objects(self) -> list[dict[str, Any]]:
        """Every rendered manifest, in the order the role applies them."""
        manifests = self.render_dir / MANIFESTS
        return [obj for obj in yaml.safe_load_all(manifests.read_text()) if obj is not None]

    def find(self, kind: str, name: str | None = None) -> dict[str, Any]:
        found = [
            obj
            for obj in self.objects()
            if obj["kind"] == kind and (name is None or obj["metadata"]["name"] == name)
        ]
        assert len(found) == 1, f"{kind}/{name}: {len(found)} objects rendered"
        return found[0]


def run_role(
    render_dir: Path,
    *,
    check: bool = False,
    own_certificates: bool | None = None,
    **extra_vars: Any,
) -> RoleRun:
    """ansible-playbook deploy_device_plugin.yml with render_dir and extra_vars (JSON).

    own_certificates=True hands the role a site's own webhook and extender certificates
    (role_certificates.site_certificate_variables; extra_vars still win), so it does not mint a CA
    and a certificate per Service, the slowest part of a render. False leaves the role on its
    own path (generate, keep the earlier Secret, renew): for the tests about that path. Unset:
    True for a fresh render; False where the role would keep an earlier Secret, a cluster's
    (extra_vars empty the render dir) or an earlier render's, as keeping it is what such runs
    test."""
    variables = {RENDER_DIR: str(render_dir), **extra_vars}
    if own_certificates is None:
        target = variables[RENDER_DIR]
        own_certificates = bool(target) and not Path(target, MANIFESTS).exists()
    if own_certificates:
        variables = {**site_certificate_variables(), **variables}
    run = run_playbook([str(PLAYBOOK), *(["--check"] if check else [])], extra_vars=variables)
    return RoleRun(run.returncode, run.output, run.hosts, render_dir)


@dataclass
class HostOutcome:
    """One case of run_role_on_hosts: what its host met in the shared run."""

    failed: int  # failed= of its PLAY RECAP line
    messages: list[str]  # the msg of each task that failed on it
    render_dir: Path  # its own: each case must be seen to write nothing
    output: str  # the run's plays and tasks and its lines of them, for assertion messages

    @property
    def message(self) -> str:
        """Its failure messages as one text."""
        return "\n".join(self.messages)


def run_role_on_hosts(
    workdir: Path, cases: Mapping[str, Mapping[str, Any]]
) -> dict[str, HostOutcome]:
    """deploy_device_plugin.yml once, over one local host per case (named by it) with the case's
    variables and a render dir of its own (workdir/CASE/out) as host vars: many refusals in one
    run. Only the play's target goes in -e, which would override the cases' variables. Without
    a site certificate: the role validates its inputs before it makes or reads any."""
    hosts = {
        case: {RENDER_DIR: str(workdir / case / "out"), **variables}
        for case, variables in cases.items()
    }
    run = run_playbook_on_hosts(
        [str(PLAYBOOK)],
        hosts,
        inventory=workdir / "inventory.json",
        extra_vars={"hygon_dcu_api_host": "all"},
    )
    missing = set(hosts) - set(run.hosts)
    assert not missing, f"no PLAY RECAP line for {sorted(missing)}:\n{run.output}"
    return {
        case: HostOutcome(
            failed=run.hosts[case][1],
            messages=run.failure_messages(case),
            render_dir=Path(variables[RENDER_DIR]),
            output="\n".join(
                line
                for line in run.output.splitlines()
                if line.startswith(("PLAY", "TASK", f"{case} ")) or f"[{case}]" in line
            ),
        )
        for case, variables in hosts.items()
    }


@dataclass(frozen=True)
class Monitoring:
    rules: dict[str, Any]  # the PrometheusRule
    dashboard: dict[str, Any]  # the JSON in the dashboard's ConfigMap, loaded


def render_monitoring(render_dir: Path, **extra_vars: Any) -> Monitoring:
    """The alert rules and the dashboard as the role applies them (its defaults, and
    extra_vars)."""
    run = run_role(
        render_dir,
        hygon_dcu_device_plugin_prometheus_rule=True,
        hygon_dcu_device_plugin_grafana_dashboard=True,
        **extra_vars,
    )
    assert run.returncode == 0, run.output
    (dashboard,) = run.find("ConfigMap", "hygon-dcu-dashboard")["data"].values()
    return Monitoring(run.find("PrometheusRule"), json.loads(dashboard))
