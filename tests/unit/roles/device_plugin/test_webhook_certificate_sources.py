"""hygon_dcu_device_plugin_webhook_certificate other than the role's own: the rendered manifests
hold no private key (what a GitOps site commits).

cert_manager: the certificate comes from a cert-manager Certificate, the webhook's pods mount the
Secret it writes and the webhook configuration asks cert-manager's CA injector for its caBundle.
No cert-manager runs here (the cluster tier reaches no registry for its images): these check the
objects the role sends, not cert-manager's handling of them.

site_secret: the site makes the Secret; the role takes its CA for the caBundle, refuses to run
without the Secret and never deletes it. The cluster tier serves a partition pod this way
(tests/cluster/e2e/test_70_static_manifests.py)."""

from __future__ import annotations

import base64
import functools
from pathlib import Path
from typing import Any

import yaml
from admission_config import client_config
from fake_api_server import FakeApiServer, serving
from role_certificates import WEBHOOK_SERVICE, make_certificate, site_certificate_variables
from role_render import MANIFESTS, run_role

CERT_MANAGER: dict[str, Any] = {"hygon_dcu_device_plugin_webhook_certificate": "cert_manager"}


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
    issuer, certificate = run.find("Issuer"), run.find("Certificate")
    assert issuer["spec"] == {"selfSigned": {}}
    assert certificate["spec"]["issuerRef"] == {
        "group": "cert-manager.io",
        "kind": "Issuer",
        "name": issuer["metadata"]["name"],
    }
    deployment = run.find("Deployment", "hygon-dcu-admission")
    assert certificate["spec"]["secretName"] in mounted_secrets(deployment)
    configuration = run.find("ValidatingWebhookConfiguration")
    reached = client_config(configuration)
    service = reached["service"]
    assert f"{service['name']}.{service['namespace']}.svc" in certificate["spec"]["dnsNames"]
    assert "caBundle" not in reached
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
    assert run.find("Certificate")["spec"]["issuerRef"] == {"group": "cert-manager.io", **issuer}


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


SITE_SECRET: dict[str, Any] = {"hygon_dcu_device_plugin_webhook_certificate": "site_secret"}
NAMESPACE = "hygon-dcu-system"
SITE_SECRET_NAME = "hygon-dcu-admission-tls"  # noqa: S105 (a Secret's name)


def site_pki() -> tuple[str, str, str]:
    return make_certificate(
        *(f"{WEBHOOK_SERVICE}{suffix}" for suffix in ("", f".{NAMESPACE}", f".{NAMESPACE}.svc"))
    )


def test_site_secret_renders_no_key_and_trusts_the_sites_ca(tmp_path: Path) -> None:
    _cert, key, ca = site_pki()
    run = run_role(
        tmp_path / "out",
        own_certificates=False,
        hygon_dcu_device_plugin_webhook_tls_ca=ca,
        **SITE_SECRET,
    )
    assert run.returncode == 0, run.output
    text = (run.render_dir / MANIFESTS).read_text()
    assert "PRIVATE KEY" not in text
    assert key.split("\n")[1] not in text
    assert "Secret" not in [obj["kind"] for obj in run.objects()]
    assert SITE_SECRET_NAME in mounted_secrets(run.find("Deployment", "hygon-dcu-admission"))
    ca_bundle = client_config(run.find("ValidatingWebhookConfiguration"))["caBundle"]
    assert base64.b64decode(ca_bundle).decode().strip() == ca.strip()


def test_site_secret_without_a_ca_or_with_a_key_is_refused(tmp_path: Path) -> None:
    cert, key, ca = site_pki()
    cases: dict[str, dict[str, Any]] = {
        "no-ca": {},
        "not-pem": {"hygon_dcu_device_plugin_webhook_tls_ca": "site CA"},
        "key": {
            "hygon_dcu_device_plugin_webhook_tls_ca": ca,
            "hygon_dcu_device_plugin_webhook_tls_cert": cert,
            "hygon_dcu_device_plugin_webhook_tls_key": key,
        },
    }
    for case, variables in cases.items():
        run = run_role(tmp_path / case, own_certificates=False, **SITE_SECRET, **variables)
        assert run.returncode != 0, case
        assert "takes the site's own Secret" in run.output, (case, run.output)
        assert not (tmp_path / case).exists(), case


def test_site_secret_against_a_cluster_needs_the_secret_and_never_touches_it(
    tmp_path: Path,
) -> None:
    cert, key, ca = site_pki()
    # No rollout to wait for here: the fake runs no pods.
    variables = {
        **SITE_SECRET,
        "hygon_dcu_device_plugin_webhook_tls_ca": ca,
        "hygon_dcu_device_plugin_wait": False,
    }
    for api in serving(FakeApiServer("1.30")):
        cluster_run = functools.partial(
            run_role,
            tmp_path / "unused",
            own_certificates=False,
            hygon_dcu_device_plugin_render_dir="",
            hygon_dcu_kubeconfig=str(api.kubeconfig(tmp_path / "kubeconfig")),
            **variables,
        )
        refused = cluster_run()
        assert refused.returncode != 0, refused.output
        assert f"needs the Secret {SITE_SECRET_NAME}" in refused.output, refused.output
        assert "is missing" in refused.output, refused.output
        assert [r for r in api.requests if r.method != "GET"] == []

        api.seed({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
        data = {
            "tls.crt": base64.b64encode(cert.encode()).decode(),
            "tls.key": base64.b64encode(key.encode()).decode(),
        }
        secret = api.seed(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "type": "kubernetes.io/tls",
                "metadata": {"name": SITE_SECRET_NAME, "namespace": NAMESPACE},
                "data": data,
            }
        )
        # The ServiceMonitor verifies the webhook with the Secret's ca.crt, which this one lacks.
        api.seed(
            {
                "apiVersion": "apiextensions.k8s.io/v1",
                "kind": "CustomResourceDefinition",
                "metadata": {"name": "servicemonitors.monitoring.coreos.com"},
            }
        )
        writes = len([r for r in api.requests if r.method != "GET"])
        monitored = cluster_run(
            hygon_dcu_device_plugin_service_monitor=True,
            hygon_dcu_device_plugin_metrics_address="0.0.0.0",
        )
        assert monitored.returncode != 0, monitored.output
        assert "with the CA as ca.crt for the ServiceMonitor" in monitored.output, monitored.output
        assert len([r for r in api.requests if r.method != "GET"]) == writes

        installed = cluster_run()
        assert installed.returncode == 0, installed.output
        configuration = api.get("ValidatingWebhookConfiguration", "hygon-dcu-admission")
        assert configuration is not None
        ca_bundle = client_config(configuration)["caBundle"]
        assert base64.b64decode(ca_bundle).decode().strip() == ca.strip()
        assert api.get("Secret", SITE_SECRET_NAME, NAMESPACE) == secret

        removed = cluster_run(
            hygon_dcu_device_plugin_state="absent", hygon_dcu_device_plugin_remove_namespace=False
        )
        assert removed.returncode == 0, removed.output
        assert api.get("Deployment", "hygon-dcu-admission", NAMESPACE) is None
        assert api.get("Secret", SITE_SECRET_NAME, NAMESPACE) == secret
