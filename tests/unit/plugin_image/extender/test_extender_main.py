"""``hygon-dcu-plugin extender`` as the container runs it: a real process against the fake API
server, JSON logs, its refresh thread, SIGTERM; and the flags it refuses."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from hygon_dcu_plugin.cli import parser
from hygon_dcu_plugin.extender.main import main
from hygon_dcu_plugin.vocabulary import RESERVATION_ANNOTATION
from webhook_support import Authority

from .fake_cluster import NAMESPACE, FakeCluster
from .support import Client, Geometries, profile_limits, text

REPO = Path(__file__).resolve().parents[4]


def _events(lines: list[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in lines if line.strip()]


def test_the_process_serves_refreshes_binds_and_stops_on_sigterm(
    tmp_path: Path, authority: Authority, cluster: FakeCluster, geometries: Geometries
) -> None:
    cert_pem, key_pem, _ignored = authority.issue()
    (tmp_path / "tls.crt").write_bytes(cert_pem)
    (tmp_path / "tls.key").write_bytes(key_pem)
    pod = cluster.add_pod("train", {"main": profile_limits("2g.15gb")})
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            [str(REPO / "plugin_image" / "src"), str(REPO / ".venv" / "collections")]
        ),
        "POD_NAMESPACE": NAMESPACE,  # as the Deployment's downward API sets it
    }
    process = subprocess.Popen(
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
            "--refresh-seconds",
            "0.2",
            "--policy",
            "spread",
            "--shutdown-delay-seconds",
            "600",
        ],
        env=env,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    lines: list[str] = []

    def next_event(name: str) -> dict[str, Any]:
        assert process.stderr is not None
        while line := process.stderr.readline():
            lines.append(line)
            event: dict[str, Any] = json.loads(line)
            if event["msg"] == name:
                return event
        raise AssertionError(f"the process ended before logging {name}: {lines}")

    draining = False
    try:
        listening = next_event("listening")
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
        process.send_signal(signal.SIGTERM)
        draining = True
        assert next_event("stopping")["delay_seconds"] == 600
        assert running.request("GET", "/healthz") == (503, b"shutting down\n")
    finally:
        if draining:
            process.send_signal(signal.SIGTERM)  # the second one stops at once
        else:
            process.kill()
        rest = process.communicate(timeout=60)[1]
    assert process.returncode == 0
    events = _events(lines + rest.splitlines())
    assert all(list(event)[:4] == ["time", "level", "logger", "msg"] for event in events)
    (bound,) = [e for e in events if e["msg"] == "bind"]
    assert (bound["pod"], bound["node"], bound["outcome"]) == ("train", "node-a", "bound")
    assert events[-1]["msg"] == "stopped"


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
