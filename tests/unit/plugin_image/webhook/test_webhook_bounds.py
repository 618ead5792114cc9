"""What the webhook does with hostile or huge input, over real HTTPS: a 4xx or a denial, never a
500, bounded answers, and a connection cap that sheds load without wedging the server."""

from __future__ import annotations

import contextlib
import json
import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hygon_dcu_plugin.pod_rules import MAX_MESSAGE_CHARS
from hygon_dcu_plugin.request import Reason
from hygon_dcu_plugin.serving.server import DEFAULT_MAX_BODY, MAX_HEADER_BYTES
from hygon_dcu_plugin.webhook.review import decide
from misbehaving_clients import Crowd
from webhook_pod_cases import FAMILY, P2G, container, pod
from webhook_support import Authority, Running, admission_review, serving

HEADERS = {"Content-Type": "application/json"}


@pytest.fixture
def default_webhook(tmp_path: Path, authority: Authority) -> Iterator[Running]:
    """The server with its production limits."""
    with serving(tmp_path, authority) as running:
        yield running


def _post(running: Running, body: bytes) -> tuple[int, dict[str, Any]]:
    status, _ignored, raw = running.request("POST", "/validate", body, HEADERS)
    return status, json.loads(raw)


def _denied_rules(running: Running, pod_spec: dict[str, Any]) -> set[str]:
    status, answer = running.review(admission_review(pod_spec))
    assert status == 200
    assert answer["response"]["allowed"] is False
    return set(_rules_in(answer["response"]["status"]["message"]))


def _rules_in(message: str) -> Iterator[str]:
    """Which rules a message reports, by the phrase each rule's message carries."""
    phrases = {
        "without a profile": Reason.FAMILY_WITHOUT_PROFILE.value,
        "which is not a quantity": Reason.QUANTITY_NOT_WHOLE.value,
        "which is not a whole number": Reason.QUANTITY_NOT_WHOLE.value,
        "one partition per container": Reason.QUANTITY_NOT_ONE.value,
    }
    for phrase, rule in phrases.items():
        if phrase in message:
            yield rule


def test_body_over_the_default_cap_is_refused_on_content_length(
    default_webhook: Running,
) -> None:
    # The 8 MiB that once took 242 MiB to parse is refused before a byte of it is read.
    answer = _raw_exchange(
        default_webhook,
        b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {8 * 1024 * 1024}\r\n\r\n".encode(),
    )
    assert answer.startswith(b"HTTP/1.1 413 ")
    assert f"at most {DEFAULT_MAX_BODY}".encode() in answer


def test_costly_body_under_the_cap_is_413_before_parsing(default_webhook: Running) -> None:
    # 2.5 MiB of empty objects would take ~60 MiB as Python objects.
    filler = b"{}," * (850 * 1024)
    review = json.dumps(admission_review(pod(container("a")))).encode()
    body = review[:-1] + b', "padding": [' + filler + b"{}]}"
    assert len(body) < DEFAULT_MAX_BODY
    status, error = _post(default_webhook, body)
    assert (status, error["reason"]) == (413, "body-too-complex")
    status, answer = default_webhook.review(admission_review(pod(container("a"))))
    assert (status, answer["response"]["allowed"]) == (200, True)


@pytest.mark.parametrize(
    "where",
    ["top", "quantity", "uid"],
)
def test_integer_of_5000_digits_is_400(running_webhook: Running, where: str) -> None:
    digits = "7" * 5000
    review = admission_review(pod(container("a", {FAMILY: 0, P2G: "1"})))
    text = json.dumps(review)
    if where == "top":
        text = text[:-1] + f', "n": {digits}}}'
    elif where == "quantity":
        text = text.replace(f'"{FAMILY}": 0', f'"{FAMILY}": {digits}')
    else:
        text = text.replace('"uid": "705ab4f5-6393-11e8-b7cc-42010a800002"', f'"uid": {digits}')
    assert digits in text
    status, error = _post(running_webhook, text.encode())
    assert status == 400
    assert error["reason"] == "invalid-json"
    assert "number of 5000 characters" in error["error"]


