"""The entry point as the container runs it: a real process, JSON logs, SIGTERM ends it."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hygon_dcu_plugin.webhook.server import main
from webhook_pod_cases import FAMILY, container, pod
from webhook_support import PROCESS_PYTHONPATH, Authority, Running, admission_review


def _events(lines: list[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in lines if line.strip()]


def test_process_serves_drains_on_sigterm_and_logs_json(
    tmp_path: Path, authority: Authority
) -> None:
    cert_pem, key_pem, _ignored = authority.issue()
    (tmp_path / "tls.crt").write_bytes(cert_pem)
    (tmp_path / "tls.key").write_bytes(key_pem)
    env = {**os.environ, "PYTHONPATH": PROCESS_PYTHONPATH}
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hygon_dcu_plugin.webhook",
            "--address",
            "127.0.0.1",
            "--port",
            "0",
            "--cert-file",
            str(tmp_path / "tls.crt"),
            "--key-file",
            str(tmp_path / "tls.key"),
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

    try:
        listening = next_event("listening")
        running = Running(
            None, listening["port"], authority.pem, tmp_path / "tls.crt", tmp_path / "tls.key"
        )
        bad_pod = pod(container("train", {FAMILY: "1"}))
        status, answer = running.review(admission_review(bad_pod, uid="uid-main"))
        assert status == 200
        assert answer["response"]["allowed"] is False

        # First SIGTERM: out of the Service (health fails) but still answering reviews.
        process.send_signal(signal.SIGTERM)
        assert next_event("stopping")["delay_seconds"] == 600
        assert running.request("GET", "/healthz")[0] == 503
        status, answer = running.review(admission_review(bad_pod, uid="uid-draining"))
        assert (status, answer["response"]["uid"]) == (200, "uid-draining")
    finally:
        # Second SIGTERM: stop now (the test would hang on the 600 s delay otherwise).
        process.send_signal(signal.SIGTERM)
        rest = process.communicate(timeout=60)[1]
    assert process.returncode == 0
    events = _events(lines + rest.splitlines())
    # The image's one log schema (hygon_dcu_plugin/logs.py, docs/observability.md).
    assert all(list(event)[:4] == ["time", "level", "logger", "msg"] for event in events)
    assert all(event["time"].endswith("Z") for event in events)
    reviews = [event for event in events if event["msg"] == "admission_review"]
    assert [event["uid"] for event in reviews] == ["uid-main", "uid-draining"]
    assert reviews[0]["allowed"] is False
    assert reviews[0]["rules"] == ["family-without-profile"]
    assert reviews[0]["level"] == "info"
    assert reviews[0]["logger"] == "hygon_dcu_plugin.webhook.server"
    assert reviews[0]["why"].startswith('container "train" requests')
    assert events[-1]["msg"] == "stopped"


def test_missing_certificate_exits_2_with_a_clear_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        [
            "--address",
            "127.0.0.1",
            "--port",
            "0",
            "--cert-file",
            str(tmp_path / "none.crt"),
            "--key-file",
            str(tmp_path / "none.key"),
        ]
    )
    assert code == 2
    event = _events(capsys.readouterr().err.splitlines())[-1]
    assert event["msg"] == "startup_failed"
    assert "none.crt" in event["error"]


def test_a_taken_port_exits_2_naming_the_address(
    tmp_path: Path, authority: Authority, capsys: pytest.CaptureFixture[str]
) -> None:
    cert_pem, key_pem, _ignored = authority.issue()
    (tmp_path / "tls.crt").write_bytes(cert_pem)
    (tmp_path / "tls.key").write_bytes(key_pem)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code = main(
            [
                "--address",
                "127.0.0.1",
                "--port",
                str(port),
                "--cert-file",
                str(tmp_path / "tls.crt"),
                "--key-file",
                str(tmp_path / "tls.key"),
            ]
        )
    assert code == 2
    event = _events(capsys.readouterr().err.splitlines())[-1]
    assert event["msg"] == "startup_failed"
    assert event["error"].startswith(f"cannot listen on 127.0.0.1:{port}: ")


def test_usage_error_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--port", "eighty"]) == 2
    assert "--port" in capsys.readouterr().err
