"""The opt-in NetworkPolicies (roles/device_plugin/README.md, "NetworkPolicies"): none by default;
with hygon_dcu_device_plugin_network_policy one per workload, applied before it, admitting only
the sources and only to the ports its pods serve them; the inputs refused; valid for every
supported Kubernetes; in the removal list. tests: test_apply_fake_cluster.py removes them when
the switch goes off."""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml
from hygon_dcu_plugin import vocabulary
from hypothesis import example, given
from hypothesis import strategies as st
from role_render import REPO, RoleRun, run_role

from .conftest import ALONE, EXTENDER_ON, POLICY_ON, POLICY_SOURCES
from .schema_1_20 import fields_missing_in_1_20

NAMESPACE = "hygon-dcu-system"
PLUGIN = "hygon-dcu-device-plugin"
WEBHOOK = "hygon-dcu-admission"
EXTENDER = "hygon-dcu-extender"
SCHEDULER = vocabulary.SCHEDULER_NAME
CIDR_PATTERN: str = yaml.safe_load(
    (REPO / "roles" / "device_plugin" / "vars" / "main.yml").read_text()
)["device_plugin__cidr_pattern"]


@pytest.fixture(scope="module")
def beside(tmp_path_factory: pytest.TempPathFactory) -> RoleRun:
    """The second scheduler and the extender in one pod, with the policies."""
    run = run_role(tmp_path_factory.mktemp("policy-beside") / "out", **EXTENDER_ON, **POLICY_ON)
    assert run.returncode == 0, run.output
    return run


@pytest.fixture(scope="module")
def alone(tmp_path_factory: pytest.TempPathFactory) -> RoleRun:
    """The extender alone for the site's scheduler, the policies, and /metrics for Prometheus."""
    run = run_role(
        tmp_path_factory.mktemp("policy-alone") / "out",
        **ALONE,
        **POLICY_ON,
        hygon_dcu_device_plugin_service_monitor=True,
        hygon_dcu_device_plugin_metrics_address="0.0.0.0",
    )
    assert run.returncode == 0, run.output
    return run


def _policies(run: RoleRun) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in run.objects() if o["kind"] == "NetworkPolicy"}


def _workload(run: RoleRun, name: str) -> dict[str, Any]:
    (found,) = [
        o
        for o in run.objects()
        if o["kind"] in ("DaemonSet", "Deployment") and o["metadata"]["name"] == name
    ]
    return found


def _container_ports(workload: dict[str, Any]) -> dict[tuple[str, str], int]:
    """(container, port name) -> number, for every port the pod's containers declare."""
    return {
        (container["name"], port["name"]): port["containerPort"]
        for container in workload["spec"]["template"]["spec"]["containers"]
        for port in container.get("ports", [])
    }


def _probe_ports(workload: dict[str, Any]) -> set[int]:
    """The ports the kubelet probes, resolved in each container's named ports."""
    ports = set()
    for container in workload["spec"]["template"]["spec"]["containers"]:
        named = {port["name"]: port["containerPort"] for port in container.get("ports", [])}
        for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
            if probe in container:
                port = container[probe]["httpGet"]["port"]
                ports.add(named[port] if isinstance(port, str) else port)
    return ports


def _admitted(policy: dict[str, Any]) -> set[int]:
    (rule,) = policy["spec"]["ingress"]
    assert {port["protocol"] for port in rule["ports"]} == {"TCP"}
    return {port["port"] for port in rule["ports"]}


def test_none_unless_asked(default_render: RoleRun, extender_render: RoleRun) -> None:
    for run in (default_render, extender_render):
        assert _policies(run) == {}


@pytest.mark.parametrize(
    ("mode", "names"),
    [("beside", {PLUGIN, WEBHOOK, SCHEDULER}), ("alone", {PLUGIN, WEBHOOK, EXTENDER})],
)
def test_one_policy_per_workload_applied_before_it(
    mode: str, names: set[str], request: pytest.FixtureRequest
) -> None:
    run: RoleRun = request.getfixturevalue(mode)
    policies = _policies(run)
    assert set(policies) == names
    order = [(o["kind"], o["metadata"]["name"]) for o in run.objects()]
    for name, policy in policies.items():
        workload = _workload(run, name)
        # its pods never run unprotected
        assert order.index(("NetworkPolicy", name)) < order.index((workload["kind"], name))
        assert policy["metadata"]["namespace"] == workload["metadata"]["namespace"] == NAMESPACE
        selector = policy["spec"]["podSelector"]
        assert selector == workload["spec"]["selector"]
        labels = workload["spec"]["template"]["metadata"]["labels"]
        assert selector["matchLabels"].items() <= labels.items()


@pytest.mark.parametrize("mode", ["beside", "alone"])
def test_ingress_from_the_sources_alone_egress_open(
    mode: str, request: pytest.FixtureRequest
) -> None:
    run: RoleRun = request.getfixturevalue(mode)
    for policy in _policies(run).values():
        spec = policy["spec"]
        # egress is not restricted: the pods reach an API server whose address differs per site
        assert spec["policyTypes"] == ["Ingress"]
        assert "egress" not in spec
        (rule,) = spec["ingress"]
        assert rule["from"] == [{"ipBlock": {"cidr": cidr}} for cidr in POLICY_SOURCES]


