"""What the role applies: valid for every supported Kubernetes, and the contract's shape."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml
from hygon_dcu_plugin.config import settings_from
from role_render import REPO, RoleRun

# The default rendering (for 1.30) against every schema kubernetes-validate ships from 1.28 on;
# test_versions.py validates the rendering for each version.
VERSIONS = [f"1.{minor}" for minor in range(28, 38)]


def test_renders_every_object_in_apply_order(default_render: RoleRun) -> None:
    kinds = [(obj["kind"], obj["metadata"]["name"]) for obj in default_render.objects()]
    assert kinds == [
        ("Namespace", "hygon-dcu-system"),
        ("ServiceAccount", "hygon-dcu-device-plugin"),
        ("ClusterRole", "hygon-dcu-device-plugin"),
        ("ClusterRoleBinding", "hygon-dcu-device-plugin"),
        # its node's geometry Lease, in its own namespace (docs/dev/extender.md)
        ("Role", "hygon-dcu-device-plugin"),
        ("RoleBinding", "hygon-dcu-device-plugin"),
        ("ConfigMap", "hygon-dcu-device-plugin"),
        ("DaemonSet", "hygon-dcu-device-plugin"),
        ("Service", "hygon-dcu-device-plugin-metrics"),
        ("Secret", "hygon-dcu-admission-tls"),
        # the webhook lists the geometry Leases, nothing else
        ("ServiceAccount", "hygon-dcu-admission"),
        ("Role", "hygon-dcu-admission"),
        ("RoleBinding", "hygon-dcu-admission"),
        ("Service", "hygon-dcu-admission"),
        ("Deployment", "hygon-dcu-admission"),
        ("PodDisruptionBudget", "hygon-dcu-admission"),
        # last: never points at a webhook that is not rolled out yet
        ("ValidatingWebhookConfiguration", "hygon-dcu-admission"),
    ]


@pytest.mark.parametrize("version", VERSIONS)
def test_every_manifest_validates_strictly(default_render: RoleRun, version: str) -> None:
    objects = default_render.objects()
    assert objects
    for obj in objects:
        # raises ValidationError naming the field on any schema or unknown-field error
        kubernetes_validate.validate(obj, version, strict=True)


def test_strict_validation_rejects_an_unknown_field(default_render: RoleRun) -> None:
    # the validator is really strict with our objects (otherwise the test above proves little)
    daemonset = default_render.find("DaemonSet")
    daemonset["spec"]["template"]["spec"]["hostPid"] = False
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(daemonset, VERSIONS[0], strict=True)


def _pod_spec(run: RoleRun) -> dict[str, Any]:
    daemonset = run.find("DaemonSet", "hygon-dcu-device-plugin")
    spec: dict[str, Any] = daemonset["spec"]["template"]["spec"]
    return spec


def test_daemonset_runs_on_hygon_nodes_unless_parked(default_render: RoleRun) -> None:
    spec = _pod_spec(default_render)
    assert spec["nodeSelector"] == {"hygon.com/dcu.present": "true"}
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"] == [
        {
            "matchExpressions": [
                {"key": "hygon.com/dcu.device-plugin", "operator": "NotIn", "values": ["parked"]}
            ]
        }
    ]
    assert spec["hostPID"] is False
    labels = default_render.find("DaemonSet")["spec"]["template"]["metadata"]["labels"]
    assert labels["app.kubernetes.io/name"] == "hygon-dcu-device-plugin"


def test_daemonset_mounts(default_render: RoleRun) -> None:
    spec = _pod_spec(default_render)
    volumes = {volume["name"]: volume for volume in spec["volumes"]}
    (container,) = spec["containers"]
    mounts = {
        mount["mountPath"]: (
            volumes[mount["name"]].get("hostPath", {}).get("path"),
            volumes[mount["name"]].get("hostPath", {}).get("type"),
            mount.get("readOnly", False),
        )
        for mount in container["volumeMounts"]
    }
    expected = {
        # directories, never the socket files: a new kubelet deletes and recreates the sockets
        "/var/lib/kubelet/device-plugins": ("/var/lib/kubelet/device-plugins", "Directory", False),
        "/var/lib/kubelet/pod-resources": ("/var/lib/kubelet/pod-resources", "Directory", True),
        "/dev": ("/dev", "Directory", False),
        "/sys": ("/sys", "Directory", True),
        # the instance-creating process writes the driver's registry
        "/etc/dmi_mig_config": ("/etc/dmi_mig_config", "DirectoryOrCreate", False),
        "/opt/hyhal": ("/opt/hyhal", "Directory", True),
        # logical slices: the driver writes each vdev's conf, the plugin the exporter's marks
        "/etc/vdev": ("/etc/vdev", "DirectoryOrCreate", False),
        "/var/lib/hygon-dcu": ("/var/lib/hygon-dcu", "DirectoryOrCreate", False),
        "/etc/hygon-dcu": (None, None, True),
        "/tmp": (None, None, False),
    }
    assert mounts == expected
    assert volumes["config"]["configMap"]["name"] == "hygon-dcu-device-plugin"


def test_plugin_knows_its_namespace(default_render: RoleRun) -> None:
    # the namespace of its geometry Lease, where its Role grants it Leases
    (container,) = _pod_spec(default_render)["containers"]
    (variable,) = [env for env in container["env"] if env["name"] == "POD_NAMESPACE"]
    assert variable["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    role = default_render.find("Role", "hygon-dcu-device-plugin")
    assert (
        role["metadata"]["namespace"] == default_render.find("DaemonSet")["metadata"]["namespace"]
    )


def test_plugin_reads_the_configmap(default_render: RoleRun) -> None:
    (container,) = _pod_spec(default_render)["containers"]
    configmap = default_render.find("ConfigMap")
    (file_name,) = configmap["data"]
    assert f"--config=/etc/hygon-dcu/{file_name}" in container["args"]
    assert container["args"][0] == "serve"


def test_webhook_uses_the_same_image_and_the_generated_secret(default_render: RoleRun) -> None:
    (plugin,) = _pod_spec(default_render)["containers"]
    deployment = default_render.find("Deployment", "hygon-dcu-admission")
    (webhook,) = deployment["spec"]["template"]["spec"]["containers"]
    # the default is the tag plugin_image/tools/build_image.sh gives a build of this version
    version = yaml.safe_load((REPO / "galaxy.yml").read_text())["version"]
    assert webhook["image"] == plugin["image"] == f"localhost/hygon-dcu-plugin:{version}"
    secret_volumes = [
        volume["secret"]["secretName"]
        for volume in deployment["spec"]["template"]["spec"]["volumes"]
        if "secret" in volume
    ]
    assert secret_volumes == [default_render.find("Secret")["metadata"]["name"]]


def test_namespace_admits_the_privileged_plugin(default_render: RoleRun) -> None:
    labels = default_render.find("Namespace")["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "privileged"
    (container,) = _pod_spec(default_render)["containers"]
    assert container["securityContext"]["privileged"] is True


def test_plugin_accepts_the_configmap(default_render: RoleRun, tmp_path: Path) -> None:
    # The runtime refuses unknown keys and bad values: load the file the way `serve` does.
    (content,) = default_render.find("ConfigMap")["data"].values()
    config_file = tmp_path / "config.yaml"
    config_file.write_text(content)
    args = argparse.Namespace(config=str(config_file))
    settings = settings_from(args)
    assert settings.host_root == "/"
    assert settings.device_plugin_dir == "/var/lib/kubelet/device-plugins"
    assert settings.grants_dir == "/var/lib/hygon-dcu/grants"
    assert settings.policy == "pack"
    # every directory the plugin writes is a mount, since the root filesystem is read-only
    (container,) = _pod_spec(default_render)["containers"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    writable = [m["mountPath"] for m in container["volumeMounts"] if not m.get("readOnly")]
    for path in (settings.device_plugin_dir, settings.grants_dir, settings.lock_dir):
        assert any(path == mount or path.startswith(mount + "/") for mount in writable), path
    # the probes reach the health server the config starts
    port = int(settings.health_address.rpartition(":")[2])
    (health_port,) = [p for p in container["ports"] if p["name"] == "health"]
    assert health_port["containerPort"] == port
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
