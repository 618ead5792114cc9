"""The webhook's manifests, rendered by Ansible, against the Kubernetes 1.28-1.37 schemas (strict)
and against the server they run."""

from __future__ import annotations

import base64
import importlib
from typing import Any

import pytest
from hygon_dcu_plugin.webhook.offered import WEBHOOK_LEASE_ACCESS
from hygon_dcu_plugin.webhook.server import VALIDATE_PATH, build_parser
from webhook_support import Authority, Rendered

# Imported by name: the package ships no type information, and this keeps the test free of
# a type-ignore whose need depends on the shared mypy configuration.
kubernetes_validate = importlib.import_module("kubernetes_validate")

VERSIONS = [f"1.{minor}" for minor in range(28, 38)]
VALID_SETS = ["defaults", "custom", "cert-manager", "no-geometry", "geometry-elsewhere"]


@pytest.mark.parametrize("render_set", VALID_SETS)
@pytest.mark.parametrize("version", VERSIONS)
def test_schemas_strict(renders: dict[str, Rendered], render_set: str, version: str) -> None:
    rendered = renders[render_set]
    assert rendered.returncode == 0, rendered.output
    assert len(rendered.documents) == 7
    for name, document in rendered.documents.items():
        try:
            used = kubernetes_validate.validate(document, f"{version}.0", strict=True)
        except kubernetes_validate.ValidationError as error:
            pytest.fail(
                f"{render_set}/{name} against {version}: {error.message} at {list(error.path)}"
            )
        # validate() falls back to the newest schema not newer than asked: insist on the one.
        assert used == version, (name, used)


def test_strict_validation_catches_unknown_fields(renders: dict[str, Rendered]) -> None:
    """Guard against a validator that accepts anything."""
    webhook_config = renders["defaults"].documents["validatingwebhookconfiguration"]
    typo = {**webhook_config["webhooks"][0], "failurePolcy": "Fail"}
    broken = {**webhook_config, "webhooks": [typo]}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, "1.28.0", strict=True)


def _parts(rendered: Rendered) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    documents = rendered.documents
    return (
        documents["deployment"],
        documents["service"],
        documents["validatingwebhookconfiguration"],
    )


