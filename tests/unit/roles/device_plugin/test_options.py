"""Options that change the manifests: simulated node, /opt/dtk, metrics, the config file's types."""

from __future__ import annotations

import argparse
import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from hygon_dcu_plugin.config import settings_from
from role_render import HostOutcome, RoleRun, run_role, run_role_on_hosts

SIM_ROOT = "/var/lib/hygon-dcu-sim/node"
SIM_LIBRARY_DIR = "/srv/hygon-dcu/tests/simulator/build"
# The default ConfigMap, byte for byte: its hash is in the pod template, so any change (a
# number rendered as a string by another ansible-core, a new key) rolls every plugin pod.
DEFAULT_CONFIG = """device_plugin_dir: /var/lib/kubelet/device-plugins
grace_seconds: 30.0
grants_dir: /var/lib/hygon-dcu/grants
health_address: 0.0.0.0:9410
host_root: /
lock_dir: /var/lib/hygon-dcu/locks
log_level: info
metrics_address: 127.0.0.1:9411
pod_resources_socket: /var/lib/kubelet/pod-resources/kubelet.sock
policy: pack
resync_seconds: 30.0
"""


def _config_text(run: RoleRun) -> str:
    (content,) = run.find("ConfigMap")["data"].values()
    return str(content)


def _settings(run: RoleRun, tmp_path: Path) -> Any:
    config_file = tmp_path / "config.yaml"
    config_file.write_text(_config_text(run))
    return settings_from(argparse.Namespace(config=str(config_file)))


@pytest.fixture(scope="module")
def simulated(tmp_path_factory: pytest.TempPathFactory) -> RoleRun:
    run = run_role(
        tmp_path_factory.mktemp("simulated") / "out",
        hygon_dcu_device_plugin_simulated_node={"root": SIM_ROOT, "library_dir": SIM_LIBRARY_DIR},
    )
    assert run.returncode == 0, run.output
    return run


def test_config_types_are_the_same_on_every_ansible_core(default_render: RoleRun) -> None:
    text = _config_text(default_render)
    config = yaml.safe_load(text)
    # Exactly float (not an int, not a string): the hash of the text must not change with the
    # controller's ansible-core.
    assert isinstance(config["grace_seconds"], float)
    assert isinstance(config["resync_seconds"], float)
    assert isinstance(config["health_address"], str)
    assert text == DEFAULT_CONFIG


