"""Generated malformed bodies, requests and quantities against the real HTTPS server (production
limits): every answer is a 4xx or a decision, never a 500, and a partition quantity is admitted
only when it is exactly 1 (checked against an independent exact reading with Fraction)."""

from __future__ import annotations

import contextlib
import http.client
import json
import re
import socket
import ssl
from collections.abc import Iterator
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from webhook_pod_cases import FAMILY, P2G, container, pod
from webhook_support import Authority, Running, admission_review, serving

FUZZ = settings(
    max_examples=150,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
ANSWERS = {200, 400, 413}


class Client:
    """One kept-alive HTTPS connection, reopened when the server closes it."""

    def __init__(self, running: Running) -> None:
        self.running = running
        self.connection: http.client.HTTPSConnection | None = None

    def post(self, body: bytes) -> tuple[int, dict[str, Any]]:
        for attempt in range(2):
            if self.connection is None:
                self.connection = self.running.connect()
            try:
                self.connection.request(
                    "POST", "/validate", body=body, headers={"Content-Type": "application/json"}
                )
                response = self.connection.getresponse()
                raw = response.read()
            except (http.client.HTTPException, OSError):
                self.connection.close()
                self.connection = None
                if attempt:
                    raise
                continue
            if response.getheader("Connection") == "close":
                self.connection.close()
                self.connection = None
            return response.status, json.loads(raw)
        raise AssertionError("unreachable")


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory, authority: Authority) -> Iterator[Client]:
    with serving(tmp_path_factory.mktemp("fuzz"), authority) as running:
        yield Client(running)
        assert running.request("GET", "/healthz")[0] == 200
        for line in running.request("GET", "/metrics")[2].decode().splitlines():
            if 'reason="internal-error"' in line:
                assert line.endswith(" 0"), line


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**40), max_value=10**40)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=10), children, max_size=5)
    ),
    max_leaves=25,
)

# Where a generated value replaces part of a valid review.
PATHS: list[tuple[Any, ...]] = [
    (),
    ("apiVersion",),
    ("request",),
    ("request", "uid"),
    ("request", "operation"),
    ("request", "resource"),
    ("request", "namespace"),
    ("request", "object"),
    ("request", "object", "metadata"),
    ("request", "object", "spec"),
    ("request", "object", "spec", "containers"),
    ("request", "object", "spec", "containers", 0),
    ("request", "object", "spec", "containers", 0, "name"),
    ("request", "object", "spec", "containers", 0, "resources"),
    ("request", "object", "spec", "containers", 0, "resources", "limits"),
    ("request", "object", "spec", "containers", 0, "resources", "limits", FAMILY),
    ("request", "object", "spec", "containers", 0, "resources", "requests"),
    ("request", "object", "spec", "initContainers"),
    ("request", "object", "spec", "ephemeralContainers"),
]


def _review() -> dict[str, Any]:
    return admission_review(pod(container("train", {FAMILY: "1", P2G: "1"})))


def _replace(document: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    *parents, last = path
    node = document
    for key in parents:
        node = node[key]
    node[last] = value
    return document


def _check(status: int, answer: dict[str, Any]) -> None:
    assert status in ANSWERS, (status, answer)
    if status == 200:
        assert isinstance(answer["response"]["allowed"], bool)
        if not answer["response"]["allowed"]:
            assert len(answer["response"]["status"]["message"]) <= 4096
    else:
        assert answer["code"] == status
        assert answer["reason"]


@FUZZ
@given(body=st.binary(max_size=3000))
def test_random_bytes(client: Client, body: bytes) -> None:
    _check(*client.post(body))


@FUZZ
@given(path=st.sampled_from(PATHS), value=json_values)
def test_a_valid_review_with_one_part_replaced(
    client: Client, path: tuple[Any, ...], value: Any
) -> None:
    body = json.dumps(_replace(_review(), path, value)).encode()
    _check(*client.post(body))


@FUZZ
@given(
    data=st.data(),
    cut=st.integers(min_value=0, max_value=4000),
    junk=st.sampled_from(
        [
            b"",
            b"[" * 3000,
            b"{" * 50,
            b"9" * 5000,
            b"1e99999",
            b"-",
            b"\\u",
            b'"\\ud800"',
            b"NaN",
            b"Infinity",
            b"\xff",
            b"\xf0\x9f\x98",
            b"\x00",
            b"]}]}",
        ]
    ),
)
def test_a_valid_review_cut_and_spliced(
    client: Client, data: st.DataObject, cut: int, junk: bytes
) -> None:
    text = json.dumps(_review()).encode()
    cut = min(cut, len(text))
    tail = data.draw(st.integers(min_value=cut, max_value=len(text)))
    _check(*client.post(text[:cut] + junk + text[tail:]))


ONE_SPELLINGS = ["1", "1.0", "1000m", "0.001k", "1e0", "10e-1", "1000000000n", "+1", " 1 ", "1."]
# Values within a hair of 1, where rounding would make them 1 (and spellings that are 1).
near_one = st.builds(
    lambda zeros, form: form.format("0" * zeros),
    st.integers(min_value=0, max_value=45),
    st.sampled_from(["1.{}1", "1000.{}1m", "0.{}1k", "1.{}", "0.{}9999999999999999999999999999"]),
)
quantities = (
    st.sampled_from(ONE_SPELLINGS)
    | near_one
    | st.from_regex(
        r"[+-]?[0-9]{0,30}(\.[0-9]{0,30})?([eE][+-]?[0-9]{1,5}|Ki|Mi|Gi|Ei|[numkMGTPE])?",
        fullmatch=True,
    )
    | st.text(alphabet="0123456789.+-eEKiMGmnuk ", max_size=40)
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=False, allow_infinity=False)
    | json_values
)

