"""``hygon-dcu-plugin extender`` as the container runs it: a real process against the fake API
server, JSON logs, its refresh thread, SIGTERM; and the flags it refuses."""

from __future__ import annotations

import json
import os
import signal
import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from hygon_dcu_plugin.cli import parser
from hygon_dcu_plugin.extender.main import main
from hygon_dcu_plugin.reservation import decode
from hygon_dcu_plugin.vocabulary import RESERVATION_ANNOTATION
from webhook_support import Authority, make_authority

from .fake_cluster import NAMESPACE, FakeCluster
from .support import Client, Geometries, client_certificate, occupy, profile_limits, text

REPO = Path(__file__).resolve().parents[4]


def _events(lines: list[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in lines if line.strip()]


class Process:
    """``hygon-dcu-plugin extender`` started as the container starts it, against ``cluster``;
    its JSON log read line by line."""

    def __init__(
        self, tmp_path: Path, authority: Authority, cluster: FakeCluster, *flags: str
    ) -> None:
        cert_pem, key_pem, _ignored = authority.issue()
        (tmp_path / "tls.crt").write_bytes(cert_pem)
        (tmp_path / "tls.key").write_bytes(key_pem)
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(
                [str(REPO / "plugin_image" / "src"), str(REPO / ".venv" / "collections")]
            ),
            "POD_NAMESPACE": NAMESPACE,  # as the Deployment's downward API sets it
        }
        self.popen = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "hygon_dcu_plugin",
                "extender",
                "--address",
                "127.0.0.1",
                "--port",
                "0",
                "--cert-file",
                str(tmp_path / "tls.crt"),
                "--key-file",
                str(tmp_path / "tls.key"),
                "--kubeconfig",
                str(cluster.kubeconfig(tmp_path / "kubeconfig")),
                *flags,
            ],
            env=env,
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
        )
        self.lines: list[str] = []

    def next_event(self, name: str) -> dict[str, Any]:
        assert self.popen.stderr is not None
        while line := self.popen.stderr.readline():
            self.lines.append(line)
            event: dict[str, Any] = json.loads(line)
            if event["msg"] == name:
                return event
        raise AssertionError(f"the process ended before logging {name}: {self.lines}")

    def ready_client(self, authority: Authority) -> Client:
        """A client of the process once it listens and its first lists are done."""
        client = Client(self.next_event("listening")["port"], authority.pem)
        deadline = time.monotonic() + 30
        while client.request("GET", "/healthz")[0] != 200 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert client.request("GET", "/healthz") == (200, b"ok\n")
        return client

    def kill(self) -> None:
        self.popen.kill()
        self.popen.communicate(timeout=60)


def test_the_process_serves_refreshes_binds_and_stops_on_sigterm(
    tmp_path: Path, authority: Authority, cluster: FakeCluster, geometries: Geometries
) -> None:
    pod = cluster.add_pod("train", {"main": profile_limits("2g.15gb")})
    process = Process(
        tmp_path,
        authority,
        cluster,
        "--refresh-seconds",
        "0.2",
        "--policy",
        "spread",
        "--shutdown-delay-seconds",
        "600",
    )
    draining = False
    try:
        listening = process.next_event("listening")
        assert (listening["namespace"], listening["policy"]) == (NAMESPACE, "spread")
        running = Client(listening["port"], authority.pem)
        # Ready (the readiness probe's view) once the refresh thread listed the Leases.
        deadline = time.monotonic() + 30
        while running.request("GET", "/healthz")[0] != 200 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert running.request("GET", "/healthz") == (200, b"ok\n")
        assert running.filter(pod, ["node-a"])["failedNodes"] == {"node-a": "no geometry published"}
        # The Lease appears later: the refresh thread picks it up by itself.
        cluster.put_lease("node-a", text(geometries.empty()), renewed=time.time())
        while running.filter(pod, ["node-a"])["nodenames"] != ["node-a"]:
            assert time.monotonic() < deadline, "the new Lease was never read"
            time.sleep(0.1)
        assert running.bind(pod, "node-a") == ""
        assert RESERVATION_ANNOTATION in cluster.pod("train")["metadata"]["annotations"]
        process.popen.send_signal(signal.SIGTERM)
        draining = True
        assert process.next_event("stopping")["delay_seconds"] == 600
        assert running.request("GET", "/healthz") == (503, b"shutting down\n")
    finally:
        if draining:
            process.popen.send_signal(signal.SIGTERM)  # the second one stops at once
        else:
            process.popen.kill()
        rest = process.popen.communicate(timeout=60)[1]
    assert process.popen.returncode == 0
    events = _events(process.lines + rest.splitlines())
    assert all(list(event)[:4] == ["time", "level", "logger", "msg"] for event in events)
    (bound,) = [e for e in events if e["msg"] == "bind"]
    assert (bound["pod"], bound["node"], bound["outcome"]) == ("train", "node-a", "bound")
    assert events[-1]["msg"] == "stopped"


