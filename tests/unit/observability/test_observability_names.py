"""The Grafana dashboard and the PrometheusRule read only what the product really exports.

Every metric name and label name in every PromQL expression of the alert rules and the
dashboard, as the device_plugin role renders them, must be on the programs' real pages
(``scrapes.py``), or be one of the few external names listed below, made by Prometheus or
kube-state-metrics. A small PromQL reader tells which metric and label names an expression
reads; it is not complete, covers what the rules and the dashboard use and fails loudly on
anything it does not understand, so a new construct cannot slip past unread.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from role_render import Monitoring
from scrapes import Exported, Scrape, parse_exposition

kubernetes_validate = importlib.import_module("kubernetes_validate")
REPO = Path(__file__).resolve().parents[3]
SERVICE_MONITOR = REPO / "roles/device_plugin/templates/monitoring/servicemonitor.yaml.j2"

# Labels the scrape adds to every series (Prometheus Operator, ServiceMonitor on endpoints;
# `node` by the relabeling of the pod's node name). With honorLabels off (the default) a
# product label of the same name is stored as exported_<name>.
TARGET_LABELS = frozenset(
    {"job", "instance", "namespace", "service", "pod", "container", "endpoint", "node"}
)
# Names the product does not export, with their labels: Prometheus' own `up`, the two
# kube-state-metrics series that tell which pods wait for a partition, and the three that tell
# whether the runtime's DaemonSet and Deployments are available.
EXTERNAL: dict[str, frozenset[str]] = {
    "up": TARGET_LABELS,
    "kube_pod_container_resource_requests": frozenset(
        {"job", "instance", "namespace", "pod", "uid", "container", "node", "resource", "unit"}
    ),
    "kube_pod_status_phase": frozenset({"job", "instance", "namespace", "pod", "uid", "phase"}),
    "kube_daemonset_status_number_unavailable": frozenset(
        {"job", "instance", "namespace", "daemonset"}
    ),
    "kube_deployment_status_replicas_available": frozenset(
        {"job", "instance", "namespace", "deployment"}
    ),
    "kube_deployment_status_replicas_unavailable": frozenset(
        {"job", "instance", "namespace", "deployment"}
    ),
}


# -- PromQL -------------------------------------------------------------------------------

_TOKEN = re.compile(
    r"""\s*(?:
      (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
    | (?P<duration>[0-9]+(?:ms|[smhdwy])(?:[0-9]+(?:ms|[smhdwy]))*)
    | (?P<number>0x[0-9a-fA-F]+|[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)
    | (?P<ident>[a-zA-Z_][a-zA-Z0-9_:]*)
    | (?P<op>=~|!~|!=|==|>=|<=|[-+*/%^<>=,(){}\[\]:@])
    )""",
    re.VERBOSE,
)
KEYWORDS = frozenset(
    {"and", "or", "unless", "bool", "offset", "inf", "nan", "start", "end", "atan2"}
)
AGGREGATIONS = frozenset(
    {"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values"}
    | {"bottomk", "topk", "quantile", "limitk", "limit_ratio"}
)
GROUPING = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right"})
# Grafana's built-in interval variables, read as a plain duration.
_GRAFANA_INTERVALS = re.compile(r"\$__(rate_interval|interval|range)\b|\$\{__(\w+)\}")


@dataclass
class References:
    """What one expression reads: metric names, label names used on each metric's selector,
    grouping labels (by / without / on / ignoring / group_*), labels made by label_replace."""

    metrics: set[str] = field(default_factory=set)
    selector_labels: dict[str, set[str]] = field(default_factory=dict)
    grouping_labels: set[str] = field(default_factory=set)
    made_labels: set[str] = field(default_factory=set)


def tokenize(expr: str) -> list[tuple[str, str]]:
    text = _GRAFANA_INTERVALS.sub("5m", expr)
    tokens: list[tuple[str, str]] = []
    position = 0
    while position < len(text):
        if not text[position:].strip():
            break
        match = _TOKEN.match(text, position)
        if not match or match.end() == position:
            raise ValueError(
                f"cannot read PromQL at {text[position : position + 20]!r} in {expr!r}"
            )
        kind = match.lastgroup
        assert kind is not None
        tokens.append((kind, match.group(kind)))
        position = match.end()
    return tokens


def references(expr: str) -> References:
    """Walk the tokens once: an identifier before ``(`` is a function or aggregation; inside
    ``{}`` identifiers are label names; after a grouping keyword the ``(...)`` list is labels;
    inside ``[...]`` only durations; every other identifier that is no keyword is a metric."""
    tokens = tokenize(expr)
    found = References()
    calls: list[list[object]] = []  # per open "(": [function name or "", argument index]
    i = 0
    while i < len(tokens):
        kind, value = tokens[i]
        following = tokens[i + 1][1] if i + 1 < len(tokens) else ""
        if kind == "ident" and value in GROUPING:
            i = _grouping(tokens, i + 1, found.grouping_labels)
            continue
        if kind == "ident" and value in AGGREGATIONS and following in ("by", "without"):
            i = _grouping(tokens, i + 2, found.grouping_labels)
            if i >= len(tokens) or tokens[i][1] != "(":
                raise ValueError(f"{value} {following} (...) without its argument in {expr!r}")
            calls.append([value, 0])
            i += 1
            continue
        if kind == "ident" and following == "(":
            calls.append([value, 0])
            i += 2
            continue
        if kind == "ident" and value.lower() not in KEYWORDS:
            found.metrics.add(value)
            found.selector_labels.setdefault(value, set())
            i += 1
            continue
        if value == "{":
            before = tokens[i - 1] if i else ("", "")
            metric = before[1] if before[0] == "ident" and before[1] in found.metrics else None
            i = _selector(tokens, i + 1, found, metric)
            continue
        if value == "[":
            i = _range(tokens, i + 1)
            continue
        if value == "(":
            calls.append(["", 0])
        elif value == ")":
            if not calls:
                raise ValueError(f"unbalanced ')' in {expr!r}")
            calls.pop()
        elif value == "," and calls:
            calls[-1][1] = int(str(calls[-1][1])) + 1
        elif kind == "string" and calls and calls[-1] == ["label_replace", 1]:
            found.made_labels.add(value[1:-1])
        i += 1
    if calls:
        raise ValueError(f"unbalanced '(' in {expr!r}")
    return found


def _grouping(tokens: list[tuple[str, str]], i: int, into: set[str]) -> int:
    if i >= len(tokens) or tokens[i][1] != "(":
        return i  # group_left without a list
    i += 1
    while tokens[i][1] != ")":
        kind, value = tokens[i]
        if kind == "ident":
            into.add(value)
        elif value != ",":
            raise ValueError(f"unexpected {value!r} in a grouping list")
        i += 1
    return i + 1


def _selector(tokens: list[tuple[str, str]], i: int, found: References, metric: str | None) -> int:
    if metric is None:
        raise ValueError("a selector without a metric name is not supported")
    while tokens[i][1] != "}":
        kind, value = tokens[i]
        if kind == "ident":
            if tokens[i + 1][1] not in ("=", "!=", "=~", "!~") or tokens[i + 2][0] != "string":
                raise ValueError(f"bad label matcher after {value!r}")
            found.selector_labels[metric].add(value)
            i += 3
        elif value == ",":
            i += 1
        else:
            raise ValueError(f"unexpected {value!r} in a selector")
    return i + 1


def _range(tokens: list[tuple[str, str]], i: int) -> int:
    while tokens[i][1] != "]":
        if tokens[i][0] not in ("duration", "number") and tokens[i][1] != ":":
            raise ValueError(f"unexpected {tokens[i][1]!r} in a range")
        i += 1
    return i + 1


# -- what the dashboard and the rules read ------------------------------------------------


def dashboard_expressions(dashboard: dict[str, Any]) -> dict[str, str]:
    found: dict[str, str] = {}
    panels = list(dashboard["panels"])
    while panels:
        panel = panels.pop(0)
        panels.extend(panel.get("panels", []))  # collapsed rows
        for target in panel.get("targets", []):
            found[f"panel {panel['title']!r} {target['refId']}"] = target["expr"]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] != "query":
            continue
        query = variable["query"]
        text = query["query"] if isinstance(query, dict) else query
        call = re.fullmatch(r"label_values\(\s*(\w+)\s*,\s*(\w+)\s*\)", text)
        assert call, f"variable {variable['name']}: only label_values(metric, label) is read"
        found[f"variable {variable['name']}"] = f"max by ({call[2]}) ({call[1]})"
    return found


def rule_expressions(rules: dict[str, Any]) -> dict[str, str]:
    return {
        f"rule {rule.get('alert') or rule['record']}": str(rule["expr"])
        for group in rules["spec"]["groups"]
        for rule in group["rules"]
    }


def stored_labels(exported: Exported) -> dict[str, frozenset[str] | None]:
    """Series name -> label names as Prometheus stores them (None: no sample, labels unknown)."""
    stored: dict[str, frozenset[str] | None] = {}
    for name, labels in exported.labels.items():
        renamed = {f"exported_{label}" if label in TARGET_LABELS else label for label in labels}
        stored[name] = frozenset(renamed | TARGET_LABELS)
    for name in exported.declared:
        stored[name] = None
    return stored


def problems(expressions: dict[str, str], exported: Exported) -> list[str]:
    stored = {**stored_labels(exported), **EXTERNAL}
    found: list[str] = []
    for where, expr in expressions.items():
        refs = references(expr)
        known = set(refs.made_labels)
        for metric in sorted(refs.metrics):
            if metric not in stored:
                found.append(f"{where}: {metric} is not exported")
                continue
            labels = stored[metric]
            known |= labels if labels is not None else TARGET_LABELS
            for label in sorted(refs.selector_labels[metric] - TARGET_LABELS):
                if labels is None:
                    found.append(f"{where}: {metric} has no sample, so label {label} is unchecked")
                elif label not in labels:
                    found.append(f"{where}: {metric} has no label {label}")
        for label in sorted(refs.grouping_labels - known):
            found.append(f"{where}: no metric of the expression has label {label}")
    return found


def used_names(expressions: dict[str, str]) -> set[str]:
    return {name for expr in expressions.values() for name in references(expr).metrics}


@pytest.fixture(scope="module")
def dashboard(monitoring: Monitoring) -> dict[str, Any]:
    return monitoring.dashboard


@pytest.fixture(scope="module")
def rules(monitoring: Monitoring) -> dict[str, Any]:
    return monitoring.rules


@pytest.fixture(scope="module")
def expressions(dashboard: dict[str, Any], rules: dict[str, Any]) -> dict[str, str]:
    return {**dashboard_expressions(dashboard), **rule_expressions(rules)}


# -- the check itself ---------------------------------------------------------------------


def test_every_name_and_label_read_is_exported(scrape: Scrape, expressions: dict[str, str]) -> None:
    exported = scrape.exported()
    found = problems(expressions, exported)
    assert not found, "\n".join(found)
    # Every product metric the dashboard or rules read has real samples with labels.
    product = used_names(expressions) - set(EXTERNAL)
    assert product <= set(exported.labels) | exported.declared
    assert len(product) >= 15


def test_a_metric_renamed_in_the_dashboard_is_caught(
    scrape: Scrape, dashboard: dict[str, Any]
) -> None:
    broken = json.loads(
        json.dumps(dashboard).replace("hygon_dcu_free_partitions", "hygon_dcu_free_partition")
    )
    found = problems(dashboard_expressions(broken), scrape.exported())
    users = {w for w, e in dashboard_expressions(dashboard).items() if "free_partitions" in e}
    assert users and {p.split(": ")[0] for p in found} == users
    assert {f"{w}: hygon_dcu_free_partition is not exported" for w in users} <= set(found)


def test_a_metric_renamed_in_the_product_is_caught(
    scrape: Scrape, expressions: dict[str, str]
) -> None:
    # Only a copy of the scraped text is changed, as if the plugin had renamed the metric.
    renamed = scrape.replaced("hygon_dcu_reclaim_actions_total", "hygon_dcu_reclaims_total")
    exported = renamed.exported()
    found = problems(expressions, exported)
    users = {w for w, e in expressions.items() if "hygon_dcu_reclaim_actions_total" in e}
    assert "rule HygonDcuReclaimStuck" in users
    assert {p.split(": ")[0] for p in found} == users
    assert {f"{w}: hygon_dcu_reclaim_actions_total is not exported" for w in users} <= set(found)


def test_a_wrong_label_is_caught(scrape: Scrape) -> None:
    exported = scrape.exported()
    assert problems({"x": "sum by (profil) (hygon_dcu_live_instances)"}, exported) == [
        "x: no metric of the expression has label profil"
    ]
    assert problems({"x": 'hygon_dcu_allocations_total{reason="no_capacity"}'}, exported) == [
        "x: hygon_dcu_allocations_total has no label reason"
    ]
    # A product label that collides with a target label is stored as exported_<name>.
    assert problems({"x": 'hygon_dcu_partition_info{exported_pod="p"}'}, exported) == []
    assert problems({"x": "count by (profile, pod) (hygon_dcu_partition_info)"}, exported) == []


def test_the_plugin_exports_the_allocate_latency_histogram(scrape: Scrape) -> None:
    exported = scrape.exported()
    assert exported.types["hygon_dcu_allocate_duration_seconds"] == "histogram"
    assert exported.labels["hygon_dcu_allocate_duration_seconds_bucket"] == {"le"}


# -- the readers, on small inputs ---------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "metrics", "selector", "grouping"),
    [
        ("up", {"up"}, {"up": set()}, set()),
        (
            'sum by (node, profile) (hygon_dcu_live_instances{node=~"$node"})',
            {"hygon_dcu_live_instances"},
            {"hygon_dcu_live_instances": {"node"}},
            {"node", "profile"},
        ),
        (
            'histogram_quantile(0.95, sum(rate(a_bucket{le!="+Inf"}[$__rate_interval])) by (le))',
            {"a_bucket"},
            {"a_bucket": {"le"}},
            {"le"},
        ),
        (
            "a > bool 0 and on (x) group_left (y) b offset 5m or vector(1) unless c[1h:5m] > 1e3",
            {"a", "b", "c"},
            {"a": set(), "b": set(), "c": set()},
            {"x", "y"},
        ),
        (
            'label_replace(m{r="a,b"}, "dst", "$1", "r", "(.*)") * on () group_left count(n) > inf',
            {"m", "n"},
            {"m": {"r"}, "n": set()},
            set(),
        ),
    ],
)
def test_promql_references(
    expr: str, metrics: set[str], selector: dict[str, set[str]], grouping: set[str]
) -> None:
    refs = references(expr)
    assert refs.metrics == metrics
    assert dict(refs.selector_labels) == selector
    assert refs.grouping_labels == grouping


def test_promql_label_replace_makes_a_label() -> None:
    assert references('label_replace(m, "profile", "$1", "r", "(.*)")').made_labels == {"profile"}


@pytest.mark.parametrize("expr", ["sum(a", "a)", "a{b}", "a # comment", "a[5m x]"])
def test_promql_reader_refuses_what_it_does_not_understand(expr: str) -> None:
    with pytest.raises((ValueError, IndexError)):
        references(expr)


def test_tokens() -> None:
    assert tokenize('rate(x{a="}"}[5m])') == [
        ("ident", "rate"),
        ("op", "("),
        ("ident", "x"),
        ("op", "{"),
        ("ident", "a"),
        ("op", "="),
        ("string", '"}"'),
        ("op", "}"),
        ("op", "["),
        ("duration", "5m"),
        ("op", "]"),
        ("op", ")"),
    ]


EXPOSITION = """\
# HELP c_total A counter.
# TYPE c_total counter
c_total{reason="x",b="y \\" }"} 1
# TYPE h_seconds histogram
h_seconds_bucket{le="0.1"} 0
h_seconds_bucket{le="+Inf"} 1
h_seconds_sum 0.2
h_seconds_count 1
# TYPE om counter
om_total 3
om_created 1.7e9
# TYPE build info
build_info{version="1"} 1
# TYPE empty gauge
# TYPE empty_h histogram
"""


def test_exposition_names_and_suffixes() -> None:
    exported = parse_exposition(EXPOSITION)
    assert exported.labels == {
        "c_total": {"reason", "b"},
        "h_seconds_bucket": {"le"},
        "h_seconds_sum": set(),
        "h_seconds_count": set(),
        "om_total": set(),
        "om_created": set(),
        "build_info": {"version"},
    }
    assert exported.declared == {"empty", "empty_h_bucket", "empty_h_sum", "empty_h_count"}
    assert "h_seconds" not in exported.names()


@pytest.mark.parametrize("text", ["x 1\n", "# TYPE x gauge\nx{a=1} 1\n", "# TYPE x nonsense\n"])
def test_exposition_refuses_bad_text(text: str) -> None:
    with pytest.raises(ValueError):
        parse_exposition(text)


# -- structure ----------------------------------------------------------------------------


def test_the_rules_are_a_prometheusrule(rules: dict[str, Any]) -> None:
    # kubernetes-validate knows no CRDs (SchemaNotFoundError): the structure is checked here.
    with contextlib.suppress(kubernetes_validate.SchemaNotFoundError):
        kubernetes_validate.validate(rules, kubernetes_validate.latest_version(), strict=True)
    assert rules["apiVersion"] == "monitoring.coreos.com/v1"
    assert rules["kind"] == "PrometheusRule"
    assert set(rules) == {"apiVersion", "kind", "metadata", "spec"}
    assert rules["metadata"]["name"] and rules["metadata"]["namespace"]
    assert set(rules["spec"]) == {"groups"}
    names = [group["name"] for group in rules["spec"]["groups"]]
    assert len(names) == len(set(names))
    alerts: list[str] = []
    for group in rules["spec"]["groups"]:
        assert set(group) <= {"name", "interval", "rules"}
        for rule in group["rules"]:
            assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}, rule
            alerts.append(rule["alert"])
            assert re.fullmatch(r"HygonDcu[A-Za-z]+", rule["alert"])
            assert isinstance(rule["expr"], str) and rule["expr"].strip()
            if "for" in rule:
                assert re.fullmatch(r"[0-9]+[smh]", rule["for"])
            assert rule["labels"]["severity"] in {"critical", "warning", "info"}
            assert set(rule["annotations"]) == {"summary", "description"}
            assert all(len(text) > 30 for text in rule["annotations"].values())
    assert len(alerts) == len(set(alerts))


def test_the_dashboard_is_importable(dashboard: dict[str, Any]) -> None:
    assert dashboard["title"] and dashboard["uid"] and isinstance(dashboard["schemaVersion"], int)
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    assert variables["node"]["type"] == "query"
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert set(panel["gridPos"]) == {"h", "w", "x", "y"}
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["expr"].strip() and target["refId"]
            assert target["datasource"]["uid"] == "${datasource}"
    # the webhook's and the extender's series have no node: they serve the whole cluster
    per_node = [
        p
        for p in dashboard["panels"]
        if not re.search(r"hygon_dcu_(admission|extender)_", json.dumps(p["targets"]))
    ]
    assert all('node=~\\"$node\\"' in json.dumps(p["targets"]) for p in per_node)


def test_the_service_monitor_gives_series_a_node_label() -> None:
    text = SERVICE_MONITOR.read_text()
    assert "__meta_kubernetes_pod_node_name" in text
    assert re.search(r"targetLabel:\s*[\"']?node\b", text)


def test_the_service_monitor_keeps_honor_labels_off() -> None:
    # The dashboard's holders table reads exported_namespace / exported_pod / exported_container.
    assert not re.search(r"honorLabels:\s*[\"']?true", SERVICE_MONITOR.read_text())
