"""The role's behaviour across runs: idempotence, certificates, options and refusals.

Without a cluster, "the second run changes nothing" is checked on what the role would send:
the second render must report changed=0 and write byte-identical manifests, with the first
run's webhook Secret standing in for the cluster's (the role reads it back exactly as it reads
the cluster's Secret when applying).
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
import yaml
from admission_config import client_config
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from role_certificates import make_certificate
from role_render import HostOutcome, RoleRun, run_role, run_role_on_hosts

SERVICE_DNS = "hygon-dcu-admission.hygon-dcu-system.svc"


def _snapshot(directory: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(directory.iterdir())}


def _tls(run: RoleRun) -> tuple[x509.Certificate, list[x509.Certificate], bytes]:
    data = run.find("Secret")["data"]
    cert = x509.load_pem_x509_certificate(base64.b64decode(data["tls.crt"]))
    cas = x509.load_pem_x509_certificates(base64.b64decode(data["ca.crt"]))
    return cert, cas, base64.b64decode(data["tls.key"])


def _ca_bundle(run: RoleRun) -> bytes:
    return base64.b64decode(client_config(run.find("ValidatingWebhookConfiguration"))["caBundle"])


@pytest.mark.floor
def test_check_mode_predicts_a_first_run(render_dir: Path) -> None:
    # minting the certificate in check mode too (serving_cert_generate.yml) is part of it
    run = run_role(render_dir, check=True, own_certificates=False)
    assert run.returncode == 0, run.output
    assert run.changed and run.changed > 0
    assert not render_dir.exists()


def test_second_run_sends_the_same_objects(default_render: RoleRun) -> None:
    assert default_render.changed and default_render.changed > 0
    before = _snapshot(default_render.render_dir)

    # the role's own certificate, read back from the first render's Secret
    predicted = run_role(default_render.render_dir, check=True, own_certificates=False)
    assert predicted.returncode == 0, predicted.output
    assert predicted.changed == 0, predicted.output

    second = run_role(default_render.render_dir, own_certificates=False)
    assert second.returncode == 0, second.output
    assert second.changed == 0, second.output
    assert _snapshot(default_render.render_dir) == before


def test_generated_certificate_serves_the_webhook_service(default_render: RoleRun) -> None:
    cert, cas, key_pem = _tls(default_render)
    (ca,) = cas
    cert.verify_directly_issued_by(ca)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert SERVICE_DNS in names.get_values_for_type(x509.DNSName)
    key = serialization.load_pem_private_key(key_pem, password=None)
    spki = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    assert key.public_key().public_bytes(*spki) == cert.public_key().public_bytes(*spki)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert x509.load_pem_x509_certificates(_ca_bundle(default_render)) == [ca]


def test_renewal_keeps_trusting_the_previous_ca(render_dir: Path) -> None:
    # A certificate valid for fewer days than min_days is renewed on the next run.
    options: dict[str, Any] = {
        "hygon_dcu_device_plugin_webhook_cert_days": 30,
        "hygon_dcu_device_plugin_webhook_cert_min_days": 60,
    }
    first = run_role(render_dir, own_certificates=False, **options)
    assert first.returncode == 0, first.output
    first_cert, (first_ca,), _first_key = _tls(first)

    second = run_role(render_dir, own_certificates=False, **options)
    assert second.returncode == 0, second.output
    assert second.changed and second.changed > 0
    cert, cas, _key = _tls(second)
    assert cert.serial_number != first_cert.serial_number
    cert.verify_directly_issued_by(cas[0])
    # pods may still serve the old certificate for a while: the old CA stays trusted
    assert cas[1] == first_ca
    assert x509.load_pem_x509_certificates(_ca_bundle(second)) == cas


def test_supplied_certificate_is_used_as_given(render_dir: Path) -> None:
    cert, key, ca = make_certificate(SERVICE_DNS)
    run = run_role(
        render_dir,
        own_certificates=False,  # this test's certificate alone
        hygon_dcu_device_plugin_webhook_tls_cert=cert,
        hygon_dcu_device_plugin_webhook_tls_key=key,
        hygon_dcu_device_plugin_webhook_tls_ca=ca,
    )
    assert run.returncode == 0, run.output
    data = run.find("Secret")["data"]
    assert base64.b64decode(data["tls.crt"]).decode() == cert
    assert base64.b64decode(data["tls.key"]).decode() == key
    assert _ca_bundle(run).decode().strip() == ca.strip()
    assert key not in run.output


@pytest.fixture(scope="module")
def refusals(tmp_path_factory: pytest.TempPathFactory) -> dict[str, HostOutcome]:
    """This module's refusals, each a host of one playbook run."""
    return run_role_on_hosts(
        tmp_path_factory.mktemp("refusals"),
        {
            "partial-certificate": {
                "hygon_dcu_device_plugin_webhook_tls_cert": make_certificate(SERVICE_DNS)[0]
            },
            "unknown-state": {"hygon_dcu_device_plugin_state": "installed"},
        },
    )