@pytest.mark.parametrize(
    ("limits", "rules"),
    [
        ({FAMILY: "1e9999", P2G: "1"}, {"quantity-not-whole"}),
        ({FAMILY: "1e9999"}, {"quantity-not-whole", "family-without-profile"}),
        ({FAMILY: "1", P2G: "1e9999"}, {"quantity-not-whole"}),
        ({FAMILY: "1000.0000000000000000000000001m", P2G: "1"}, {"quantity-not-whole"}),
        ({FAMILY: "1.0000000000000000000000000001", P2G: "1"}, {"quantity-not-whole"}),
        ({FAMILY: "0.99999999999999999999999999999", P2G: "1"}, {"quantity-not-whole"}),
        ({FAMILY: "1e1", P2G: "1"}, {"quantity-not-one"}),
        ({FAMILY: "1Ki", P2G: "1"}, {"quantity-not-one"}),
    ],
)
def test_quantities_that_are_not_exactly_one_are_denied(
    running_webhook: Running, limits: dict[str, str], rules: set[str]
) -> None:
    assert _denied_rules(running_webhook, pod(container("train", limits))) == rules


@pytest.mark.parametrize("one", ["1", "1.0", "1000m", "0.001k", "1e0", "10e-1", "1000000000n"])
def test_spellings_of_exactly_one_are_still_admitted(running_webhook: Running, one: str) -> None:
    status, answer = running_webhook.review(
        admission_review(pod(container("t", {FAMILY: one, P2G: one})))
    )
    assert (status, answer["response"]["allowed"]) == (200, True)


def _many_wrong_containers(count: int) -> dict[str, Any]:
    return pod(*(container(f"c{index}", {FAMILY: "1"}) for index in range(count)))


def test_denial_of_66k_containers_is_bounded_and_says_what_was_cut() -> None:
    # Checked as a pure function: a pod this large is refused by the parse budget over HTTP.
    decision = decide(admission_review(_many_wrong_containers(66_000)))
    response = decision.response()["response"]
    message = response["status"]["message"]
    assert response["allowed"] is False
    assert len(message) <= MAX_MESSAGE_CHARS
    assert decision.findings.total == 66_000
    shown = message.count("without a profile")
    assert shown >= 1
    assert message.endswith(
        f"and {66_000 - shown} more violations not shown; "
        "fix these and create the pod again to see them"
    )


def test_denial_over_https_is_bounded(default_webhook: Running) -> None:
    status, answer = default_webhook.review(admission_review(_many_wrong_containers(5_000)))
    assert status == 200
    message = answer["response"]["status"]["message"]
    assert len(message) <= MAX_MESSAGE_CHARS
    assert "more violations not shown" in message
    metric = 'hygon_dcu_admission_denials_total{rule="family-without-profile"}'
    assert default_webhook.metric(metric) == 1


def test_huge_names_and_values_are_shortened_in_the_message(running_webhook: Running) -> None:
    name = "n" * 20_000
    resource = "hygon.com/dcu.partitioned.x" + "y" * 20_000
    spec = pod(container(name, {FAMILY: "1", P2G: "x" * 20_000, resource: "1"}))
    status, answer = running_webhook.review(admission_review(spec))
    assert status == 200
    message = answer["response"]["status"]["message"]
    assert len(message) < 2_000
    assert "(20000 characters)" in message


def _raw_exchange(running: Running, request: bytes, timeout: float = 20) -> bytes:
    context = running.client_context()
    with (
        socket.create_connection(("127.0.0.1", running.port), timeout=timeout) as plain,
        context.wrap_socket(plain, server_hostname="127.0.0.1") as tls,
    ):
        tls.sendall(request)
        chunks = []
        try:
            while chunk := tls.recv(65536):
                chunks.append(chunk)
        except (ssl.SSLError, ConnectionResetError):
            pass
    return b"".join(chunks)