def test_simulated_node_serves_the_simulator(
    simulated: RoleRun, default_render: RoleRun, tmp_path: Path
) -> None:
    settings = _settings(simulated, tmp_path)
    assert settings.host_root == SIM_ROOT
    assert settings.answer_root == SIM_ROOT
    assert settings.library_path == f"{SIM_LIBRARY_DIR}/libhydmi_mig.so.1"
    spec = simulated.find("DaemonSet")["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    assert {"name": "HYDMI_SIM_ROOT", "value": SIM_ROOT} in container["env"]
    volumes = {volume["name"]: volume for volume in spec["volumes"]}
    mounts = {
        mount["mountPath"]: (volumes[mount["name"]]["hostPath"], mount.get("readOnly", False))
        for mount in container["volumeMounts"]
        if "hostPath" in volumes[mount["name"]]
    }
    # at their own paths: Allocate answers name them as host paths, and the root's library
    # links point into the build directory
    assert mounts[SIM_ROOT] == ({"path": SIM_ROOT, "type": "Directory"}, False)
    assert mounts[SIM_LIBRARY_DIR] == ({"path": SIM_LIBRARY_DIR, "type": "Directory"}, True)
    default_settings = _settings(default_render, tmp_path)
    assert default_settings.host_root == default_settings.answer_root == "/"
    assert default_settings.library_path is None


def _without_simulation(obj: dict[str, Any]) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    if obj["kind"] == "ConfigMap":
        config = yaml.safe_load(next(iter(obj["data"].values())))
        obj["data"] = {key: config for key in obj["data"]}
        for key in ("host_root", "answer_root", "library_path"):
            config.pop(key, None)
    if obj["kind"] == "DaemonSet":
        template = obj["spec"]["template"]
        template["metadata"]["annotations"].pop("hygon.com/config-sha256")
        spec = template["spec"]
        (container,) = spec["containers"]
        container["env"] = [e for e in container["env"] if e["name"] != "HYDMI_SIM_ROOT"]
        simulated = {"simulated-node", "simulator-library"}
        container["volumeMounts"] = [
            m for m in container["volumeMounts"] if m["name"] not in simulated
        ]
        spec["volumes"] = [v for v in spec["volumes"] if v["name"] not in simulated]
    if obj["kind"] in ("Secret", "ValidatingWebhookConfiguration"):
        return {"kind": obj["kind"]}  # a certificate of its own on every fresh render
    return obj


def test_simulated_node_changes_nothing_else(simulated: RoleRun, default_render: RoleRun) -> None:
    # the manifests a test cluster runs are the ones a site gets
    assert [_without_simulation(o) for o in simulated.objects()] == [
        _without_simulation(o) for o in default_render.objects()
    ]
    assert simulated.find("DaemonSet") != default_render.find("DaemonSet")


# The refusals of this module, by case: the hosts of `refusals`.
SIMULATED_NODE_REFUSALS: dict[str, dict[str, str]] = {
    "relative-root": {"root": "tmp/node", "library_dir": SIM_LIBRARY_DIR},
    "library-dir-with-dot-dot": {"root": SIM_ROOT, "library_dir": "/srv/build/../build"},
    "root-with-trailing-slash": {"root": SIM_ROOT + "/", "library_dir": SIM_LIBRARY_DIR},
    "no-library-dir": {"root": SIM_ROOT},
}
# (variables, what the refusal says)
METRICS_REFUSALS: dict[str, tuple[dict[str, Any], str]] = {
    # a loopback address: the ServiceMonitor's Service would have no endpoint
    "monitor-with-default-loopback": (
        {"hygon_dcu_device_plugin_service_monitor": True},
        "set hygon_dcu_device_plugin_metrics_address to 0.0.0.0",
    ),
    "monitor-with-ipv6-loopback": (
        {
            "hygon_dcu_device_plugin_service_monitor": True,
            "hygon_dcu_device_plugin_metrics_address": "::1",
        },
        "a loopback address",
    ),
    # not an IP address; nothing that could reach the ConfigMap as YAML of its own
    "address-with-yaml-of-its-own": (
        {"hygon_dcu_device_plugin_metrics_address": "0.0.0.0\nlog_level: debug"},
        "must be an IPv4 or IPv6 address",
    ),
    "address-a-host-name": (
        {"hygon_dcu_device_plugin_metrics_address": "localhost"},
        "must be an IPv4 or IPv6",
    ),
    "address-with-a-port": (
        {"hygon_dcu_device_plugin_metrics_address": "0.0.0.0:9411"},
        "must be an IPv4 or",
    ),
    "address-in-brackets": (
        {"hygon_dcu_device_plugin_metrics_address": "[::]"},
        "must be an IPv4 or IPv6",
    ),
    "address-empty": ({"hygon_dcu_device_plugin_metrics_address": ""}, "must be an IPv4 or IPv6"),
    "port-0": ({"hygon_dcu_device_plugin_metrics_port": 0}, "a port from 1 to 65535"),
    "port-65536": ({"hygon_dcu_device_plugin_metrics_port": 65536}, "a port from 1 to 65535"),
    "port-of-health": (
        {"hygon_dcu_device_plugin_metrics_port": 9410},
        "other than the health port",
    ),
}


@pytest.fixture(scope="module")
def refusals(tmp_path_factory: pytest.TempPathFactory) -> dict[str, HostOutcome]:
    """This module's refusals, each a host of one playbook run."""
    return run_role_on_hosts(
        tmp_path_factory.mktemp("refusals"),
        {
            **{
                case: {"hygon_dcu_device_plugin_simulated_node": node}
                for case, node in SIMULATED_NODE_REFUSALS.items()
            },
            **{case: variables for case, (variables, _said) in METRICS_REFUSALS.items()},
        },
    )


@pytest.mark.parametrize("case", SIMULATED_NODE_REFUSALS)
def test_simulated_node_paths_must_be_absolute_and_normalised(
    refusals: dict[str, HostOutcome], case: str
) -> None:
    refused = refusals[case]
    assert refused.failed, refused.output
    assert "absolute, normalised paths" in refused.message
    assert not refused.render_dir.exists()


def _host_paths(run: RoleRun) -> dict[str, str]:
    spec = run.find("DaemonSet")["spec"]["template"]["spec"]
    return {
        v["hostPath"]["path"]: v["hostPath"]["type"] for v in spec["volumes"] if "hostPath" in v
    }


def test_dtk_is_mounted_only_when_asked(render_dir: Path, default_render: RoleRun) -> None:
    # optional on a node; never created by the role (an empty one would reach workloads as DTK)
    assert "/opt/dtk" not in _host_paths(default_render)
    run = run_role(render_dir, hygon_dcu_device_plugin_mount_dtk=True)
    assert run.returncode == 0, run.output
    assert _host_paths(run)["/opt/dtk"] == "Directory"


def _container(run: RoleRun) -> dict[str, Any]:
    (container,) = run.find("DaemonSet")["spec"]["template"]["spec"]["containers"]
    return dict(container)


def test_metrics_are_on_loopback_by_default(default_render: RoleRun, tmp_path: Path) -> None:
    # /metrics answers anyone who reaches it: by default only kubectl port-forward does
    assert _settings(default_render, tmp_path).metrics_address == "127.0.0.1:9411"
    container = _container(default_render)
    assert [p["name"] for p in container["ports"]] == ["health"]  # the probes' alone
    assert container["livenessProbe"]["httpGet"]["port"] == "health"
    service = default_render.find("Service", "hygon-dcu-device-plugin-metrics")
    daemonset = default_render.find("DaemonSet")
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"] == daemonset["spec"]["selector"]["matchLabels"]
    (port,) = service["spec"]["ports"]
    assert (port["port"], port["targetPort"]) == (9411, "metrics")  # no endpoint on loopback
    assert not [o for o in default_render.objects() if o["kind"] == "ServiceMonitor"]


def test_metrics_on_an_ipv6_loopback(render_dir: Path, tmp_path: Path) -> None:
    run = run_role(
        render_dir,
        hygon_dcu_device_plugin_metrics_address="0:0::1",
        hygon_dcu_device_plugin_metrics_port=9500,
    )
    assert run.returncode == 0, run.output
    assert _settings(run, tmp_path).metrics_address == "[0:0::1]:9500"
    assert [p["name"] for p in _container(run)["ports"]] == ["health"]


@pytest.mark.parametrize("case", METRICS_REFUSALS)
def test_unreachable_or_bad_metrics_address_is_refused(
    refusals: dict[str, HostOutcome], case: str
) -> None:
    _variables, message = METRICS_REFUSALS[case]
    refused = refusals[case]
    assert refused.failed, refused.output
    assert message in refused.message
    assert not refused.render_dir.exists()  # refused before anything is written


def test_service_monitor_and_self_healing_when_asked(
    render_dir: Path, default_render: RoleRun, tmp_path: Path
) -> None:
    run = run_role(
        render_dir,
        hygon_dcu_device_plugin_service_monitor=True,
        hygon_dcu_device_plugin_service_monitor_labels={"release": "prometheus"},
        hygon_dcu_device_plugin_metrics_address="0.0.0.0",
        hygon_dcu_device_plugin_delete_pods_with_lost_partitions=True,
    )
    assert run.returncode == 0, run.output
    # Prometheus reaches /metrics on the pod's address, on a port of its own
    assert _settings(run, tmp_path).metrics_address == "0.0.0.0:9411"
    declared = {p["name"]: p["containerPort"] for p in _container(run)["ports"]}
    assert declared == {"health": 9410, "metrics": 9411}
    (plugin_port,) = run.find("Service", "hygon-dcu-device-plugin-metrics")["spec"]["ports"]
    assert (plugin_port["port"], plugin_port["targetPort"]) == (9411, "metrics")
    monitor = run.find("ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    assert run.objects()[-1] == monitor  # after everything it scrapes
    services = [o for o in run.objects() if o["kind"] == "Service"]
    (selector,) = monitor["spec"]["selector"]["matchExpressions"]
    for service in services:
        assert service["metadata"]["labels"]["app.kubernetes.io/name"] in selector["values"]
    by_port = {endpoint["port"]: endpoint for endpoint in monitor["spec"]["endpoints"]}
    ports = {p["name"] for s in services for p in s["spec"]["ports"]}
    assert set(by_port) <= ports
    assert by_port["metrics"]["scheme"] == "http"
    assert by_port["https"]["scheme"] == "https"
    secret = run.find("Secret")
    assert by_port["https"]["tlsConfig"]["ca"]["secret"] == {
        "name": secret["metadata"]["name"],
        "key": "ca.crt",
    }
    assert "ca.crt" in secret["data"]
    # the opt-in self-healing key is written only when set, so the default file is unchanged
    config = yaml.safe_load(_config_text(run))
    assert config["delete_pods_with_lost_partitions"] is True
    assert "delete_pods_with_lost_partitions" not in yaml.safe_load(_config_text(default_render))


def test_the_fail_closed_webhook_and_the_extender_are_cluster_critical(
    render_dir: Path, default_render: RoleRun
) -> None:
    # While no webhook pod runs no pod it selects can be created, and partition pods wait while
    # the extender is down: neither is the first to be evicted or preempted.
    deployment = default_render.find("Deployment", "hygon-dcu-admission")
    assert deployment["spec"]["template"]["spec"]["priorityClassName"] == "system-cluster-critical"
    run = run_role(
        render_dir,
        hygon_dcu_device_plugin_webhook_priority_class="",
        hygon_dcu_device_plugin_extender_enabled=True,
        hygon_dcu_device_plugin_extender_mode="default_scheduler",
    )
    assert run.returncode == 0, run.output
    spec = run.find("Deployment", "hygon-dcu-admission")["spec"]["template"]["spec"]
    assert "priorityClassName" not in spec  # empty omits it
    extender = run.find("Deployment", "hygon-dcu-extender")["spec"]["template"]["spec"]
    assert extender["priorityClassName"] == "system-cluster-critical"