def test_partial_certificate_is_refused(refusals: dict[str, HostOutcome]) -> None:
    refused = refusals["partial-certificate"]
    assert refused.failed, refused.output
    assert "go together: set all three" in refused.message
    assert not refused.render_dir.exists()


def test_unknown_state_is_refused_before_any_task(refusals: dict[str, HostOutcome]) -> None:
    refused = refusals["unknown-state"]
    assert refused.failed, refused.output
    assert "hygon_dcu_device_plugin_state" in refused.message
    assert "present, absent" in refused.message
    assert not refused.render_dir.exists()


def test_options_reach_the_manifests(render_dir: Path, default_render: RoleRun) -> None:
    run = run_role(
        render_dir,
        hygon_dcu_device_plugin_host_pid="true",  # string form, as from a survey
        hygon_dcu_device_plugin_registry_host_path_type="Directory",
        hygon_dcu_device_plugin_placement_policy="spread",
        hygon_dcu_device_plugin_priority_class="",
        hygon_dcu_device_plugin_webhook_enabled=False,
        hygon_dcu_device_plugin_image="registry.example/hygon/dcu-plugin:1.2.3",
    )
    assert run.returncode == 0, run.output
    names = {obj["metadata"]["name"] for obj in run.objects()}
    assert names.isdisjoint({"hygon-dcu-admission", "hygon-dcu-admission-tls"})
    template = run.find("DaemonSet")["spec"]["template"]
    spec = template["spec"]
    assert spec["hostPID"] is True
    assert "priorityClassName" not in spec
    paths = {
        volume["hostPath"]["path"]: volume["hostPath"]["type"]
        for volume in spec["volumes"]
        if "hostPath" in volume
    }
    assert paths["/etc/dmi_mig_config"] == "Directory"
    assert spec["containers"][0]["image"] == "registry.example/hygon/dcu-plugin:1.2.3"
    config = yaml.safe_load(next(iter(run.find("ConfigMap")["data"].values())))
    assert config["policy"] == "spread"
    # a changed configuration changes the pod template, so the DaemonSet rolls
    default_template = default_render.find("DaemonSet")["spec"]["template"]
    assert template["metadata"]["annotations"] != default_template["metadata"]["annotations"]


def test_absent_removes_the_webhook_configuration_first(
    render_dir: Path, default_render: RoleRun
) -> None:
    run = run_role(render_dir, hygon_dcu_device_plugin_state="absent")
    assert run.returncode == 0, run.output
    removal = yaml.safe_load((render_dir / "removal.yaml").read_text())
    order = [(item["kind"], item["name"]) for item in removal]
    # only the second scheduler and the extender go before it (test_extender.py)
    first = order.index(("ValidatingWebhookConfiguration", "hygon-dcu-admission"))
    assert {name for _kind, name in order[:first]} <= {
        "hygon-dcu-scheduler",
        "hygon-dcu-scheduler-as-kube-scheduler",
        "hygon-dcu-scheduler-as-volume-scheduler",
        "hygon-dcu-scheduler-authentication-reader",
        "hygon-dcu-extender",
        "hygon-dcu-extender-metrics",
        "hygon-dcu-extender-tls",
        "hygon-dcu-extender-client",
        "hygon-dcu-extender-token",
    }
    assert order[-1] == ("Namespace", "hygon-dcu-system")
    # everything a default run applies goes, even with the namespace kept
    applied = {(obj["kind"], obj["metadata"]["name"]) for obj in default_render.objects()}
    assert applied - {("Namespace", "hygon-dcu-system")} <= set(order[:-1])
    assert order.index(("Deployment", "hygon-dcu-admission")) < order.index(
        ("Secret", "hygon-dcu-admission-tls")
    )
    # the webhook's account outlives its pods
    assert order.index(("Deployment", "hygon-dcu-admission")) < order.index(
        ("ServiceAccount", "hygon-dcu-admission")
    )
    assert order.index(("DaemonSet", "hygon-dcu-device-plugin")) < order.index(
        ("ClusterRole", "hygon-dcu-device-plugin")
    )
    assert not (render_dir / "manifests.yaml").exists()