def test_with_client_certificates_required_probes_and_scrapes_have_their_own_port(
    tmp_path: Path, authority: Authority, cluster: FakeCluster, geometries: Geometries
) -> None:
    client_ca = make_authority("scheduler client CA")
    (tmp_path / "client-ca.crt").write_bytes(client_ca.pem)
    (tmp_path / "scheduler").mkdir()
    scheduler_certificate = client_certificate(client_ca, tmp_path / "scheduler")
    cluster.put_lease("node-a", text(geometries.empty()), renewed=time.time())
    pod = cluster.add_pod("train", {"main": profile_limits("2g.15gb")})
    process = Process(
        tmp_path,
        authority,
        cluster,
        "--client-ca-file",
        str(tmp_path / "client-ca.crt"),
        "--probe-port",
        "0",
        "--refresh-seconds",
        "0.2",
        "--shutdown-delay-seconds",
        "600",
    )
    draining = False
    try:
        listening = process.next_event("listening")
        assert listening["client_certificates"] == "required"
        probes = Client(listening["probe_port"], authority.pem)  # no certificate, as the kubelet
        deadline = time.monotonic() + 30
        while probes.request("GET", "/healthz")[0] != 200 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert probes.request("GET", "/healthz") == (200, b"ok\n")
        # The verbs' port: refused at the handshake without the scheduler's certificate.
        with pytest.raises((ssl.SSLError, ConnectionError)):
            Client(listening["port"], authority.pem).request("GET", "/healthz")
        scheduler = Client(listening["port"], authority.pem, certificate=scheduler_certificate)
        assert scheduler.filter(pod, ["node-a"])["nodenames"] == ["node-a"]
        # Prometheus reads the scheduler's filter on the probes' port, with no certificate; no
        # verb is served there.
        status, page = probes.request("GET", "/metrics")
        assert status == 200
        assert b'hygon_dcu_extender_request_duration_seconds_count{verb="filter"} 1.0' in page
        for method, path in (("POST", "/filter"), ("POST", "/bind"), ("GET", "/prioritize")):
            body = b"{}" if method == "POST" else None
            assert probes.request(method, path, body)[0] == 404
        process.popen.send_signal(signal.SIGTERM)
        draining = True
        process.next_event("stopping")
        assert probes.request("GET", "/healthz") == (503, b"shutting down\n")
    finally:
        if draining:
            process.popen.send_signal(signal.SIGTERM)
        else:
            process.popen.kill()
        process.popen.communicate(timeout=60)
    assert process.popen.returncode == 0