@pytest.mark.parametrize("render_set", VALID_SETS)
def test_service_and_webhook_reach_the_server(
    renders: dict[str, Rendered], render_set: str
) -> None:
    deployment, service, config = _parts(renders[render_set])
    pod_spec = deployment["spec"]["template"]["spec"]
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    container = pod_spec["containers"][0]

    assert deployment["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert service["spec"]["selector"].items() <= pod_labels.items()
    budget = renders[render_set].documents["poddisruptionbudget"]
    assert budget["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert budget["metadata"]["namespace"] == deployment["metadata"]["namespace"]
    port = service["spec"]["ports"][0]
    assert port["targetPort"] == container["ports"][0]["containerPort"]

    # The arguments are the server's own flags and point into the mounted Secret.
    assert container["command"] == ["hygon-dcu-plugin", "webhook"]
    options = build_parser().parse_args(container["args"])
    assert options.port == container["ports"][0]["containerPort"]
    mount = container["volumeMounts"][0]
    assert mount["readOnly"] is True
    assert options.cert_file == mount["mountPath"] + "/tls.crt"
    assert options.key_file == mount["mountPath"] + "/tls.key"
    volume = next(v for v in pod_spec["volumes"] if v["name"] == mount["name"])
    assert volume["secret"]["secretName"]

    for webhook in config["webhooks"]:
        assert webhook["clientConfig"]["service"] == {
            "namespace": service["metadata"]["namespace"],
            "name": service["metadata"]["name"],
            "path": VALIDATE_PATH,
            "port": port["port"],
        }
    creates, writes = config["webhooks"]
    assert creates["clientConfig"] == writes["clientConfig"]
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {
            "path": "/healthz",
            "port": "https",
            "scheme": "HTTPS",
        }


@pytest.mark.parametrize("render_set", VALID_SETS)
def test_pod_is_locked_down(renders: dict[str, Rendered], render_set: str) -> None:
    deployment = _parts(renders[render_set])[0]
    pod_spec = deployment["spec"]["template"]["spec"]
    assert pod_spec["securityContext"]["runAsNonRoot"] is True
    assert pod_spec["securityContext"]["runAsUser"] != 0
    assert pod_spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    security = pod_spec["containers"][0]["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert security["seccompProfile"] == {"type": "RuntimeDefault"}


@pytest.mark.parametrize("render_set", VALID_SETS)
def test_webhook_fails_closed_for_pod_create_only(
    renders: dict[str, Rendered], render_set: str
) -> None:
    deployment, _ignored, config = _parts(renders[render_set])
    webhook, _writes = config["webhooks"]
    assert webhook["failurePolicy"] == "Fail"
    assert webhook["sideEffects"] == "None"
    assert webhook["admissionReviewVersions"] == ["v1"]
    assert 1 <= webhook["timeoutSeconds"] <= 30
    assert webhook["rules"] == [
        {
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "operations": ["CREATE"],
            "resources": ["pods"],
            "scope": "Namespaced",
        }
    ]
    selector = _name_selector(webhook)
    assert selector["operator"] == "NotIn"
    assert deployment["metadata"]["namespace"] in selector["values"]
    (condition,) = webhook["matchConditions"]
    assert condition["name"] == "requests-hygon-resource"


@pytest.mark.parametrize(
    ("render_set", "namespace", "accounts", "failure_policy"),
    [
        ("defaults", "hygon-dcu-system", ("hygon-dcu-device-plugin", "hygon-dcu-extender"), "Fail"),
        ("custom", "gpu-system", ("dcu-plugin", "dcu-extender"), "Ignore"),
    ],
)
def test_the_second_webhook_sends_every_pod_update_and_names_the_guarded_accounts(
    renders: dict[str, Rendered],
    render_set: str,
    namespace: str,
    accounts: tuple[str, str],
    failure_policy: str,
) -> None:
    deployment, _ignored, config = _parts(renders[render_set])
    _creates, writes = config["webhooks"]
    assert writes["failurePolicy"] == failure_policy
    assert writes["sideEffects"] == "None"
    assert writes["rules"] == [
        {
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "operations": ["UPDATE"],
            "resources": ["pods"],
            "scope": "Namespaced",
        }
    ]
    assert "namespaceSelector" not in writes  # every namespace, the runtime's own too
    users = [f"system:serviceaccount:{namespace}:{account}" for account in accounts]
    options = build_parser().parse_args(
        deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    )
    assert [options.plugin_user, options.extender_user] == users
    (condition,) = writes["matchConditions"]
    assert condition["name"] == "written-by-the-products-accounts"


@pytest.mark.parametrize(
    ("render_set", "leases_namespace"),
    [("defaults", None), ("custom", None), ("geometry-elsewhere", "dcu-plugins")],
)
def test_the_pods_token_lists_the_geometry_leases_of_their_namespace_only(
    renders: dict[str, Rendered], render_set: str, leases_namespace: str | None
) -> None:
    documents = renders[render_set].documents
    deployment = documents["deployment"]
    namespace, name = deployment["metadata"]["namespace"], deployment["metadata"]["name"]
    leases_namespace = leases_namespace or namespace
    pod_spec = deployment["spec"]["template"]["spec"]
    assert pod_spec["automountServiceAccountToken"] is True
    assert pod_spec["serviceAccountName"] == name
    options = build_parser().parse_args(pod_spec["containers"][0]["args"])
    assert options.geometry_namespace == leases_namespace
    account, role, binding = (documents[k] for k in ("serviceaccount", "role", "rolebinding"))
    assert (account["metadata"]["namespace"], account["metadata"]["name"]) == (namespace, name)
    # The grant lives where the server lists: a Role elsewhere would leave the check blind.
    for obj in (role, binding):
        assert (obj["metadata"]["namespace"], obj["metadata"]["name"]) == (leases_namespace, name)
    granted = {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    assert granted == set(WEBHOOK_LEASE_ACCESS)
    assert all("resourceNames" not in rule for rule in role["rules"])
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": name,
    }
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]


def test_without_the_geometry_check_the_pods_carry_no_token(renders: dict[str, Rendered]) -> None:
    pod_spec = renders["no-geometry"].documents["deployment"]["spec"]["template"]["spec"]
    assert pod_spec["automountServiceAccountToken"] is False
    assert "serviceAccountName" not in pod_spec
    assert build_parser().parse_args(pod_spec["containers"][0]["args"]).geometry_namespace == ""


def _name_selector(webhook: dict[str, Any]) -> dict[str, Any]:
    """The namespaceSelector expression that excludes namespaces by name."""
    expressions: list[dict[str, Any]] = webhook["namespaceSelector"]["matchExpressions"]
    (selector,) = [e for e in expressions if e["key"] == "kubernetes.io/metadata.name"]
    return selector


def test_defaults(renders: dict[str, Rendered], authority: Authority) -> None:
    deployment, service, config = _parts(renders["defaults"])
    assert deployment["metadata"]["namespace"] == "hygon-dcu-system"
    assert deployment["metadata"]["name"] == service["metadata"]["name"] == "hygon-dcu-admission"
    assert deployment["spec"]["replicas"] == 2
    pod_spec = deployment["spec"]["template"]["spec"]
    assert "priorityClassName" not in pod_spec
    assert "imagePullSecrets" not in pod_spec
    # PEM text is encoded for the caBundle field.
    ca_bundle = config["webhooks"][0]["clientConfig"]["caBundle"]
    assert base64.b64decode(ca_bundle).strip() == authority.pem.strip()
    assert "annotations" not in config["metadata"]


def test_custom_values_reach_the_manifests(
    renders: dict[str, Rendered], authority: Authority
) -> None:
    deployment, service, config = _parts(renders["custom"])
    pod_spec = deployment["spec"]["template"]["spec"]
    container = pod_spec["containers"][0]
    assert deployment["metadata"]["namespace"] == "gpu-system"
    assert service["metadata"]["name"] == "dcu-admission"
    assert deployment["spec"]["replicas"] == 3
    assert container["ports"][0]["containerPort"] == 9443
    assert container["imagePullPolicy"] == "Always"
    assert container["resources"]["limits"] == {"cpu": "1", "memory": "256Mi"}
    assert "--log-level=debug" in container["args"]
    assert pod_spec["imagePullSecrets"] == [{"name": "regcred"}, {"name": "mirror"}]
    assert pod_spec["priorityClassName"] == "system-cluster-critical"
    assert pod_spec["nodeSelector"] == {"node-role.kubernetes.io/control-plane": ""}
    assert pod_spec["tolerations"][0]["effect"] == "NoSchedule"
    assert pod_spec["volumes"][0]["secret"]["secretName"] == "dcu-admission-cert"
    webhook = config["webhooks"][0]
    assert webhook["timeoutSeconds"] == 10
    assert _name_selector(webhook)["values"] == [
        "gpu-system",
        "kube-system",
    ]
    # A bundle given as base64 is passed through unchanged.
    assert base64.b64decode(webhook["clientConfig"]["caBundle"]) == authority.pem


def test_cert_manager_injection_replaces_the_bundle(renders: dict[str, Rendered]) -> None:
    config = _parts(renders["cert-manager"])[2]
    assert config["metadata"]["annotations"] == {
        "cert-manager.io/inject-ca-from": "hygon-dcu-system/hygon-dcu-admission"
    }
    assert "caBundle" not in config["webhooks"][0]["clientConfig"]


@pytest.mark.parametrize(
    ("render_set", "says"),
    [("no-ca", "set hygon_dcu_admission_ca_bundle"), ("no-image", "hygon_dcu_admission_image")],
)
def test_missing_required_variable_fails_the_render(
    renders: dict[str, Rendered], render_set: str, says: str
) -> None:
    rendered = renders[render_set]
    assert rendered.returncode != 0
    assert says in rendered.output