@pytest.mark.parametrize("length", ["+5", "1_0", "-1", "0x10", "9" * 40, "٣"])
def test_odd_content_length_is_400(running_webhook: Running, length: str) -> None:
    answer = _raw_exchange(
        running_webhook,
        b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {length}\r\n\r\n".encode(),
    )
    assert answer.startswith(b"HTTP/1.1 400 ")
    assert b"bad-content-length" in answer


def test_headers_over_the_allowance_are_431(running_webhook: Running) -> None:
    # Each header is far under http.server's own limit (64 KiB a line, 100 lines).
    filler = b"".join(b"X-Filler-%02d: %s\r\n" % (n, b"f" * 900) for n in range(40))
    request = b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + filler
    assert len(request) > MAX_HEADER_BYTES
    answer = _raw_exchange(running_webhook, request)
    assert answer.startswith(b"HTTP/1.1 431 ")
    assert running_webhook.request("GET", "/healthz")[0] == 200


def test_a_request_trickled_past_its_deadline_is_cut_off(
    tmp_path: Path, authority: Authority
) -> None:
    """A client that sends a byte at a time, each well within any per-read timeout."""
    body = json.dumps(admission_review(pod(container("a")))).encode()
    request = (
        b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    with serving(tmp_path, authority, request_timeout=1.0) as running:
        context = running.client_context()
        answer = b""
        with (
            socket.create_connection(("127.0.0.1", running.port), timeout=20) as plain,
            context.wrap_socket(plain, server_hostname="127.0.0.1") as tls,
        ):
            # Sent whole, this would take over a minute; the deadline is 1 s. A byte is sent
            # each 0.1 s until the server answers or stops taking them.
            tls.setblocking(False)
            for index in range(len(request)):
                time.sleep(0.1)
                with contextlib.suppress(ssl.SSLWantReadError):
                    answer += tls.recv(65536)
                if answer:
                    break
                try:
                    tls.sendall(request[index : index + 1])
                except (ssl.SSLWantWriteError, ssl.SSLWantReadError):
                    pass
                except OSError:
                    break
            tls.setblocking(True)
            tls.settimeout(10)
            with contextlib.suppress(OSError):
                while chunk := tls.recv(65536):
                    answer += chunk
        assert answer.startswith(b"HTTP/1.1 408 "), answer[:100]
        assert running.metric('hygon_dcu_admission_bad_requests_total{reason="read-timeout"}') == 1


def test_connections_over_the_cap_are_closed_at_once_and_the_server_recovers(
    tmp_path: Path, authority: Authority
) -> None:
    cap = 4
    with serving(tmp_path, authority, max_connections=cap) as running:
        assert running.server is not None
        context = running.client_context()
        # Connections that begin a handshake and never finish it: each holds a slot, busy
        # (not one an idle connection gives way to). Two client addresses, as one may have
        # only half the slots busy.
        with (
            Crowd(running.port, context, source="127.0.0.2") as first,
            Crowd(running.port, context, source="127.0.0.3") as second,
            Crowd(running.port, context) as extra,
        ):
            first.hellos_begun(cap // 2)
            second.hellos_begun(cap // 2)
            deadline = time.monotonic() + 10
            while running.server.slots.busy() < cap:
                assert time.monotonic() < deadline, "the server never saw the handshakes begin"
                time.sleep(0.01)
            extra.unhandshaken(3)
            for connection in extra.sockets:
                # Without the cap, each would wait here for the handshake timeout.
                connection.settimeout(2)
                # Closed by the server without a byte: end of stream (or a reset), not a wait.
                with contextlib.suppress(ConnectionResetError):
                    assert connection.recv(1) == b""
        # The slots come back once the holders are gone; a normal review is answered. A try
        # made before the server saw the holders close is refused too, and counted.
        deadline = time.monotonic() + 20
        refused_retries = 0
        while True:
            try:
                status, answer = running.review(admission_review(pod(container("a"))))
                break
            except (ssl.SSLError, ConnectionError):
                assert time.monotonic() < deadline, "the server never took connections again"
                refused_retries += 1
                time.sleep(0.1)
        assert (status, answer["response"]["allowed"]) == (200, True)
        refused = running.metric("hygon_dcu_admission_connections_refused_total")
        assert refused == 3 + refused_retries