def test_webhook_admits_its_https_port(beside: RoleRun) -> None:
    webhook = _workload(beside, WEBHOOK)
    admitted = _admitted(_policies(beside)[WEBHOOK])
    # the API server's calls (through the Service), the kubelet's probes and Prometheus
    assert admitted == set(_container_ports(webhook).values()) == {8443}
    (service_port,) = beside.find("Service", WEBHOOK)["spec"]["ports"]
    assert service_port["targetPort"] in admitted
    assert _probe_ports(webhook) <= admitted


def test_plugin_admits_its_health_port_while_metrics_stay_on_loopback(beside: RoleRun) -> None:
    plugin = _workload(beside, PLUGIN)
    assert _admitted(_policies(beside)[PLUGIN]) == _probe_ports(plugin) == {9410}
    assert set(_container_ports(plugin)) == {("device-plugin", "health")}


def test_plugin_admits_the_metrics_port_prometheus_scrapes(alone: RoleRun) -> None:
    plugin = _workload(alone, PLUGIN)
    ports = _container_ports(plugin)
    assert set(ports) == {("device-plugin", "health"), ("device-plugin", "metrics")}
    admitted = _admitted(_policies(alone)[PLUGIN])
    assert admitted == set(ports.values())
    assert ports["device-plugin", "metrics"] in admitted
    assert alone.find("ServiceMonitor")["metadata"]["namespace"] == NAMESPACE


def test_second_scheduler_pod_admits_the_probes_and_not_the_verbs(beside: RoleRun) -> None:
    pod = _workload(beside, SCHEDULER)
    ports = _container_ports(pod)
    admitted = _admitted(_policies(beside)[SCHEDULER])
    # kube-scheduler's secure port and the extender's probe port: what the kubelet probes
    wanted = {ports["kube-scheduler", "https"], ports["extender", "probes"]}
    assert admitted == _probe_ports(pod) == wanted
    # the scheduler beside it calls the verbs on 127.0.0.1, which no policy sees: nothing else may
    assert ports["extender", "extender"] not in admitted
    (config_text,) = beside.find("ConfigMap", SCHEDULER)["data"].values()
    (extender,) = yaml.safe_load(config_text)["extenders"]
    assert extender["urlPrefix"] == f"https://127.0.0.1:{ports['extender', 'extender']}"


def test_extender_alone_admits_the_sites_scheduler_and_the_probes(alone: RoleRun) -> None:
    pod = _workload(alone, EXTENDER)
    ports = _container_ports(pod)
    admitted = _admitted(_policies(alone)[EXTENDER])
    assert admitted == set(ports.values()) == {8443, 8444}
    assert _probe_ports(pod) == {ports["extender", "probes"]}
    # the site's scheduler calls the Service, which forwards to the verbs' port
    (service_port,) = alone.find("Service", EXTENDER)["spec"]["ports"]
    assert ports["extender", service_port["targetPort"]] in admitted


@pytest.mark.parametrize("version", [f"1.{minor}" for minor in range(28, 38)])
def test_policies_validate_strictly(beside: RoleRun, alone: RoleRun, version: str) -> None:
    for run in (beside, alone):
        for policy in _policies(run).values():
            kubernetes_validate.validate(policy, version, strict=True)


def test_1_20_rendering_has_only_fields_1_20_declares(render_dir: Path) -> None:
    run = run_role(
        render_dir,
        **EXTENDER_ON,
        **POLICY_ON,
        hygon_dcu_kubernetes_version="1.20",
    )
    assert run.returncode == 0, run.output
    assert set(_policies(run)) == {PLUGIN, WEBHOOK, SCHEDULER}
    for obj in run.objects():
        assert fields_missing_in_1_20(obj) == [], obj["kind"]


def test_the_1_20_check_knows_what_1_20_policies_lack(beside: RoleRun) -> None:
    policy = _policies(beside)[WEBHOOK]
    assert fields_missing_in_1_20(policy) == []
    policy["spec"]["ingress"][0]["ports"][0]["endPort"] = 8450  # from 1.21 on
    policy["status"] = {}  # from 1.24 on
    assert fields_missing_in_1_20(policy) == [
        "NetworkPolicy.spec.ingress[0].ports[0].endPort",
        "NetworkPolicy.status",
    ]


@pytest.mark.parametrize(
    ("sources", "named"),
    [
        ([], "[]"),
        (["10.20.0.0/24", "10.20.0.0/33"], '"10.20.0.0/33"'),
        (["10.20.0.7"], '"10.20.0.7"'),
        (["fd00:20::/129"], '"fd00:20::/129"'),
        (["control-plane.example/24"], '"control-plane.example/24"'),
        (["10.20.0.0/24\n"], '"10.20.0.0/24\\n"'),
        ("10.20.0.0/24", '"10.20.0.0/24"'),
    ],
)
def test_sources_that_are_not_cidrs_are_refused(render_dir: Path, sources: Any, named: str) -> None:
    run = run_role(
        render_dir,
        hygon_dcu_device_plugin_network_policy=True,
        hygon_dcu_device_plugin_network_policy_sources=sources,
    )
    assert run.returncode != 0
    assert "hygon_dcu_device_plugin_network_policy needs" in run.output
    assert named in run.output
    assert not render_dir.exists()  # refused before any change