_GRAMMAR = re.compile(
    r"(?P<sign>[+-]?)(?P<whole>[0-9]*)(?:\.(?P<fraction>[0-9]*))?"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?[0-9]+|[numkMGTPE])?"
)
_SCALE = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
    "Pi": Fraction(2**50),
    "Ei": Fraction(2**60),
}


def _exactly_one(quantity: Any) -> bool:
    """An independent reading: is this exactly the integer 1 as a Kubernetes quantity?"""
    if isinstance(quantity, bool):
        return False
    if isinstance(quantity, int):
        return quantity == 1
    if not isinstance(quantity, str) or len(quantity.strip()) > 64:
        return False
    match = _GRAMMAR.fullmatch(quantity.strip())
    if match is None or not (match["whole"] or match["fraction"]):
        return False
    digits = match["whole"] + (match["fraction"] or "")
    value = Fraction(int(digits), 10 ** len(match["fraction"] or ""))
    suffix = match["suffix"] or ""
    if suffix not in _SCALE:  # a decimal exponent
        exponent = int(suffix[1:])
        if abs(exponent) > 99:  # the webhook's bound: refused, never 1
            return False
        value *= Fraction(10) ** exponent
    else:
        value *= _SCALE[suffix]
    return match["sign"] != "-" and value == 1


@FUZZ
@given(quantity=quantities, where=st.sampled_from(["family", "profile", "both"]))
def test_a_quantity_is_admitted_only_when_exactly_one(
    client: Client, quantity: Any, where: str
) -> None:
    family = quantity if where in ("family", "both") else "1"
    profile = quantity if where in ("profile", "both") else "1"
    review = admission_review(pod(container("train", {FAMILY: family, P2G: profile})))
    status, answer = client.post(json.dumps(review).encode())
    _check(status, answer)
    if status == 200:
        assert answer["response"]["allowed"] is _exactly_one(quantity), quantity


@FUZZ
@given(
    request_line=st.sampled_from(
        [
            b"POST /validate HTTP/1.1",
            b"POST /validate HTTP/1.0",
            b"POST /validate HTTP/9.9",
            b"POST  /validate",
            b"GET /healthz HTTP/1.1",
            b"BREW /validate HTTP/1.1",
            b"\x00\xff",
            b"POST /" + b"v" * 40000 + b" HTTP/1.1",
        ]
    ),
    headers=st.lists(
        st.sampled_from(
            [
                b"Content-Type: application/json",
                b"Content-Length: 2",
                b"Content-Length: -2",
                b"Content-Length: 99999999999999999999",
                b"Content-Length: 2, 2",
                b"Transfer-Encoding: chunked",
                b"Expect: 100-continue",
                b"Connection: close",
                b"X: " + b"x" * 20000,
                b"no colon here",
                b" folded",
                b"Content-Type: text/x",
            ]
        ),
        max_size=6,
    ),
    body=st.sampled_from([b"", b"{}", b"[]", b"\xff\xfe"]),
)
def test_raw_requests(
    client: Client, request_line: bytes, headers: list[bytes], body: bytes
) -> None:
    request = b"\r\n".join([request_line, b"Host: x", *headers]) + b"\r\n\r\n" + body
    running = client.running
    context = running.client_context()
    answer = b""
    with (
        socket.create_connection(("127.0.0.1", running.port), timeout=15) as plain,
        context.wrap_socket(plain, server_hostname="127.0.0.1") as tls,
    ):
        # The server may answer and close before the whole request is sent (an oversized
        # header is refused at once): the send then fails, and its answer is still read.
        with contextlib.suppress(ssl.SSLError, OSError):
            tls.sendall(request)
            # End of input: a request still waiting for more ends now, not at its deadline.
            socket.socket.shutdown(tls, socket.SHUT_WR)
        with contextlib.suppress(ssl.SSLError, OSError):
            while chunk := tls.recv(65536):
                answer += chunk
    if answer:
        status_line = answer.split(b"\r\n", 1)[0]
        assert b" 500 " not in status_line + b" ", status_line
