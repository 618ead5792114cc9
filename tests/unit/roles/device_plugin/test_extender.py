"""The scheduler extender and the second scheduler (docs/extender.md): what the role renders with
hygon_dcu_device_plugin_extender_enabled, what it refuses, and that a second run sends the same.

The rendered arguments are parsed and checked by the extender's own flag parser, the scheduler
configuration against the fields kube-scheduler 1.20 declares for it.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import socket
import ssl
import threading
from pathlib import Path
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml
from cryptography import x509
from hygon_dcu_plugin import vocabulary
from hygon_dcu_plugin.extender import main as extender_main
from hygon_dcu_plugin.extender.client_auth import ClientVerifyingReloader
from role_certificates import make_certificate, site_certificate_variables
from role_render import HostOutcome, RoleRun, run_role, run_role_on_hosts

from .conftest import ALONE, EXTENDER_ON, POLICY_ON, SCHEDULER_IMAGE
from .schema_1_20 import fields_missing_in_1_20

NAMESPACE = "hygon-dcu-system"
EXTENDER = "hygon-dcu-extender"
SCHEDULER = vocabulary.SCHEDULER_NAME
EXTENDER_DNS = f"{EXTENDER}.{NAMESPACE}.svc"

# The fields of kubescheduler.config.k8s.io/v1beta1 KubeSchedulerConfiguration, from the json
# tags of k8s.io/kube-scheduler/config/v1beta1/types.go (and the component-base v1alpha1
# LeaderElectionConfiguration, k8s.io/kube-scheduler/config/v1 ExtenderTLSConfig and
# ExtenderManagedResource it uses) of Kubernetes 1.20. A name is a nested schema; a type, a leaf.
V1BETA1: dict[str, Any] = {
    "apiVersion": str,
    "kind": str,
    "leaderElection": {
        "leaderElect": bool,
        "leaseDuration": str,
        "renewDeadline": str,
        "retryPeriod": str,
        "resourceLock": str,
        "resourceName": str,
        "resourceNamespace": str,
    },
    "clientConnection": dict,
    "healthzBindAddress": str,
    "metricsBindAddress": str,
    "enableProfiling": bool,
    "enableContentionProfiling": bool,
    "percentageOfNodesToScore": int,
    "podInitialBackoffSeconds": int,
    "podMaxBackoffSeconds": int,
    "profiles": [{"schedulerName": str, "plugins": dict, "pluginConfig": list}],
    "extenders": [
        {
            "urlPrefix": str,
            "filterVerb": str,
            "preemptVerb": str,
            "prioritizeVerb": str,
            "weight": int,
            "bindVerb": str,
            "enableHTTPS": bool,
            "tlsConfig": {
                "insecure": bool,
                "serverName": str,
                "certFile": str,
                "keyFile": str,
                "caFile": str,
                "certData": str,
                "keyData": str,
                "caData": str,
            },
            "httpTimeout": str,
            "nodeCacheCapable": bool,
            "managedResources": [{"name": str, "ignoredByScheduler": bool}],
            "ignorable": bool,
        }
    ],
}


def _undeclared(value: Any, schema: Any, path: str) -> list[str]:
    """Every field of value the schema does not declare, or of another type, recursively."""
    if isinstance(schema, dict):
        if not isinstance(value, dict):
            return [f"{path}: not a mapping"]
        found = []
        for key, inner in value.items():
            if key not in schema:
                found.append(f"{path}.{key}")
            else:
                found += _undeclared(inner, schema[key], f"{path}.{key}")
        return found
    if isinstance(schema, list):
        if not isinstance(value, list):
            return [f"{path}: not a list"]
        return [
            bad
            for i, item in enumerate(value)
            for bad in _undeclared(item, schema[0], f"{path}[{i}]")
        ]
    # bool is an int in Python: a weight of true is as wrong as a weight of "10"
    if not isinstance(value, schema) or (schema is int and isinstance(value, bool)):
        return [f"{path}: {type(value).__name__}, not {schema.__name__}"]
    return []


def _config(run: RoleRun) -> dict[str, Any]:
    (text,) = run.find("ConfigMap", SCHEDULER)["data"].values()
    config = yaml.safe_load(text)
    assert isinstance(config, dict)
    return config


def _pod_spec(run: RoleRun, name: str) -> dict[str, Any]:
    spec: dict[str, Any] = run.find("Deployment", name)["spec"]["template"]["spec"]
    return spec


def _ours(obj: dict[str, Any]) -> bool:
    return bool(obj["metadata"]["name"].startswith((EXTENDER, SCHEDULER)))


def test_disabled_by_default(default_render: RoleRun) -> None:
    assert [obj for obj in default_render.objects() if _ours(obj)] == []
    assert {obj["metadata"].get("namespace", NAMESPACE) for obj in default_render.objects()} == {
        NAMESPACE
    }


def test_extender_and_scheduler_after_everything_else(
    extender_render: RoleRun, default_render: RoleRun
) -> None:
    objects = extender_render.objects()
    others = [(obj["kind"], obj["metadata"]["name"]) for obj in objects if not _ours(obj)]
    # everything else first, as without the extender
    assert others == [(obj["kind"], obj["metadata"]["name"]) for obj in default_render.objects()]
    ours = [(obj["kind"], obj["metadata"]["name"]) for obj in objects[len(others) :]]
    assert ours == [
        # the extender's account before its token (the API server deletes a token Secret
        # whose account does not exist)
        ("ServiceAccount", EXTENDER),
        ("Secret", f"{EXTENDER}-token"),
        ("Secret", f"{EXTENDER}-tls"),
        ("Secret", f"{EXTENDER}-client"),
        ("ServiceAccount", SCHEDULER),
        ("ClusterRole", EXTENDER),
        ("ClusterRoleBinding", EXTENDER),
        ("Role", EXTENDER),
        ("RoleBinding", EXTENDER),
        ("ClusterRoleBinding", f"{SCHEDULER}-as-kube-scheduler"),
        ("ClusterRoleBinding", f"{SCHEDULER}-as-volume-scheduler"),
        ("RoleBinding", f"{SCHEDULER}-authentication-reader"),
        ("Role", SCHEDULER),
        ("RoleBinding", SCHEDULER),
        ("ConfigMap", SCHEDULER),
        # no Service for the verbs: only the scheduler in the same pod calls the extender;
        # Prometheus' headless one to its probes' port
        ("Service", f"{EXTENDER}-metrics"),
        # last: what it mounts and is granted exists when its pod starts
        ("Deployment", SCHEDULER),
    ]


def test_scheduler_configuration_is_v1beta1_with_the_products_names(
    extender_render: RoleRun,
) -> None:
    config = _config(extender_render)
    assert _undeclared(config, V1BETA1, "config") == []
    assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1beta1"
    assert config["kind"] == "KubeSchedulerConfiguration"
    assert config["profiles"] == [{"schedulerName": vocabulary.SCHEDULER_NAME}]
    assert config["leaderElection"] == {
        "leaderElect": True,
        "resourceLock": "leases",
        # where kube-scheduler keeps its lock, not beside the Leases every plugin may update
        "resourceNamespace": "kube-system",
        "resourceName": SCHEDULER,
    }
    (extender,) = config["extenders"]
    tls = extender.pop("tlsConfig")
    assert extender == {
        # the extender in the same pod (docs/dev/extender.md, "One process pair")
        "urlPrefix": "https://127.0.0.1:8443",
        "filterVerb": "filter",
        "prioritizeVerb": "prioritize",
        "bindVerb": "bind",
        "weight": 10,
        "nodeCacheCapable": True,
        "enableHTTPS": True,
        "httpTimeout": "30s",
        "ignorable": False,
        # the scheduler counts the family; the size resources no node advertises are the
        # extender's alone
        "managedResources": [
            {"name": vocabulary.FAMILY, "ignoredByScheduler": False},
            {"name": vocabulary.MEMORY_MIB, "ignoredByScheduler": True},
            {"name": vocabulary.COMPUTE_UNITS, "ignoredByScheduler": True},
            # Slices: counted by the scheduler, sized by the node (docs/dev/logical-slices.md).
            {"name": vocabulary.SLICED, "ignoredByScheduler": False},
            {"name": vocabulary.SLICE_MEMORY_MIB, "ignoredByScheduler": True},
            {"name": vocabulary.SLICE_COMPUTE_UNITS, "ignoredByScheduler": True},
        ],
    }
    assert sorted(tls) == ["caData", "certFile", "keyFile", "serverName"]


def test_the_schema_check_finds_a_misspelt_field(extender_render: RoleRun) -> None:
    # the check above is strict with this configuration (otherwise it proves little)
    config = _config(extender_render)
    config["extenders"][0]["managedResource"] = config["extenders"][0].pop("managedResources")
    config["extenders"][0]["weight"] = "10"
    assert _undeclared(config, V1BETA1, "config") == [
        "config.extenders[0].weight: str, not int",
        "config.extenders[0].managedResource",
    ]


def _container(run: RoleRun, name: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = [
        c for c in _pod_spec(run, SCHEDULER)["containers"] if c["name"] == name
    ]
    (container,) = found
    return container


def test_scheduler_trusts_the_extenders_certificate(extender_render: RoleRun) -> None:
    (extender,) = _config(extender_render)["extenders"]
    trusted = base64.b64decode(extender["tlsConfig"]["caData"], validate=True)
    secret = extender_render.find("Secret", f"{EXTENDER}-tls")
    assert secret["type"] == "kubernetes.io/tls"
    assert trusted == base64.b64decode(secret["data"]["ca.crt"])
    (ca,) = x509.load_pem_x509_certificates(trusted)
    cert = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    cert.verify_directly_issued_by(ca)
    # verified under the name its certificate carries
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert extender["tlsConfig"]["serverName"] == EXTENDER_DNS
    assert EXTENDER_DNS in names.get_values_for_type(x509.DNSName)
    # the URL in the pod reaches the extender's port
    container = _container(extender_render, "extender")
    (named,) = [p for p in container["ports"] if p["name"] == "extender"]
    options = extender_main.build_parser().parse_args(container["args"])
    assert named["containerPort"] == options.port
    assert extender["urlPrefix"] == f"https://127.0.0.1:{options.port}"


def _mounted(run: RoleRun, container: str, directory: str) -> dict[str, Any]:
    """The volume mounted at ``directory`` in the container."""
    spec = _pod_spec(run, SCHEDULER)
    (mount,) = [
        m for m in _container(run, container)["volumeMounts"] if m["mountPath"] == directory
    ]
    assert mount["readOnly"] is True
    (volume,) = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    found: dict[str, Any] = volume
    return found


def test_only_the_scheduler_beside_it_can_call_the_extender(
    extender_render: RoleRun, tmp_path: Path
) -> None:
    (extender,) = _config(extender_render)["extenders"]
    tls = extender["tlsConfig"]
    options = extender_main.build_parser().parse_args(
        _container(extender_render, "extender")["args"]
    )
    secret = extender_render.find("Secret", f"{EXTENDER}-client")
    assert secret["type"] == "kubernetes.io/tls"
    # The scheduler mounts the client certificate and key, the extender the client CA alone.
    client = _mounted(extender_render, "kube-scheduler", str(Path(tls["certFile"]).parent))
    assert Path(tls["keyFile"]).parent == Path(tls["certFile"]).parent
    assert client["secret"]["secretName"] == secret["metadata"]["name"]
    assert {i["key"]: i["path"] for i in client["secret"]["items"]} == {
        "tls.crt": Path(tls["certFile"]).name,
        "tls.key": Path(tls["keyFile"]).name,
    }
    authority = _mounted(extender_render, "extender", str(Path(options.client_ca_file).parent))
    assert authority["secret"]["secretName"] == secret["metadata"]["name"]
    assert authority["secret"]["items"] == [
        {"key": "ca.crt", "path": Path(options.client_ca_file).name}
    ]
    # A real handshake with what was rendered: the extender's own reloader requiring the
    # client CA, the scheduler's certificate and trust; a client without it is refused.
    files = {}
    for name, data in (
        ("tls.crt", extender_render.find("Secret", f"{EXTENDER}-tls")["data"]["tls.crt"]),
        ("tls.key", extender_render.find("Secret", f"{EXTENDER}-tls")["data"]["tls.key"]),
        ("client-ca.crt", secret["data"]["ca.crt"]),
        ("client.crt", secret["data"]["tls.crt"]),
        ("client.key", secret["data"]["tls.key"]),
    ):
        files[name] = tmp_path / name
        files[name].write_bytes(base64.b64decode(data))
    server = ClientVerifyingReloader(
        str(files["tls.crt"]), str(files["tls.key"]), str(files["client-ca.crt"])
    ).context()
    trusted = base64.b64decode(tls["caData"]).decode()
    scheduler = ssl.create_default_context(cadata=trusted)
    scheduler.load_cert_chain(str(files["client.crt"]), str(files["client.key"]))
    assert _handshake(server, scheduler, tls["serverName"]) == ""
    stranger = ssl.create_default_context(cadata=trusted)
    assert "certificate" in _handshake(server, stranger, tls["serverName"])


def _handshake(server: ssl.SSLContext, client: ssl.SSLContext, name: str) -> str:
    """Handshake and one byte each way over a socket pair: "" or the server's error."""
    ours, theirs = socket.socketpair()
    errors: list[str] = []

    def serve() -> None:
        try:
            with server.wrap_socket(ours, server_side=True) as tls_socket:
                tls_socket.sendall(b"x")
                tls_socket.recv(1)
        except (ssl.SSLError, OSError) as error:
            errors.append(str(error))

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        with client.wrap_socket(theirs, server_hostname=name) as tls_socket:
            tls_socket.recv(1)
            tls_socket.sendall(b"y")
    except (ssl.SSLError, OSError):
        pass
    thread.join(10)
    return errors[0] if errors else ""


