"""The webhook over HTTPS (real TLS handshake, test CA), called the way the API server calls it."""

from __future__ import annotations

import json
import socket
import ssl
from typing import Any

import pytest
from hygon_dcu_plugin.pod_rules import check_pod
from webhook_pod_cases import CASES, FAMILY, Case, container, pod
from webhook_support import Running, admission_review, make_authority


def test_table_over_https(running_webhook: Running) -> None:
    """Every case of the table, one connection each, with the uid echoed and each message."""
    for number, case in enumerate(CASES):
        uid = f"00000000-0000-4000-8000-{number:012d}"
        status, answer = running_webhook.review(admission_review(case.pod, uid=uid))
        assert status == 200, case.id
        assert answer["apiVersion"] == "admission.k8s.io/v1"
        assert answer["kind"] == "AdmissionReview"
        response = answer["response"]
        assert response["uid"] == uid, case.id
        assert response["allowed"] is case.allowed, case.id
        if case.allowed:
            assert "status" not in response
            continue
        assert response["status"]["code"] == 403
        message = response["status"]["message"]
        for violation in check_pod(case.pod):
            assert violation.message in message, case.id
        for _ignored, container_name in case.denied:
            assert f'"{container_name}"' in message, case.id


def _case(case_id: str) -> Case:
    return next(case for case in CASES if case.id == case_id)


def test_decisions_are_counted_by_rule(running_webhook: Running) -> None:
    for case_id in ("limits-only", "family-without-profile", "two-containers-each-wrong"):
        status, _ignored = running_webhook.review(admission_review(_case(case_id).pod))
        assert status == 200

    def reviews(decision: str) -> float:
        return running_webhook.metric(f'hygon_dcu_admission_reviews_total{{decision="{decision}"}}')

    def denials(rule: str) -> float:
        return running_webhook.metric(f'hygon_dcu_admission_denials_total{{rule="{rule}"}}')

    assert reviews("allowed") == 1
    assert reviews("denied") == 2
    assert denials("family-without-profile") == 2
    assert denials("profile-without-family") == 1
    assert denials("two-profiles") == 0


def test_keep_alive_serves_several_reviews_on_one_connection(running_webhook: Running) -> None:
    connection = running_webhook.connect()
    try:
        for number, case in enumerate(CASES[:5]):
            connection.request(
                "POST",
                "/validate",
                body=json.dumps(admission_review(case.pod, uid=f"uid-{number}")).encode(),
                headers={"Content-Type": "application/json; charset=utf-8"},
            )
            response = connection.getresponse()
            answer = json.loads(response.read())
            assert answer["response"]["uid"] == f"uid-{number}"
    finally:
        connection.close()


@pytest.mark.parametrize("operation", ["UPDATE", "DELETE", "CONNECT"])
def test_only_create_is_judged(running_webhook: Running, operation: str) -> None:
    bad = pod(container("train", {FAMILY: "1"}))
    status, answer = running_webhook.review(admission_review(bad, operation=operation))
    assert status == 200
    assert answer["response"]["allowed"] is True


def test_other_resources_are_admitted(running_webhook: Running) -> None:
    bad = pod(container("train", {FAMILY: "1"}))
    status, answer = running_webhook.review(admission_review(bad, resource="deployments"))
    assert status == 200
    assert answer["response"]["allowed"] is True


