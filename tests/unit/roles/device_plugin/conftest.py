from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from role_render import RoleRun, run_role


@pytest.fixture(scope="session")
def default_render(tmp_path_factory: pytest.TempPathFactory) -> RoleRun:
    """The role with its defaults, rendered once per session: its certificate is its own
    (test_role_runs.py checks the generated one, and that a second run keeps it)."""
    run = run_role(tmp_path_factory.mktemp("render") / "out", own_certificates=False)
    assert run.returncode == 0, run.output
    return run


# A site's own kube-scheduler image (the role never picks one).
SCHEDULER_IMAGE = "registry.example/kube-scheduler:v1.20.2"
EXTENDER_ON: dict[str, Any] = {
    "hygon_dcu_device_plugin_extender_enabled": True,
    "hygon_dcu_device_plugin_scheduler_image": SCHEDULER_IMAGE,
}
# The extender alone, for the site's default scheduler (no scheduler image).
ALONE: dict[str, Any] = {
    "hygon_dcu_device_plugin_extender_enabled": True,
    "hygon_dcu_device_plugin_extender_mode": "default_scheduler",
}
# The NetworkPolicies, with a site's control-plane and node addresses (IPv4 and IPv6).
POLICY_SOURCES = ["10.20.0.0/24", "192.0.2.7/32", "fd00:20::/64"]
POLICY_ON: dict[str, Any] = {
    "hygon_dcu_device_plugin_network_policy": True,
    "hygon_dcu_device_plugin_network_policy_sources": POLICY_SOURCES,
}


@pytest.fixture(scope="session")
def extender_render(tmp_path_factory: pytest.TempPathFactory) -> RoleRun:
    """The role with the scheduler extender and the second scheduler, rendered once, with the
    certificates it makes itself (test_extender.py: one CA per Service, kept by a second run)."""
    run = run_role(
        tmp_path_factory.mktemp("render-extender") / "out", own_certificates=False, **EXTENDER_ON
    )
    assert run.returncode == 0, run.output
    return run


@pytest.fixture
def render_dir(tmp_path: Path) -> Path:
    return tmp_path / "out"


# Kubernetes versions the role renders differently for (policy/v1 from 1.21, GA matchConditions
# from 1.30), and the ones whose schemas the tests validate against.
RENDERED_VERSIONS = ("1.20", "1.28", "1.31", "1.34", "1.37")


@pytest.fixture(scope="session")
def renders_by_version(tmp_path_factory: pytest.TempPathFactory) -> dict[str, RoleRun]:
    """The role with its defaults, rendered once per session for each of RENDERED_VERSIONS."""
    runs = {}
    for version in RENDERED_VERSIONS:
        run = run_role(
            tmp_path_factory.mktemp(f"render-{version}") / "out",
            hygon_dcu_kubernetes_version=version,
        )
        assert run.returncode == 0, run.output
        runs[version] = run
    return runs
