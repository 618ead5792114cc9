"""Fixtures: a session test CA and the webhook served over real TLS on 127.0.0.1."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from webhook_support import (
    Authority,
    Rendered,
    Running,
    finish_render,
    make_authority,
    serving,
    start_render,
)


@pytest.fixture(scope="session")
def authority() -> Authority:
    return make_authority()


@pytest.fixture
def running_webhook(tmp_path: Path, authority: Authority) -> Iterator[Running]:
    with serving(tmp_path, authority, max_body=64 * 1024) as running:
        yield running


IMAGE = "registry.example/hygon/dcu-plugin:1.0"
RENDER_SETS: dict[str, dict[str, Any]] = {
    "defaults": {"hygon_dcu_admission_image": IMAGE},  # + the CA as PEM text, below
    "custom": {
        "hygon_dcu_namespace": "gpu-system",
        "hygon_dcu_admission_name": "dcu-admission",
        "hygon_dcu_admission_image": IMAGE,
        "hygon_dcu_admission_image_pull_policy": "Always",
        "hygon_dcu_admission_image_pull_secrets": ["regcred", "mirror"],
        "hygon_dcu_admission_replicas": 3,
        "hygon_dcu_admission_port": 9443,
        "hygon_dcu_admission_tls_secret": "dcu-admission-cert",
        "hygon_dcu_admission_resources": {
            "requests": {"cpu": "100m", "memory": "96Mi"},
            "limits": {"cpu": "1", "memory": "256Mi"},
        },
        "hygon_dcu_admission_log_level": "debug",
        "hygon_dcu_admission_node_selector": {"node-role.kubernetes.io/control-plane": ""},
        "hygon_dcu_admission_tolerations": [
            {
                "key": "node-role.kubernetes.io/control-plane",
                "operator": "Exists",
                "effect": "NoSchedule",
            }
        ],
        "hygon_dcu_admission_priority_class": "system-cluster-critical",
        "hygon_dcu_admission_timeout_seconds": 10,
        "hygon_dcu_admission_excluded_namespaces": ["kube-system"],
        "hygon_dcu_admission_plugin_account": "dcu-plugin",
        "hygon_dcu_admission_extender_account": "dcu-extender",
        "hygon_dcu_admission_pod_update_failure_policy": "Ignore",
    },  # + the CA as base64, below
    "cert-manager": {
        "hygon_dcu_admission_image": IMAGE,
        "hygon_dcu_admission_ca_inject_from": "hygon-dcu-system/hygon-dcu-admission",
    },
    # The geometry check off: no token, no account of its own.
    "no-geometry": {
        "hygon_dcu_admission_image": IMAGE,
        "hygon_dcu_admission_geometry_namespace": "",
    },
    # The Leases in another namespace than the webhook's own.
    "geometry-elsewhere": {
        "hygon_dcu_admission_image": IMAGE,
        "hygon_dcu_admission_geometry_namespace": "dcu-plugins",
    },
    "no-ca": {"hygon_dcu_admission_image": IMAGE},
    "no-image": {},  # + the CA
}


@pytest.fixture(scope="session")
def renders(tmp_path_factory: pytest.TempPathFactory, authority: Authority) -> dict[str, Rendered]:
    """Each variable set rendered once by a real ansible-playbook run (all runs in parallel)."""
    base = tmp_path_factory.mktemp("admission-render")
    pem = authority.pem.decode()
    variables = {name: dict(values) for name, values in RENDER_SETS.items()}
    variables["defaults"]["hygon_dcu_admission_ca_bundle"] = pem
    variables["no-image"]["hygon_dcu_admission_ca_bundle"] = pem
    variables["no-geometry"]["hygon_dcu_admission_ca_bundle"] = pem
    variables["geometry-elsewhere"]["hygon_dcu_admission_ca_bundle"] = pem
    variables["custom"]["hygon_dcu_admission_ca_bundle"] = base64.b64encode(authority.pem).decode()
    started = {name: start_render(base / name, values) for name, values in variables.items()}
    return {name: finish_render(base / name, process) for name, process in started.items()}