def _post(
    running: Running, body: bytes, content_type: str = "application/json"
) -> tuple[int, dict[str, str], dict[str, Any]]:
    status, headers, raw = running.request(
        "POST", "/validate", body, {"Content-Type": content_type}
    )
    return status, headers, json.loads(raw)


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"{not json", "invalid-json"),
        (b"\xff\xfe\x00garbage", "invalid-json"),
        (b"", "invalid-json"),
        (b"[1, 2]", "not-an-object"),
        (b"[" * 20_000 + b"]" * 20_000, "invalid-json"),
        (
            json.dumps(
                {
                    "apiVersion": "admission.k8s.io/v1beta1",
                    "kind": "AdmissionReview",
                    "request": {"uid": "u"},
                }
            ).encode(),
            "wrong-kind",
        ),
        (
            json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}).encode(),
            "no-request",
        ),
        (
            json.dumps(
                {
                    "apiVersion": "admission.k8s.io/v1",
                    "kind": "AdmissionReview",
                    "request": {"operation": "CREATE"},
                }
            ).encode(),
            "no-uid",
        ),
        (json.dumps(admission_review(None)).encode(), "no-object"),
    ],
    ids=[
        "truncated",
        "not-utf8",
        "empty",
        "array",
        "too-deep",
        "v1beta1",
        "no-request",
        "no-uid",
        "no-object",
    ],
)
def test_malformed_body_gets_400_and_server_keeps_serving(
    running_webhook: Running, body: bytes, reason: str
) -> None:
    status, headers, error = _post(running_webhook, body)
    assert status == 400
    assert headers["Content-Type"] == "application/json"
    assert error["reason"] == reason
    assert error["code"] == 400
    assert error["error"]
    status, _ignored, text = running_webhook.request("GET", "/healthz")
    assert (status, text) == (200, b"ok\n")
    metric = f'hygon_dcu_admission_bad_requests_total{{reason="{reason}"}}'
    assert running_webhook.metric(metric) == 1


def test_wrong_content_type_is_415(running_webhook: Running) -> None:
    body = json.dumps(admission_review(pod(container("a")))).encode()
    status, _ignored, error = _post(running_webhook, body, "text/plain")
    assert status == 415
    assert "application/json" in error["error"]


@pytest.mark.parametrize(
    ("method", "path", "status", "allow"),
    [
        ("GET", "/validate", 405, "POST"),
        ("PUT", "/validate", 405, "POST"),
        ("DELETE", "/validate", 405, "POST"),
        ("POST", "/healthz", 405, "GET, HEAD"),
        ("PATCH", "/metrics", 405, "GET, HEAD"),
        ("GET", "/nothing", 404, None),
        ("POST", "/mutate", 404, None),
    ],
)
def test_wrong_method_or_path(
    running_webhook: Running, method: str, path: str, status: int, allow: str | None
) -> None:
    got, headers, raw = running_webhook.request(
        method, path, b"{}", {"Content-Type": "application/json"}
    )
    assert got == status
    assert json.loads(raw)["code"] == status
    assert headers.get("Allow") == allow


def _raw_exchange(running: Running, request: bytes) -> bytes:
    """Send bytes over TLS exactly as given (no client library fixing them up)."""
    context = running.client_context()
    with (
        socket.create_connection(("127.0.0.1", running.port), timeout=10) as plain,
        context.wrap_socket(plain, server_hostname="127.0.0.1") as tls,
    ):
        tls.sendall(request)
        chunks = []
        while chunk := tls.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def test_missing_content_length_is_411(running_webhook: Running) -> None:
    answer = _raw_exchange(
        running_webhook,
        b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Connection: close\r\n\r\n{}",
    )
    assert answer.startswith(b"HTTP/1.1 411 ")


def test_body_over_the_limit_is_413_without_reading_it(running_webhook: Running) -> None:
    # The fixture's server accepts 64 KiB; the body is announced but never sent.
    answer = _raw_exchange(
        running_webhook,
        b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: 70000\r\n\r\n",
    )
    assert answer.startswith(b"HTTP/1.1 413 ")
    assert b"at most 65536" in answer


def test_chunked_body_is_refused(running_webhook: Running) -> None:
    answer = _raw_exchange(
        running_webhook,
        b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
    )
    assert answer.startswith(b"HTTP/1.1 411 ")
    assert b"chunked" in answer


