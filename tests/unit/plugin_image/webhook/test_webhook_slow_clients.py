"""The webhook keeps answering the API server and the kubelet's probes while other clients hold
connections without making requests: idle after the handshake, never handshaking, or sending a
handshake or request head that never ends. All over real TLS on loopback."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from misbehaving_clients import HEAD_START, Crowd, closed_within
from webhook_pod_cases import container, pod
from webhook_support import PROCESS_PYTHONPATH, Authority, Running, admission_review, serving

# What the API server and the kubelet must still get: an answer this fast.
ANSWER_SECONDS = 2.0
# The bar for a handshake or a request head that never ends: cut off within a few seconds.
CUT_OFF_SECONDS = 5.0


@contextlib.contextmanager
def webhook_process(directory: Path, authority: Authority) -> Iterator[Running]:
    """``python -m hygon_dcu_plugin.webhook`` with its production limits, as the container
    runs it; killed on exit."""
    cert_pem, key_pem, _ignored = authority.issue()
    (directory / "tls.crt").write_bytes(cert_pem)
    (directory / "tls.key").write_bytes(key_pem)
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
            str(directory / "tls.crt"),
            "--key-file",
            str(directory / "tls.key"),
        ],
        env={**os.environ, "PYTHONPATH": PROCESS_PYTHONPATH},
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert process.stderr is not None
        port = None
        while port is None and (line := process.stderr.readline()):
            event = json.loads(line)
            if event["msg"] == "listening":
                port = int(event["port"])
        assert port is not None, "the webhook ended before it listened"
        yield Running(None, port, authority.pem, directory / "tls.crt", directory / "tls.key")
    finally:
        process.kill()
        process.communicate(timeout=60)


def _timed(running: Running, method: str, path: str, body: bytes | None = None) -> Any:
    """(status, body, seconds) of one request on a new connection."""
    started = time.monotonic()
    connection = http.client.HTTPSConnection(
        "127.0.0.1", running.port, context=running.client_context(), timeout=ANSWER_SECONDS + 1
    )
    try:
        headers = {"Content-Type": "application/json"} if body is not None else {}
        connection.request(method, path, body=body, headers=headers)
        response = connection.getresponse()
        return response.status, response.read(), time.monotonic() - started
    finally:
        connection.close()


def _assert_answers_promptly(running: Running) -> None:
    status, body, seconds = _timed(running, "GET", "/healthz")
    assert (status, body) == (200, b"ok\n")
    assert seconds < ANSWER_SECONDS
    review = json.dumps(admission_review(pod(container("a")))).encode()
    status, body, seconds = _timed(running, "POST", "/validate", review)
    assert status == 200
    assert json.loads(body)["response"]["allowed"] is True
    assert seconds < ANSWER_SECONDS


def test_idle_and_unhandshaken_connections_do_not_keep_probes_or_reviews_out(
    tmp_path: Path, authority: Authority
) -> None:
    with (
        webhook_process(tmp_path, authority) as running,
        Crowd(running.port, running.client_context()) as crowd,
    ):
        crowd.idle_tls(64)
        crowd.unhandshaken(64)
        _assert_answers_promptly(running)


def test_one_client_address_beginning_heads_cannot_take_every_connection(
    tmp_path: Path, authority: Authority
) -> None:
    """Another pod, at its own address, sends request heads that never end: kept to a share of
    the connections, while the API server and the probes (here 127.0.0.1) are answered."""
    with (
        webhook_process(tmp_path, authority) as running,
        Crowd(running.port, running.client_context(), source="127.0.0.2") as crowd,
    ):
        crowd.heads_begun(64)
        crowd.hellos_begun(64)
        _assert_answers_promptly(running)


def test_a_handshake_begun_and_never_finished_is_cut_off_within_seconds(
    tmp_path: Path, authority: Authority
) -> None:
    with (
        serving(tmp_path, authority) as running,
        Crowd(running.port, running.client_context()) as crowd,
    ):
        crowd.hellos_begun(1)
        assert closed_within(crowd.sockets[0], CUT_OFF_SECONDS) is not None


def test_a_head_sent_a_byte_at_a_time_is_cut_off_within_seconds(
    tmp_path: Path, authority: Authority
) -> None:
    """Bytes of the head keep arriving, each well within any per-read timeout: the head as a
    whole has a deadline of a few seconds (the body has its own, longer one)."""
    with serving(tmp_path, authority) as running:
        context = running.client_context()
        with (
            socket.create_connection(("127.0.0.1", running.port), timeout=10) as plain,
            context.wrap_socket(plain, server_hostname="127.0.0.1") as tls,
        ):
            started = time.monotonic()
            tls.setblocking(False)
            answer = b""
            for byte in HEAD_START * 10:
                with contextlib.suppress(ssl.SSLWantReadError):
                    answer += tls.recv(65536)
                if answer or time.monotonic() - started > 2 * CUT_OFF_SECONDS:
                    break
                with contextlib.suppress(ssl.SSLWantWriteError, ssl.SSLWantReadError):
                    tls.sendall(bytes([byte]))
                time.sleep(0.25)
            seconds = time.monotonic() - started
        assert answer.startswith(b"HTTP/1.1 408 "), answer[:100]
        assert seconds < CUT_OFF_SECONDS


def test_a_new_connection_takes_an_idle_ones_place_never_a_request_in_progress(
    tmp_path: Path, authority: Authority
) -> None:
    """With every connection taken, a new one is served in place of an idle one; a review
    whose body is still arriving is left to finish."""
    body = json.dumps(admission_review(pod(container("a")))).encode()
    head = (
        b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + b"Expect: 100-continue\r\nConnection: close\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
    )
    with serving(tmp_path, authority, max_connections=4) as running:
        context = running.client_context()
        # The review in progress comes from an address of its own (another API server): at
        # 127.0.0.1 it would hold one of that address's two busy connections, and the test's
        # next request could find its previous one still counted busy for a moment (the
        # server marks it done just after the client has read the answer) and be refused.
        with (
            socket.create_connection(
                ("127.0.0.1", running.port), timeout=10, source_address=("127.0.0.3", 0)
            ) as plain,
            context.wrap_socket(plain, server_hostname="127.0.0.1") as in_progress,
            Crowd(running.port, context) as crowd,
        ):
            # The interim answer to Expect says the server has read the head: the request is
            # in progress on its side before the crowd arrives.
            in_progress.sendall(head)
            assert in_progress.recv(65536).startswith(b"HTTP/1.1 100 ")
            in_progress.sendall(body[:10])
            crowd.idle_tls(3)
            crowd.unhandshaken(8)
            _assert_answers_promptly(running)
            in_progress.sendall(body[10:])
            answer = b""
            while chunk := in_progress.recv(65536):  # to the end: the server closes
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 200 "), answer[:100]
        assert b'"allowed": true' in answer
