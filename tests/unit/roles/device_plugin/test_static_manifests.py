"""tools/static_manifests.sh: the role's own render, as a file a site commits or applies with
kubectl; never a Secret or a private key in it. The cluster tier applies its site-secret output
and serves a partition pod with it (tests/cluster/e2e/test_70_static_manifests.py)."""

from __future__ import annotations

import base64
import stat
import subprocess
from pathlib import Path
from typing import Any

import yaml
from admission_config import client_config
from playbook_runner import BIN, ansible_env
from role_certificates import WEBHOOK_SERVICE, make_certificate
from role_render import REPO, run_role

TOOL = REPO / "tools" / "static_manifests.sh"


def static(*args: str) -> subprocess.CompletedProcess[str]:
    env = ansible_env()
    return subprocess.run(
        ["bash", str(TOOL), *args],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
        cwd=BIN.parent,
    )


def objects(path: Path) -> list[dict[str, Any]]:
    return [obj for obj in yaml.safe_load_all(path.read_text()) if obj is not None]


def test_cert_manager_output_is_the_roles_render_without_a_secret(tmp_path: Path) -> None:
    out = tmp_path / "hygon-dcu-cert-manager.yaml"
    made = static("cert-manager", str(out))
    assert made.returncode == 0, made.stdout + made.stderr
    assert stat.S_IMODE(out.stat().st_mode) == 0o644
    text = out.read_text()
    assert "PRIVATE KEY" not in text
    rendered = run_role(
        tmp_path / "render",
        own_certificates=False,
        hygon_dcu_device_plugin_webhook_certificate="cert_manager",
    )
    assert rendered.returncode == 0, rendered.output
    assert objects(out) == rendered.objects()
    assert "Secret" not in [obj["kind"] for obj in objects(out)]


def test_site_secret_output_trusts_the_given_ca(tmp_path: Path) -> None:
    namespace = "hygon-dcu-system"
    _cert, _key, ca = make_certificate(
        WEBHOOK_SERVICE, f"{WEBHOOK_SERVICE}.{namespace}", f"{WEBHOOK_SERVICE}.{namespace}.svc"
    )
    ca_file = tmp_path / "ca.pem"
    ca_file.write_text(ca)
    out = tmp_path / "site.yaml"
    made = static("site-secret", str(ca_file), str(out), "-e", "hygon_dcu_kubernetes_version=1.20")
    assert made.returncode == 0, made.stdout + made.stderr
    found = objects(out)
    assert "Secret" not in [obj["kind"] for obj in found]
    (configuration,) = [obj for obj in found if obj["kind"] == "ValidatingWebhookConfiguration"]
    ca_bundle = client_config(configuration)["caBundle"]
    assert base64.b64decode(ca_bundle).decode().strip() == ca.strip()
    # Rendered for the Kubernetes version asked: 1.20 has no policy/v1.
    (budget,) = [obj for obj in found if obj["kind"] == "PodDisruptionBudget"]
    assert budget["apiVersion"] == "policy/v1beta1"


def test_output_that_would_hold_a_secret_or_that_the_role_refuses_is_not_written(
    tmp_path: Path,
) -> None:
    extender = tmp_path / "extender.yaml"
    refused = static(
        "cert-manager",
        str(extender),
        "-e",
        '{"hygon_dcu_device_plugin_extender_enabled": true, '
        '"hygon_dcu_device_plugin_extender_mode": "default_scheduler"}',
    )
    assert refused.returncode != 0
    assert "hold a Secret" in refused.stderr
    assert not extender.exists()
    not_a_ca = tmp_path / "ca.pem"
    not_a_ca.write_text("not a certificate\n")
    bad = tmp_path / "bad.yaml"
    refused = static("site-secret", str(not_a_ca), str(bad))
    assert refused.returncode != 0
    assert "takes the site's own Secret" in refused.stderr
    assert not bad.exists()
