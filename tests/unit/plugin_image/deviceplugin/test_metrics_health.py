"""Prometheus text, liveness/readiness endpoint, structured logs, Kubernetes access list."""

from __future__ import annotations

import json
import logging
import socket
import threading
import urllib.error
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hygon_dcu_plugin.deviceplugin.health import HealthServer, MetricsServer
from hygon_dcu_plugin.deviceplugin.metrics import Metrics
from hygon_dcu_plugin.kube import (
    API_ACCESS,
    LEASE_ACCESS,
    LOST_POD_DELETE_ACCESS,
    NODE_LABEL_ACCESS,
    pod_from_api,
)
from hygon_dcu_plugin.logs import JsonFormatter
from hygon_dcu_plugin.refusal import AllocateRefusal
from kubernetes import client


def test_metrics_text() -> None:
    metrics = Metrics()
    metrics.allocations.labels("2g.15gb").inc()
    metrics.allocation_failures.labels("no_capacity").inc()
    metrics.live_instances.set_all({(("profile", "2g.15gb"),): 3})
    metrics.allocate_seconds.observe(0.03)
    text = metrics.render()
    assert 'hygon_dcu_allocations_total{profile="2g.15gb"} 1.0' in text
    assert 'hygon_dcu_allocation_failures_total{reason="no_capacity"} 1.0' in text
    assert 'hygon_dcu_live_instances{profile="2g.15gb"} 3.0' in text
    assert 'hygon_dcu_allocate_duration_seconds_bucket{le="0.025"} 0.0' in text
    assert 'hygon_dcu_allocate_duration_seconds_bucket{le="0.05"} 1.0' in text
    assert "hygon_dcu_allocate_duration_seconds_count 1.0" in text
    assert "# TYPE hygon_dcu_reclaim_actions_total counter" in text


def test_every_failure_reason_starts_at_zero_and_is_documented() -> None:
    text = Metrics().render()
    reference = (Path(__file__).resolve().parents[4] / "docs" / "observability.md").read_text()
    (row,) = [
        line
        for line in reference.splitlines()
        if line.startswith("| `hygon_dcu_allocation_failures_total`")
    ]
    for refusal in AllocateRefusal:
        assert f'hygon_dcu_allocation_failures_total{{reason="{refusal.value}"}} 0.0' in text
        assert f"`{refusal.value}`" in row
        assert f"`{refusal.status}`" in row


def get(port: int, path: str, host: str = "127.0.0.1") -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://{host}:{port}{path}", timeout=10) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_health_endpoint() -> None:
    state = {"ready": False}
    server = HealthServer("127.0.0.1:0", lambda: True, lambda: state["ready"])
    server.start()
    try:
        assert get(server.port, "/healthz") == (200, "ok\n")
        assert get(server.port, "/readyz")[0] == 503
        state["ready"] = True
        assert get(server.port, "/readyz") == (200, "ok\n")
        # the probe listener is on the pod's address: /metrics is not there
        assert get(server.port, "/metrics")[0] == 404
        assert get(server.port, "/other")[0] == 404
    finally:
        server.stop()


def test_metrics_on_a_listener_of_its_own() -> None:
    server = MetricsServer("127.0.0.1:0", lambda: "m 1\n")
    server.start()
    try:
        assert get(server.port, "/metrics") == (200, "m 1\n")
        assert get(server.port, "/healthz")[0] == 404
        assert get(server.port, "/readyz")[0] == 404
    finally:
        server.stop()


def test_metrics_on_an_ipv6_address() -> None:
    # the role writes an IPv6 host in brackets
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError as error:
        pytest.skip(f"no IPv6 loopback here: {error}")
    server = MetricsServer("[::1]:0", lambda: "m 1\n")
    server.start()
    try:
        assert server.server.address_family == socket.AF_INET6
        assert get(server.port, "/metrics", "[::1]") == (200, "m 1\n")
    finally:
        server.stop()


def test_a_listener_that_never_served_stops() -> None:
    # what serve does with the health listener when the metrics port is taken
    server = HealthServer("127.0.0.1:0", lambda: True, lambda: True)
    stopping = threading.Thread(target=server.stop, daemon=True)
    stopping.start()
    stopping.join(timeout=10)
    assert not stopping.is_alive(), "stop() waits for a serve_forever that never ran"
    assert server.server.socket.fileno() == -1  # the port is free again


def test_logs_are_json_lines_with_extra_fields() -> None:
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "granted", (), None)
    record.uuid = "abc"
    line = json.loads(JsonFormatter().format(record))
    assert line["msg"] == "granted" and line["uuid"] == "abc" and line["level"] == "info"


def test_every_kubernetes_call_is_listed_for_rbac() -> None:
    assert set(API_ACCESS) == {
        ("", "pods", "get"),
        ("", "pods", "patch"),
        ("", "pods", "list"),
        ("", "pods", "watch"),
        ("", "events", "create"),
    }
    # deleting a pod is the opt-in's alone (delete_pods_with_lost_partitions)
    assert set(LOST_POD_DELETE_ACCESS) == {("", "pods", "delete")}
    # reading and labelling the node is the node_labels opt-in's alone
    assert set(NODE_LABEL_ACCESS) == {("", "nodes", "get"), ("", "nodes", "patch")}


def test_the_geometry_lease_calls_are_listed_apart_for_a_namespaced_role() -> None:
    # A Role in the plugin's namespace grants these; the ClusterRole (API_ACCESS) must not,
    # or a plugin pod could rewrite every namespace's Leases (docs/dev/extender.md).
    assert set(LEASE_ACCESS) == {
        ("coordination.k8s.io", "leases", "get"),
        ("coordination.k8s.io", "leases", "create"),
        ("coordination.k8s.io", "leases", "update"),
    }
    assert not {resource for _group, resource, _verb in API_ACCESS} & {"leases"}


def test_pod_from_the_kubernetes_client() -> None:
    obj = client.V1Pod(
        metadata=client.V1ObjectMeta(
            name="p",
            namespace="ns",
            uid="u1",
            creation_timestamp=datetime(2026, 1, 1, tzinfo=UTC),
            deletion_timestamp=datetime(2026, 1, 2, tzinfo=UTC),
        ),
        spec=client.V1PodSpec(
            containers=[
                client.V1Container(
                    name="main",
                    resources=client.V1ResourceRequirements(
                        limits={"hygon.com/dcu.partitioned": "1"}
                    ),
                )
            ],
            init_containers=[client.V1Container(name="init")],
        ),
        status=client.V1PodStatus(phase="Running"),
    )
    pod = pod_from_api(obj)
    assert (pod.key, pod.uid, pod.phase, pod.deleting) == ("ns/p", "u1", "Running", True)
    assert pod.containers[0].limits == {"hygon.com/dcu.partitioned": "1"}
    assert pod.init_containers[0].limits == {}
    assert pod.created == datetime(2026, 1, 1, tzinfo=UTC).timestamp()