def test_body_shorter_than_content_length_is_refused(running_webhook: Running) -> None:
    context = running_webhook.client_context()
    with (
        socket.create_connection(("127.0.0.1", running_webhook.port), timeout=10) as plain,
        context.wrap_socket(plain, server_hostname="127.0.0.1") as tls,
    ):
        tls.sendall(
            b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 100\r\n\r\n{}"
        )
        # The client gives up after 2 of 100 bytes: TCP end without a TLS close_notify.
        # SSLSocket.shutdown would drop the TLS layer; the plain socket's keeps it.
        socket.socket.shutdown(tls, socket.SHUT_WR)
        try:
            answer = tls.recv(65536)
        except (ssl.SSLError, ConnectionResetError):
            answer = b""
    # Whether an answer still gets through depends on the TLS library; never a 200.
    assert answer == b"" or answer.startswith(b"HTTP/1.1 400 ")
    metric = 'hygon_dcu_admission_bad_requests_total{reason="short-body"}'
    assert running_webhook.metric(metric) == 1
    assert running_webhook.metric('hygon_dcu_admission_reviews_total{decision="allowed"}') == 0


def test_health_endpoint(running_webhook: Running) -> None:
    assert running_webhook.request("GET", "/healthz")[0::2] == (200, b"ok\n")
    assert running_webhook.request("HEAD", "/healthz")[0] == 200


def test_metrics_are_prometheus_text(running_webhook: Running) -> None:
    status, headers, body = running_webhook.request("GET", "/metrics")
    assert status == 200
    assert headers["Content-Type"].startswith("text/plain; version=0.0.4")
    text = body.decode()
    assert "# TYPE hygon_dcu_admission_reviews_total counter" in text
    assert 'hygon_dcu_admission_denials_total{rule="partition-in-sidecar"} 0.0' in text


def test_client_with_another_ca_cannot_connect(running_webhook: Running) -> None:
    stranger = make_authority("not the webhook's CA")
    connection = running_webhook.connect(stranger.pem)
    with pytest.raises(ssl.SSLCertVerificationError):
        connection.request("GET", "/healthz")
    connection.close()
    assert running_webhook.metric("hygon_dcu_admission_tls_handshake_failures_total") == 1


def test_plain_http_to_the_tls_port_is_dropped(running_webhook: Running) -> None:
    with socket.create_connection(("127.0.0.1", running_webhook.port), timeout=10) as plain:
        plain.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        try:
            answer = plain.recv(65536)
        except ConnectionResetError:  # the server closed with our bytes unread
            answer = b""
    assert not answer.startswith(b"HTTP/1.1 200")
    assert running_webhook.metric("hygon_dcu_admission_tls_handshake_failures_total") == 1
    assert running_webhook.request("GET", "/healthz")[0] == 200


def test_certificate_names_the_service(running_webhook: Running) -> None:
    context = running_webhook.client_context()
    with (
        socket.create_connection(("127.0.0.1", running_webhook.port), timeout=10) as plain,
        context.wrap_socket(
            plain, server_hostname="hygon-dcu-admission.hygon-dcu-system.svc"
        ) as tls,
    ):
        peer: Any = tls.getpeercert()
        assert tls.version() in ("TLSv1.2", "TLSv1.3")
    assert ("DNS", "hygon-dcu-admission.hygon-dcu-system.svc") in peer["subjectAltName"]


def test_a_bug_in_the_rules_answers_500_not_a_dropped_connection(
    running_webhook: Running, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(_pod: object, _keep: int) -> object:
        raise RuntimeError("injected fault")

    monkeypatch.setattr("hygon_dcu_plugin.webhook.review.read_pod", broken)
    body = json.dumps(admission_review(pod(container("a")))).encode()
    status, _ignored, error = _post(running_webhook, body)
    assert status == 500
    assert error["reason"] == "internal-error"
    assert error["error"] == "the webhook failed to answer this request; see its log"
    monkeypatch.undo()
    status, answer = running_webhook.review(admission_review(pod(container("a"))))
    assert (status, answer["response"]["allowed"]) == (200, True)
