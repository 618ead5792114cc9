"""The alert rules and the Grafana dashboard as objects the role applies when asked: a
PrometheusRule whose expressions and advice name the runtime's namespace, and a ConfigMap for
Grafana's dashboard sidecar; and what the ServiceMonitor makes Prometheus scrape. What the rules
and the dashboard read is checked against the real programs in tests/unit/observability; the
cluster path (applied last, kept, removed, refused without the operator's kinds or the
dashboard's namespace) in test_apply_fake_cluster.py."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from hygon_dcu_plugin.extender import main as extender_main
from playbook_runner import REPO
from role_render import RoleRun, run_role, run_role_on_hosts

from .conftest import EXTENDER_ON

ASKED: dict[str, Any] = {
    "hygon_dcu_device_plugin_prometheus_rule": True,
    "hygon_dcu_device_plugin_prometheus_rule_labels": {"release": "prometheus"},
    "hygon_dcu_device_plugin_grafana_dashboard": True,
    "hygon_dcu_device_plugin_grafana_dashboard_namespace": "monitoring",
    "hygon_dcu_namespace": "gpu-ops",
}


@pytest.fixture(scope="module")
def asked(tmp_path_factory: pytest.TempPathFactory) -> RoleRun:
    run = run_role(tmp_path_factory.mktemp("monitoring") / "out", **ASKED)
    assert run.returncode == 0, run.output
    return run


# On the floor too: ansible-core 2.18 and 2.19 hand the templates' output back differently.
@pytest.mark.floor
def test_the_rules_name_the_runtimes_namespace_and_keep_prometheus_templates(
    asked: RoleRun,
) -> None:
    rule = asked.find("PrometheusRule")
    assert rule["metadata"]["namespace"] == "gpu-ops"
    assert rule["metadata"]["labels"]["release"] == "prometheus"
    assert rule["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "hygon.dcu"
    text = json.dumps(rule)
    assert "hygon-dcu-system" not in text
    rules = [r for group in rule["spec"]["groups"] for r in group["rules"]]
    matched = {m for r in rules for m in re.findall(r'namespace="([^"]*)"', r["expr"])}
    assert matched == {"gpu-ops"}
    assert all(
        "-n gpu-ops" in r["annotations"]["description"]
        for r in rules
        if "kubectl -n" in r["annotations"]["description"]
    )
    # Prometheus' own templates reach it as written, not evaluated by the role
    summaries = [r["annotations"]["summary"] for r in rules]
    assert sum("{{ $labels.node }}" in summary for summary in summaries) >= 5
    assert "[[" not in text and "]]" not in text


@pytest.mark.floor
def test_the_dashboard_configmap_holds_the_dashboard_for_the_sidecar(asked: RoleRun) -> None:
    configmap = asked.find("ConfigMap", "hygon-dcu-dashboard")
    assert configmap["metadata"]["namespace"] == "monitoring"
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    (name, dashboard) = next(iter(configmap["data"].items()))
    assert name == "hygon-dcu-dashboard.json"
    loaded = json.loads(dashboard)
    assert loaded["title"] and loaded["panels"]
    # Grafana's legends reach it as written; the role's own names are filled in
    assert '"legendFormat": "{{node}} {{card}}"' in dashboard
    assert "[[" not in dashboard and "hygon.com/dcu.partitioned.mig-.*" in dashboard
    # after everything they read, the ServiceMonitor's place
    kinds = [obj["kind"] for obj in asked.objects()]
    assert kinds[-2:] == ["PrometheusRule", "ConfigMap"]


def test_neither_is_rendered_unless_asked(default_render: RoleRun) -> None:
    kinds = [obj["kind"] for obj in default_render.objects()]
    assert "PrometheusRule" not in kinds
    assert not [
        o for o in default_render.objects() if o["metadata"]["name"] == "hygon-dcu-dashboard"
    ]


def test_absent_removes_each_only_while_asked(tmp_path: Path) -> None:
    removed: dict[str, list[tuple[str, str, str]]] = {}
    for case, variables in (("asked", ASKED), ("not", {"hygon_dcu_namespace": "gpu-ops"})):
        run = run_role(tmp_path / case, hygon_dcu_device_plugin_state="absent", **variables)
        assert run.returncode == 0, run.output
        removal = yaml.safe_load((tmp_path / case / "removal.yaml").read_text())
        removed[case] = [(o["kind"], o.get("namespace", ""), o["name"]) for o in removal]
    monitoring = [
        ("PrometheusRule", "gpu-ops", "hygon-dcu"),
        ("ConfigMap", "monitoring", "hygon-dcu-dashboard"),
    ]
    # first, before the runtime they watch
    assert removed["asked"][:2] == monitoring
    assert not set(monitoring) & set(removed["not"])


def test_names_and_labels_the_api_server_would_refuse_are_refused_before_anything_is_written(
    tmp_path: Path,
) -> None:
    cases: dict[str, tuple[dict[str, Any], str]] = {
        "dashboard-namespace": (
            {
                "hygon_dcu_device_plugin_grafana_dashboard": True,
                "hygon_dcu_device_plugin_grafana_dashboard_namespace": "Grafana",
            },
            "hygon_dcu_device_plugin_grafana_dashboard_namespace must be a namespace name",
        ),
        "runtime-namespace": (
            {"hygon_dcu_namespace": 'x", job="other'},
            "hygon_dcu_namespace must be a namespace name",
        ),
        # YAML's `release: 1`: a number, which no label value is
        "rule-label-a-number": (
            {"hygon_dcu_device_plugin_prometheus_rule_labels": {"release": 1}},
            '"hygon_dcu_device_plugin_prometheus_rule_labels": {"release": 1}',
        ),
        "monitor-label-key": (
            {"hygon_dcu_device_plugin_service_monitor_labels": {"bad key": "x"}},
            '"hygon_dcu_device_plugin_service_monitor_labels": {"bad key": "x"}',
        ),
        "dashboard-label-value": (
            {"hygon_dcu_device_plugin_grafana_dashboard_labels": {"grafana_dashboard": "-1-"}},
            '"hygon_dcu_device_plugin_grafana_dashboard_labels": {"grafana_dashboard": "-1-"}',
        ),
    }
    outcomes = run_role_on_hosts(
        tmp_path, {case: variables for case, (variables, _message) in cases.items()}
    )
    for case, (_variables, message) in cases.items():
        outcome = outcomes[case]
        assert outcome.failed == 1, outcome.output
        assert message in outcome.message, (case, outcome.message)
        assert "Nothing was changed" in outcome.message
        assert not outcome.render_dir.exists()
        if case.endswith(("number", "key", "value")):
            assert "must map label names to label values" in outcome.message


def _targets(run: RoleRun) -> dict[str, tuple[str, int, dict[str, Any]]]:
    """What Prometheus scrapes from the ServiceMonitor, as the operator builds it: every port of a
    selected Service named by an endpoint, on the container port it targets (by name or number)
    in the pods the Service selects. By Service: (container, port number, endpoint)."""
    monitor = run.find("ServiceMonitor")
    (selector,) = monitor["spec"]["selector"]["matchExpressions"]
    assert selector["operator"] == "In"
    templates = [
        o["spec"]["template"] for o in run.objects() if o["kind"] in ("Deployment", "DaemonSet")
    ]
    found: dict[str, tuple[str, int, dict[str, Any]]] = {}
    for service in run.objects():
        labels = service["metadata"]["labels"]
        if (
            service["kind"] != "Service"
            or labels["app.kubernetes.io/name"] not in selector["values"]
        ):
            continue
        for endpoint in monitor["spec"]["endpoints"]:
            for port in service["spec"]["ports"]:
                if port["name"] != endpoint["port"]:
                    continue
                selected = [
                    t
                    for t in templates
                    if service["spec"]["selector"].items() <= t["metadata"]["labels"].items()
                ]
                ((container, number),) = [
                    (c["name"], p["containerPort"])
                    for t in selected
                    for c in t["spec"]["containers"]
                    for p in c.get("ports", [])
                    if port["targetPort"] in (p["name"], p["containerPort"])
                ]
                assert service["metadata"]["name"] not in found, service["metadata"]["name"]
                found[service["metadata"]["name"]] = (container, number, endpoint)
    return found


@pytest.mark.parametrize("mode", ["second_scheduler", "default_scheduler"])
def test_prometheus_scrapes_each_program_once_and_the_extender_on_its_probes_port(
    tmp_path: Path, mode: str
) -> None:
    run = run_role(
        tmp_path / "out",
        hygon_dcu_device_plugin_service_monitor=True,
        hygon_dcu_device_plugin_prometheus_rule=True,
        hygon_dcu_device_plugin_metrics_address="0.0.0.0",
        **EXTENDER_ON,
        hygon_dcu_device_plugin_extender_mode=mode,
    )
    assert run.returncode == 0, run.output
    targets = _targets(run)
    # one target each; never the extender's verbs (its Service in default_scheduler mode is
    # selected too, and the webhook's endpoint scrapes every port named https)
    assert {name: target[:2] for name, target in targets.items()} == {
        "hygon-dcu-device-plugin-metrics": ("device-plugin", 9411),
        "hygon-dcu-admission": ("webhook", 8443),
        "hygon-dcu-extender-metrics": ("extender", 8444),
    }
    pods = [o for o in run.objects() if o["kind"] == "Deployment"]
    (container,) = [
        c
        for p in pods
        for c in p["spec"]["template"]["spec"]["containers"]
        if c["name"] == "extender"
    ]
    options = extender_main.build_parser().parse_args(container["args"])
    assert options.probe_port == 8444 != options.port
    # verified as the scheduler verifies it: the CA of the extender's Secret, a name its
    # certificate carries
    tls = targets["hygon-dcu-extender-metrics"][2]["tlsConfig"]
    secret = run.find("Secret", tls["ca"]["secret"]["name"])
    assert secret["metadata"]["name"] == "hygon-dcu-extender-tls"
    certificate = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert tls["serverName"] in names.get_values_for_type(x509.DNSName)
    authority = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["ca.crt"]))
    certificate.verify_directly_issued_by(authority)
    # each target has its target-down alert, on the job name the operator gives it (the Service's)
    rules = [r for g in run.find("PrometheusRule")["spec"]["groups"] for r in g["rules"]]
    jobs = {m for r in rules for m in re.findall(r'^up\{job="([^"]+)"\} == 0$', r["expr"])}
    assert jobs == set(targets)


def test_the_docs_list_every_alert_and_no_other(asked: RoleRun) -> None:
    rules = asked.find("PrometheusRule")["spec"]["groups"]
    alerts = {rule["alert"] for group in rules for rule in group["rules"]}
    docs = (REPO / "docs" / "observability.md").read_text()
    table = docs[docs.index("\n## Alerts\n") : docs.index("\n## Logs\n")]
    assert set(re.findall(r"^\| `(HygonDcu\w+)` \|", table, re.MULTILINE)) == alerts