def test_a_retry_to_another_node_while_the_first_bind_runs_leaves_the_pod_bound_once(
    tmp_path: Path, authority: Authority, cluster: FakeCluster, geometries: Geometries
) -> None:
    """The scheduler gave up on a slow bind (httpTimeout) and sent the pod's bind again, to
    another node, while the first still ran: one node, one reservation, still counted."""
    one_card = geometries.empty("c3000-bw", cards=1)
    now = time.time()
    cluster.put_lease("node-a", text(occupy(one_card, 0, 0, 3)), renewed=now)  # one slot left
    cluster.put_lease("node-b", text(one_card), renewed=now)
    pod = cluster.add_pod("train", {"main": profile_limits("2g.15gb")})
    other = cluster.add_pod("other", {"main": profile_limits("2g.15gb")})
    first_arrived, retry_arrived = threading.Event(), threading.Event()

    def delay_the_first(namespace: str, name: str, node: str) -> None:
        if node == "node-a":
            first_arrived.set()
            # Held until the retry's Binding arrives too, or 2 s when none comes meanwhile.
            retry_arrived.wait(2)
            return
        retry_arrived.set()
        deadline = time.monotonic() + 2  # the first Binding lands, then this one
        while not cluster.pod(name, namespace)["spec"].get("nodeName"):
            assert time.monotonic() < deadline
            time.sleep(0.01)

    cluster.before_each_binding(delay_the_first)
    process = Process(tmp_path, authority, cluster, "--refresh-seconds", "0.2")
    try:
        running = process.ready_client(authority)
        assert running.filter(pod, ["node-a", "node-b"])["nodenames"] == ["node-a", "node-b"]
        errors: dict[str, str] = {}

        def bind(node: str) -> None:
            errors[node] = running.bind(pod, node)

        first = threading.Thread(target=bind, args=("node-a",))
        first.start()
        assert first_arrived.wait(30)
        retry = threading.Thread(target=bind, args=("node-b",))
        retry.start()
        first.join(60)
        retry.join(60)
        assert errors["node-a"] == ""
        assert errors["node-b"] == "pod ml/train is already bound to node-a"
        stored = cluster.pod("train")
        assert stored["spec"]["nodeName"] == "node-a"
        reservation = decode(stored["metadata"]["annotations"][RESERVATION_ANNOTATION])
        assert reservation.node == "node-a"
        assert running.metric("hygon_dcu_extender_reservations") == 1
        # Its slice on node-a is still counted: nothing else fits there.
        answer = running.filter(other, ["node-a"])
        assert answer["failedNodes"]["node-a"].startswith("no free placement")
    finally:
        process.kill()


def test_a_lease_renewed_in_the_future_is_stale_once_the_extender_sees_no_renewal(
    tmp_path: Path, authority: Authority, cluster: FakeCluster, geometries: Geometries
) -> None:
    """A writer's clock a day ahead: staleness is the extender's own observation that the
    Lease stopped changing, not renewTime + leaseDurationSeconds."""
    geometry_text = text(geometries.empty())
    pod = cluster.add_pod("train", {"main": profile_limits("2g.15gb")})
    process = Process(tmp_path, authority, cluster, "--refresh-seconds", "0.2")

    def node_a() -> str:
        """ "" when node-a passes the filter, else why it fails."""
        answer = running.filter(pod, ["node-a"])
        return "" if answer["nodenames"] == ["node-a"] else str(answer["failedNodes"]["node-a"])

    def until(what: str, done: Any, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not done():
            assert time.monotonic() < deadline, f"not {what} within {seconds:g} s: {node_a()!r}"
            time.sleep(0.1)

    try:
        running = process.ready_client(authority)
        cluster.put_lease("node-a", geometry_text, renewed=time.time() + 86400, duration=3)
        # First sight: trusted for one duration.
        until("schedulable on first sight", lambda: node_a() == "", 10)
        # Never renewed since: stale after its 3 s, whatever renewTime says.
        until("stale", lambda: node_a().startswith("geometry stale: no renewal seen for"), 15)
        # A renewal the extender sees makes it current again.
        cluster.put_lease("node-a", geometry_text, renewed=time.time() + 86400, duration=3)
        until("schedulable after a renewal", lambda: node_a() == "", 10)
    finally:
        process.kill()


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        ([], "--namespace is required"),
        (["--namespace", "Bad_NS"], "--namespace 'Bad_NS' must be a DNS label"),
        (["--namespace", "ns", "--refresh-seconds", "0"], "--refresh-seconds 0 must be"),
        (["--namespace", "ns", "--reservation-seconds", "inf"], "--reservation-seconds inf"),
        (
            ["--namespace", "ns", "--refresh-seconds", "10", "--reservation-seconds", "20"],
            "at least 3 x --refresh-seconds",
        ),
        (["--namespace", "ns", "--cert-file", "/nonexistent/tls.crt"], "/nonexistent/tls.crt"),
    ],
)
def test_unusable_flags_exit_2_with_a_log_naming_them(
    flags: list[str],
    says: str,
    tmp_path: Path,
    cluster: FakeCluster,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    kubeconfig = str(cluster.kubeconfig(tmp_path / "kubeconfig"))
    assert main(["--port", "0", "--kubeconfig", kubeconfig, *flags]) == 2
    event = _events(capsys.readouterr().err.splitlines())[-1]
    assert event["msg"] == "startup_failed"
    assert says in event["error"]


def test_the_cli_lists_the_extender_and_rejects_an_unknown_policy(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert "extender" in parser().format_help()
    assert main(["--policy", "random"]) == 2
    assert "invalid choice: 'random'" in capsys.readouterr().err