def test_webhook_and_extender_have_certificates_of_their_own(extender_render: RoleRun) -> None:
    def cert_and_ca(secret: str) -> tuple[x509.Certificate, x509.Certificate]:
        data = extender_render.find("Secret", secret)["data"]
        (ca,) = x509.load_pem_x509_certificates(base64.b64decode(data["ca.crt"]))
        return x509.load_pem_x509_certificate(base64.b64decode(data["tls.crt"])), ca

    webhook_cert, webhook_ca = cert_and_ca("hygon-dcu-admission-tls")
    extender_cert, extender_ca = cert_and_ca(f"{EXTENDER}-tls")
    assert webhook_ca != extender_ca
    assert webhook_cert.public_key() != extender_cert.public_key()
    names = webhook_cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert EXTENDER_DNS not in names.get_values_for_type(x509.DNSName)


def test_one_pod_runs_the_scheduler_and_the_extender_once(extender_render: RoleRun) -> None:
    deployment = extender_render.find("Deployment", SCHEDULER)
    # reservations are held in memory: never two extenders, not even during a rollout
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    spec = _pod_spec(extender_render, SCHEDULER)
    assert spec["serviceAccountName"] == SCHEDULER
    assert spec["priorityClassName"] == "system-cluster-critical"
    assert [c["name"] for c in spec["containers"]] == ["kube-scheduler", "extender"]
    for container in spec["containers"]:
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert spec["securityContext"]["runAsNonRoot"] is True


