"""hygon_dcu_device_plugin_webhook_certificate=cert_manager: the webhook's certificate comes from
a cert-manager Certificate, so the rendered manifests hold no private key (what a GitOps site
commits), the webhook's pods mount the Secret the Certificate writes and the webhook
configuration asks cert-manager's CA injector for its caBundle.

No cert-manager runs here (the cluster tier reaches no registry for its images): these check the
objects the role sends, not cert-manager's handling of them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from fake_api_server import FakeApiServer, serving

from .certificates import site_certificate_variables
from .render import MANIFESTS, RoleRun, run_role

CERT_MANAGER: dict[str, Any] = {"hygon_dcu_device_plugin_webhook_certificate": "cert_manager"}


def only(run: RoleRun, kind: str) -> dict[str, Any]:
    return run.find(kind)


def mounted_secrets(deployment: dict[str, Any]) -> set[str]:
    volumes = deployment["spec"]["template"]["spec"]["volumes"]
    return {volume["secret"]["secretName"] for volume in volumes if "secret" in volume}


def test_the_rendered_manifests_hold_no_private_key_and_the_webhook_mounts_cert_managers_secret(
    tmp_path: Path,
) -> None:
    run = run_role(tmp_path / "out", own_certificates=False, **CERT_MANAGER)
    assert run.returncode == 0, run.output
    assert "PRIVATE KEY" not in (run.render_dir / MANIFESTS).read_text()
    kinds = [obj["kind"] for obj in run.objects()]
    assert "Secret" not in kinds
    issuer, certificate = only(run, "Issuer"), only(run, "Certificate")
    assert issuer["spec"] == {"selfSigned": {}}
    assert certificate["spec"]["issuerRef"] == {
        "group": "cert-manager.io",
        "kind": "Issuer",
        "name": issuer["metadata"]["name"],
    }
    deployment = run.find("Deployment", "hygon-dcu-admission")
    assert certificate["spec"]["secretName"] in mounted_secrets(deployment)
    configuration = only(run, "ValidatingWebhookConfiguration")
    (webhook,) = configuration["webhooks"]
    service = webhook["clientConfig"]["service"]
    assert f"{service['name']}.{service['namespace']}.svc" in certificate["spec"]["dnsNames"]
    assert "caBundle" not in webhook["clientConfig"]
    assert configuration["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == (
        f"{certificate['metadata']['namespace']}/{certificate['metadata']['name']}"
    )
    # The Certificate is sent before the pods that mount its Secret.
    assert kinds.index("Certificate") < kinds.index("Deployment")


def test_a_site_issuer_is_used_and_no_issuer_of_the_roles_own_is_made(tmp_path: Path) -> None:
    issuer = {"kind": "ClusterIssuer", "name": "site-ca"}
    run = run_role(
        tmp_path / "out",
        own_certificates=False,
        hygon_dcu_device_plugin_cert_manager_issuer=issuer,
        **CERT_MANAGER,
    )
    assert run.returncode == 0, run.output
    assert "Issuer" not in [obj["kind"] for obj in run.objects()]
    assert only(run, "Certificate")["spec"]["issuerRef"] == {"group": "cert-manager.io", **issuer}


def test_conflicting_or_malformed_inputs_are_refused_before_anything_is_written(
    tmp_path: Path,
) -> None:
    cases: dict[str, dict[str, Any]] = {
        "pems": {**CERT_MANAGER, **site_certificate_variables()},
        "kind": {
            **CERT_MANAGER,
            "hygon_dcu_device_plugin_cert_manager_issuer": {"kind": "Foo", "name": "x"},
        },
        "name": {
            **CERT_MANAGER,
            "hygon_dcu_device_plugin_cert_manager_issuer": {"kind": "Issuer", "name": "Not A Name"},
        },
    }
    for case, variables in cases.items():
        run = run_role(tmp_path / case, own_certificates=False, **variables)
        assert run.returncode != 0, case
        assert "takes the certificate from cert-manager" in run.output, (case, run.output)
        assert not (tmp_path / case).exists(), case


def test_removal_lists_the_certificate_and_issuer_only_with_cert_manager(tmp_path: Path) -> None:
    removed = {}
    for case, variables in {"cert_manager": CERT_MANAGER, "role": {}}.items():
        run = run_role(
            tmp_path / case,
            own_certificates=False,
            hygon_dcu_device_plugin_state="absent",
            **variables,
        )
        assert run.returncode == 0, run.output
        listed = yaml.safe_load((tmp_path / case / "removal.yaml").read_text())
        removed[case] = {(entry["kind"], entry["name"]) for entry in listed}
    cert_manager_objects = {
        ("Certificate", "hygon-dcu-admission"),
        ("Issuer", "hygon-dcu-selfsigned"),
    }
    assert cert_manager_objects <= removed["cert_manager"]
    assert not cert_manager_objects & removed["role"]


def test_a_cluster_without_cert_manager_is_refused_before_any_change(tmp_path: Path) -> None:
    for api in serving(FakeApiServer("1.30")):
        kubeconfig = api.kubeconfig(tmp_path / "kubeconfig")
        run = run_role(
            tmp_path / "unused",
            own_certificates=False,
            hygon_dcu_device_plugin_render_dir="",
            hygon_dcu_kubeconfig=str(kubeconfig),
            **CERT_MANAGER,
        )
        assert run.returncode != 0, run.output
        assert "needs cert-manager in the cluster" in run.output, run.output
        assert [r for r in api.requests if r.method != "GET"] == []
        assert api.objects == {}