def test_sources_are_ignored_while_switched_off(render_dir: Path) -> None:
    run = run_role(render_dir, hygon_dcu_device_plugin_network_policy_sources=["not a cidr"])
    assert run.returncode == 0, run.output
    assert _policies(run) == {}


def test_absent_removes_each_policy_after_its_pods(render_dir: Path) -> None:
    # whether or not they are on now: an earlier run may have made them
    run = run_role(render_dir, hygon_dcu_device_plugin_state="absent")
    assert run.returncode == 0, run.output
    removal = yaml.safe_load((render_dir / "removal.yaml").read_text())
    order = [(item["kind"], item["name"]) for item in removal]
    policies = [name for kind, name in order if kind == "NetworkPolicy"]
    assert sorted(policies) == sorted([PLUGIN, WEBHOOK, EXTENDER, SCHEDULER])
    for kind, name in [
        ("DaemonSet", PLUGIN),
        ("Deployment", WEBHOOK),
        ("Deployment", EXTENDER),
        ("Deployment", SCHEDULER),
    ]:
        assert order.index((kind, name)) < order.index(("NetworkPolicy", name))
    (entry,) = [
        item for item in removal if (item["kind"], item["name"]) == ("NetworkPolicy", PLUGIN)
    ]
    assert entry == {
        "api_version": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "name": PLUGIN,
        "namespace": NAMESPACE,
    }


# --- the CIDR check (vars/main.yml device_plugin__cidr_pattern), against Python's ipaddress ------


def _accepted(text: str) -> bool:
    # what ansible.builtin.regex does with it (re.search)
    return re.search(CIDR_PATTERN, text) is not None


@st.composite
def written_cidrs(draw: st.DrawFn) -> str:
    """ADDRESS/PREFIX as people write them: any address (host bits too), any prefix; IPv6
    compressed or not, in either case."""
    if draw(st.booleans()):
        address4 = ipaddress.IPv4Address(draw(st.integers(0, 2**32 - 1)))
        return f"{address4}/{draw(st.integers(0, 32))}"
    address = ipaddress.IPv6Address(draw(st.integers(0, 2**128 - 1)))
    text = draw(st.sampled_from([address.compressed, address.exploded]))
    if "." in text:  # an IPv4 tail (IPv4-mapped, on some Pythons), which the role refuses
        text = address.exploded
    return f"{draw(st.sampled_from([text, text.upper()]))}/{draw(st.integers(0, 128))}"


@given(written_cidrs())
@example("0.0.0.0/0")
@example("255.255.255.255/32")
@example("::/0")
@example("::1/128")
@example("fe80::/10")
@example("2001:db8::8a2e:370:7334/64")
@example("1:2:3:4:5:6:7::/112")
@example("::2:3:4:5:6:7:8/128")
def test_every_cidr_is_accepted(cidr: str) -> None:
    assert _accepted(cidr), cidr


def _one_edit(cidr_and_edit: tuple[str, int, str]) -> str:
    cidr, at, insert = cidr_and_edit
    return cidr[:at] + insert + cidr[at + 1 :]


@given(
    st.one_of(
        st.text(alphabet="0123456789abcdefABCDEF:./ \n", max_size=48),
        # a CIDR with one character replaced, removed or doubled
        written_cidrs()
        .flatmap(
            lambda cidr: st.tuples(
                st.just(cidr),
                st.integers(0, len(cidr)),
                st.sampled_from(["", "0", "f", ":", ".", "/", "::"]),
            )
        )
        .map(_one_edit),
    )
)
def test_whatever_is_accepted_is_a_cidr(text: str) -> None:
    if _accepted(text):
        network = ipaddress.ip_network(text, strict=False)  # raises ValueError otherwise
        address, _slash, prefix = text.partition("/")
        assert int(prefix) == network.prefixlen
        assert ipaddress.ip_address(address) in network


@pytest.mark.parametrize(
    "text",
    [
        "10.0.0.0/33",
        "10.0.0/8",
        "10.0.0.0",
        "10.0.0.0/",
        "10.0.0.0/8\n",
        " 10.0.0.0/8",
        "10.0.0.0/8,10.1.0.0/16",
        "1:2:3:4:5:6:7:8:9/64",
        "1::2::3/64",
        "12345::/64",
        "fd00::/129",
        "fe80::1%eth0/64",
        # valid elsewhere, refused here (the README says so): leading zeros, which Go's parser
        # refuses in octets, and IPv6 with an IPv4 tail
        "010.0.0.0/8",
        "10.0.0.0/08",
        "::ffff:10.0.0.1/128",
    ],
)
def test_what_is_refused(text: str) -> None:
    assert not _accepted(text)