def test_extender_runs_with_its_own_flags(extender_render: RoleRun) -> None:
    spec = _pod_spec(extender_render, SCHEDULER)
    container = _container(extender_render, "extender")
    plugin = extender_render.find("DaemonSet")["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == plugin["image"]
    assert container["command"] == ["hygon-dcu-plugin", "extender"]
    # the extender's own parser and start-up checks accept what the role passes
    options = extender_main.build_parser().parse_args(container["args"])
    extender_main.check(options)
    assert (options.namespace, options.policy, options.reservation_seconds) == (
        NAMESPACE,
        "binpack",
        300.0,
    )
    (variable,) = [env for env in container["env"] if env["name"] == "POD_NAMESPACE"]
    assert variable["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    # the certificate files are those of the Secret's volume
    directory = str(Path(options.cert_file).parent)
    volume = _mounted(extender_render, "extender", directory)
    assert volume["secret"]["secretName"] == f"{EXTENDER}-tls"
    assert options.cert_file == f"{directory}/tls.crt"
    assert options.key_file == f"{directory}/tls.key"
    # and the client CA (test above) and its own token (test_rbac.py)
    assert len(container["volumeMounts"]) == 3
    assert spec["serviceAccountName"] == SCHEDULER
    # the probes go to the port that asks no client certificate
    (probes,) = [p for p in container["ports"] if p["containerPort"] == options.probe_port]
    assert options.client_ca_file and options.probe_port != options.port
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {
            "path": "/healthz",
            "port": probes["name"],
            "scheme": "HTTPS",
        }


def test_scheduler_runs_the_sites_image_with_the_configmap(extender_render: RoleRun) -> None:
    deployment = extender_render.find("Deployment", SCHEDULER)
    spec = _pod_spec(extender_render, SCHEDULER)
    container = _container(extender_render, "kube-scheduler")
    assert container["image"] == SCHEDULER_IMAGE
    configmap = extender_render.find("ConfigMap", SCHEDULER)
    ((key, text),) = configmap["data"].items()
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == "config"]
    (volume,) = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    assert volume["configMap"]["name"] == SCHEDULER
    assert container["command"] == ["kube-scheduler", f"--config={mount['mountPath']}/{key}"]
    # kube-scheduler's secure port, whose /healthz needs no credentials
    (port,) = container["ports"]
    assert port["containerPort"] == 10259
    assert container["livenessProbe"]["httpGet"] == {
        "path": "/healthz",
        "port": port["name"],
        "scheme": "HTTPS",
    }
    # a new configuration or client certificate rolls the pod: kube-scheduler reads both once
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    client = extender_render.find("Secret", f"{EXTENDER}-client")["data"]["tls.crt"]
    assert (
        annotations[vocabulary.CONFIG_HASH_ANNOTATION]
        == hashlib.sha256((text + client).encode()).hexdigest()
    )


def test_options_reach_the_extender_and_the_scheduler(
    render_dir: Path, extender_render: RoleRun
) -> None:
    run = run_role(
        render_dir,
        **EXTENDER_ON,
        hygon_dcu_device_plugin_extender_policy="spread",
        hygon_dcu_device_plugin_extender_weight="3",  # string form, as from a survey
        hygon_dcu_device_plugin_extender_reservation_seconds=120,
        hygon_dcu_device_plugin_scheduler_config_api_version="kubescheduler.config.k8s.io/v1",
        hygon_dcu_device_plugin_log_level="debug",
        hygon_dcu_device_plugin_image_pull_secrets=["site-registry"],
    )
    assert run.returncode == 0, run.output
    options = extender_main.build_parser().parse_args(_container(run, "extender")["args"])
    extender_main.check(options)
    assert (options.policy, options.reservation_seconds, options.log_level) == (
        "spread",
        120.0,
        "debug",
    )
    config = _config(run)
    assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert config["extenders"][0]["weight"] == 3
    assert _pod_spec(run, SCHEDULER)["imagePullSecrets"] == [{"name": "site-registry"}]
    template = run.find("Deployment", SCHEDULER)["spec"]["template"]
    default = extender_render.find("Deployment", SCHEDULER)["spec"]["template"]
    assert template["metadata"]["annotations"] != default["metadata"]["annotations"]


UNUSABLE_INPUTS: dict[str, dict[str, Any]] = {
    "no-scheduler-image": {"hygon_dcu_device_plugin_extender_enabled": True},
    "scheduler-image-not-a-reference": {
        **EXTENDER_ON,
        "hygon_dcu_device_plugin_scheduler_image": "kube-scheduler v1.20",
    },
    "weight-0": {**EXTENDER_ON, "hygon_dcu_device_plugin_extender_weight": 0},
    "negative-reservation": {
        **EXTENDER_ON,
        "hygon_dcu_device_plugin_extender_reservation_seconds": -1,
    },
}


@pytest.fixture(scope="module")
def refusals(tmp_path_factory: pytest.TempPathFactory) -> dict[str, HostOutcome]:
    """This module's refusals, each a host of one playbook run."""
    return run_role_on_hosts(
        tmp_path_factory.mktemp("refusals"),
        {
            **UNUSABLE_INPUTS,
            "partial-extender-certificate": {
                **EXTENDER_ON,
                "hygon_dcu_device_plugin_extender_tls_cert": make_certificate(EXTENDER_DNS)[0],
            },
            "scheduler-name-not-a-name": {
                **ALONE,
                "hygon_dcu_device_plugin_extender_scheduler_name": "My Sched",
            },
        },
    )


@pytest.mark.parametrize("case", UNUSABLE_INPUTS)
def test_enabled_without_a_usable_scheduler_image_is_refused(
    refusals: dict[str, HostOutcome], case: str
) -> None:
    refused = refusals[case]
    assert refused.failed, refused.output
    assert (
        "hygon_dcu_device_plugin_extender_enabled needs hygon_dcu_device_plugin_scheduler_image"
        in (refused.message)
    )
    assert not refused.render_dir.exists()


def test_second_run_sends_the_same_objects(extender_render: RoleRun) -> None:
    before = {path.name: path.read_bytes() for path in extender_render.render_dir.iterdir()}
    # the role's own certificates, read back from the first render's Secrets
    predicted = run_role(
        extender_render.render_dir, check=True, own_certificates=False, **EXTENDER_ON
    )
    assert predicted.returncode == 0, predicted.output
    assert predicted.changed == 0, predicted.output
    second = run_role(extender_render.render_dir, own_certificates=False, **EXTENDER_ON)
    assert second.returncode == 0, second.output
    assert second.changed == 0, second.output
    assert {path.name: path.read_bytes() for path in extender_render.render_dir.iterdir()} == before


def test_supplied_extender_certificate_is_used_as_given(render_dir: Path) -> None:
    cert, key, ca = make_certificate(EXTENDER_DNS)
    run = run_role(
        render_dir,
        own_certificates=False,  # this test's certificate alone
        **EXTENDER_ON,
        hygon_dcu_device_plugin_extender_tls_cert=cert,
        hygon_dcu_device_plugin_extender_tls_key=key,
        hygon_dcu_device_plugin_extender_tls_ca=ca,
    )
    assert run.returncode == 0, run.output
    data = run.find("Secret", f"{EXTENDER}-tls")["data"]
    assert base64.b64decode(data["tls.crt"]).decode() == cert
    assert base64.b64decode(data["tls.key"]).decode() == key
    (extender,) = _config(run)["extenders"]
    assert base64.b64decode(extender["tlsConfig"]["caData"]).decode() == ca
    assert key not in run.output
    # the webhook's certificate is still the role's own
    webhook = run.find("Secret", "hygon-dcu-admission-tls")["data"]
    assert base64.b64decode(webhook["tls.crt"]).decode() != cert


def _without_certificate_material(obj: dict[str, Any]) -> dict[str, Any]:
    """obj but for the certificates, keys and CAs in it, and the hash over them."""
    obj = copy.deepcopy(obj)
    kind, name = obj["kind"], obj["metadata"]["name"]
    if kind == "Secret" and obj.get("type") == "kubernetes.io/tls":
        obj["data"] = sorted(obj["data"])
    elif kind == "ValidatingWebhookConfiguration":
        for webhook in obj["webhooks"]:
            del webhook["clientConfig"]["caBundle"]
    elif (kind, name) == ("ConfigMap", SCHEDULER):
        ((key, text),) = obj["data"].items()
        config = yaml.safe_load(text)
        for extender in config["extenders"]:
            del extender["tlsConfig"]["caData"]
        obj["data"] = {key: config}
    elif (kind, name) == ("Deployment", SCHEDULER):
        del obj["spec"]["template"]["metadata"]["annotations"][vocabulary.CONFIG_HASH_ANNOTATION]
    return obj


def test_site_certificates_change_only_the_certificate_material(
    render_dir: Path, extender_render: RoleRun
) -> None:
    # Most renders of these tests take a site's certificates (render.run_role) to skip minting
    # them: they must see the objects the role's own certificates give, but for those.
    run = run_role(render_dir, own_certificates=True, **EXTENDER_ON)
    assert run.returncode == 0, run.output
    site = site_certificate_variables()
    for secret, service in (
        ("hygon-dcu-admission-tls", "webhook"),
        (f"{EXTENDER}-tls", "extender"),
    ):
        data = run.find("Secret", secret)["data"]
        assert (
            base64.b64decode(data["tls.crt"]).decode()
            == site[f"hygon_dcu_device_plugin_{service}_tls_cert"]
        )
    assert [_without_certificate_material(obj) for obj in run.objects()] == [
        _without_certificate_material(obj) for obj in extender_render.objects()
    ]


def test_partial_extender_certificate_is_refused(refusals: dict[str, HostOutcome]) -> None:
    refused = refusals["partial-extender-certificate"]
    assert refused.failed, refused.output
    assert "hygon_dcu_device_plugin_extender_tls_cert, _tls_key and _tls_ca go together" in (
        refused.message
    )
    assert not refused.render_dir.exists()


@pytest.mark.parametrize("version", [f"1.{minor}" for minor in range(28, 38)])
def test_every_manifest_validates_strictly(extender_render: RoleRun, version: str) -> None:
    for obj in extender_render.objects():
        kubernetes_validate.validate(obj, version, strict=True)


def test_1_20_rendering_has_only_fields_1_20_declares(render_dir: Path) -> None:
    run = run_role(render_dir, **EXTENDER_ON, hygon_dcu_kubernetes_version="1.20")
    assert run.returncode == 0, run.output
    assert any(_ours(obj) for obj in run.objects())
    for obj in run.objects():
        assert fields_missing_in_1_20(obj) == [], obj["kind"]


def test_absent_removes_the_scheduler_and_the_extender_first(render_dir: Path) -> None:
    # whether or not they are enabled now: an earlier run may have deployed them
    run = run_role(render_dir, hygon_dcu_device_plugin_state="absent")
    assert run.returncode == 0, run.output
    removal = yaml.safe_load((render_dir / "removal.yaml").read_text())
    order = [(item["kind"], item.get("namespace", ""), item["name"]) for item in removal]
    ours = [entry for entry in order if entry[2].startswith((EXTENDER, SCHEDULER))]
    assert order[: len(ours)] == ours
    # the pod first, so nothing it uses goes while it runs
    assert ours[0] == ("Deployment", NAMESPACE, SCHEDULER)
    assert ("RoleBinding", "kube-system", f"{SCHEDULER}-authentication-reader") in ours
    # every object an enabled run applies, either way and with its NetworkPolicy, is in the list
    applied = {
        (obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
        for mode, inputs in (("beside", EXTENDER_ON), ("alone", ALONE))
        for obj in run_role(
            render_dir.with_name(f"applied-{mode}"), **inputs, **POLICY_ON
        ).objects()
        if _ours(obj)
    }
    # and the scheduler's lock, and what earlier versions kept in the runtime's namespace
    assert set(ours) - applied == {
        ("Lease", "kube-system", SCHEDULER),
        ("Lease", NAMESPACE, SCHEDULER),
        ("Role", NAMESPACE, SCHEDULER),
        ("RoleBinding", NAMESPACE, SCHEDULER),
    }
    assert applied < set(ours)


def test_for_the_default_scheduler_the_extender_runs_alone(render_dir: Path) -> None:
    run = run_role(render_dir, **ALONE)  # no scheduler image needed
    assert run.returncode == 0, run.output
    ours = [(obj["kind"], obj["metadata"]["name"]) for obj in run.objects() if _ours(obj)]
    assert ours == [
        ("ServiceAccount", EXTENDER),  # its pod's own: no token Secret
        ("Secret", f"{EXTENDER}-tls"),
        ("Secret", f"{EXTENDER}-client"),
        ("ClusterRole", EXTENDER),
        ("ClusterRoleBinding", EXTENDER),
        ("Role", EXTENDER),
        ("RoleBinding", EXTENDER),
        ("Service", EXTENDER),
        ("Service", f"{EXTENDER}-metrics"),
        ("Deployment", EXTENDER),
    ]
    # its own account, bound to the extender's RBAC and nothing of a scheduler's
    for kind in ("ClusterRoleBinding", "RoleBinding"):
        (subject,) = run.find(kind, EXTENDER)["subjects"]
        assert (subject["kind"], subject["name"]) == ("ServiceAccount", EXTENDER)
    deployment = run.find("Deployment", EXTENDER)
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    spec = deployment["spec"]["template"]["spec"]
    assert spec["serviceAccountName"] == EXTENDER
    (container,) = spec["containers"]
    beside = _container(run_role(render_dir.with_name("beside"), **EXTENDER_ON), "extender")
    # the same container, but for its arguments and the token Secret it needs beside the
    # second scheduler only (its pod's token is its own here)
    mounts = [m for m in beside["volumeMounts"] if m["name"] != "extender-token"]
    assert container == beside | {"args": container["args"], "volumeMounts": mounts}
    options = extender_main.build_parser().parse_args(container["args"])
    extender_main.check(options)
    # it binds the default scheduler's pods, and answers only the client certificate made
    # for that scheduler
    assert options.scheduler_name == "default-scheduler"
    assert options.client_ca_file
    client = run.find("Secret", f"{EXTENDER}-client")["data"]["tls.crt"]
    cert = x509.load_pem_x509_certificate(base64.b64decode(client))
    assert cert.subject.rfc4514_string() == "CN=default-scheduler.hygon-dcu-system.svc"
    usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == [x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH]
    # the Service reaches the verbs' port under the name the certificate carries
    service = run.find("Service", EXTENDER)
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    (port,) = service["spec"]["ports"]
    assert port["port"] == 443
    (named,) = [p for p in container["ports"] if p["name"] == port["targetPort"]]
    assert named["containerPort"] == options.port
    assert f"{EXTENDER}.{NAMESPACE}.svc" == EXTENDER_DNS


def test_a_scheduler_name_that_is_not_one_is_refused(refusals: dict[str, HostOutcome]) -> None:
    refused = refusals["scheduler-name-not-a-name"]
    assert refused.failed, refused.output
    assert "hygon_dcu_device_plugin_extender_scheduler_name a scheduler name" in refused.message
    assert '"My Sched"' in refused.message
    assert not refused.render_dir.exists()
