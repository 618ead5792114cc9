"""Peak memory of the real webhook process for the costliest bodies it accepts, and while it
lists thousands of geometry Leases.

Each body is built to sit just under the limits (the body cap and the parse budget), is
accepted (answered 200), and one a little costlier is refused with 413. The process's peak
resident size (VmHWM) must stay under half the Deployment's memory limit: a limit check on
deterministic inputs, not a timing.
"""

from __future__ import annotations

import json
import os
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import simnode
from hygon_dcu_plugin.serving.bounded_json import parse_cost
from hygon_dcu_plugin.serving.server import (
    DEFAULT_MAX_BODY,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_PARSE_BUDGET,
    MAX_HEADER_BYTES,
)
from in_cluster import NAMESPACE, InCluster, in_cluster
from model_geometry import node_text
from webhook_pod_cases import FAMILY, MEMORY_MIB, container, pod
from webhook_support import PROCESS_PYTHONPATH, Authority, Running, admission_review

# The account whose pod updates the process checks (webhook/pod_writes.py).
PLUGIN_USER = "system:serviceaccount:hygon-dcu-system:hygon-dcu-device-plugin"
# Half of the Deployment's limits.memory (128Mi).
PEAK_LIMIT_KIB = 64 * 1024
# The room left under the budget for the review around the filler.
MARGIN = 64 * 1024


@pytest.fixture
def webhook_process(tmp_path: Path, authority: Authority) -> Iterator[tuple[int, Running]]:
    cert_pem, key_pem, _ignored = authority.issue()
    (tmp_path / "tls.crt").write_bytes(cert_pem)
    (tmp_path / "tls.key").write_bytes(key_pem)
    log_path = tmp_path / "webhook.log"
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "hygon_dcu_plugin.webhook",
                "--address=127.0.0.1",
                "--port=0",
                f"--cert-file={tmp_path / 'tls.crt'}",
                f"--key-file={tmp_path / 'tls.key'}",
                "--shutdown-delay-seconds=0",
                f"--plugin-user={PLUGIN_USER}",
            ],
            env={**os.environ, "PYTHONPATH": PROCESS_PYTHONPATH},
            stderr=log,
            stdout=subprocess.DEVNULL,
        )
    try:
        port = _listening_port(log_path, process)
        yield process.pid, Running(None, port, authority.pem, tmp_path, tmp_path)
    finally:
        process.terminate()
        process.wait(timeout=60)


def _listening_port(log_path: Path, process: subprocess.Popen[bytes]) -> int:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and process.poll() is None:
        for line in log_path.read_text().splitlines():
            event = json.loads(line)
            if event["msg"] == "listening":
                return int(event["port"])
        time.sleep(0.05)
    raise AssertionError(f"the webhook never listened: {log_path.read_text()}")


def _peak_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


def _review_with(filler: Callable[[int], Any], where: str) -> Callable[[int], bytes]:
    """A body builder: a review whose pod carries filler(n) at ``where``."""

    def build(count: int) -> bytes:
        spec = pod(container("train", {FAMILY: "1"}))
        value = filler(count)
        if where == "annotations":
            spec["metadata"]["annotations"] = {"note": value}
        elif where == "labels":
            spec["metadata"]["labels"] = value
        else:
            spec["spec"][where] = value
        return json.dumps(admission_review(spec), separators=(",", ":")).encode()

    return build


def _nested(count: int) -> list[Any]:
    # Ninety levels deep, many times over: deep nesting at its most expensive.
    leaf: Any = 0
    for _ignored in range(90):
        leaf = [leaf]
    return [leaf] * count


def _guarded_update(count: int) -> bytes:
    """The plugin's account changing one of ``count`` labels: two pods to parse and compare."""
    labels = {f"k{i}": "" for i in range(count)}
    old = pod(container("train", {FAMILY: "1"}))
    old["metadata"]["labels"] = labels
    new = pod(container("train", {FAMILY: "1"}))
    new["metadata"]["labels"] = {**labels, "k0": "changed"}
    review = admission_review(new, operation="UPDATE", old_object=old, username=PLUGIN_USER)
    return json.dumps(review, separators=(",", ":")).encode()


BODIES: dict[str, Callable[[int], bytes]] = {
    # One character outside the BMP makes every string 4 bytes a character.
    "wide-string": _review_with(lambda n: "\U0001f600" + "a" * n, "annotations"),
    "many-keys": _review_with(lambda n: {f"k{i}": "" for i in range(n)}, "labels"),
    "many-containers": _review_with(
        lambda n: [container(f"c{i}", {FAMILY: "1"}) for i in range(n)], "containers"
    ),
    "empty-objects": _review_with(lambda n: [{}] * n, "overhead"),
    "deep-lists": _review_with(_nested, "overhead"),
    "guarded-update": _guarded_update,
}


def _largest_accepted(build: Callable[[int], bytes]) -> tuple[bytes, bytes]:
    """The body with the largest count under both limits, and the next costlier one."""

    def fits(count: int) -> bool:
        body = build(count)
        return len(body) <= DEFAULT_MAX_BODY and parse_cost(body) <= DEFAULT_PARSE_BUDGET

    low, high = 1, 1
    while fits(high):
        low, high = high, high * 2
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if fits(middle) else (low, middle)
    return build(low), build(high)


def test_peak_memory_for_the_costliest_accepted_bodies(
    webhook_process: tuple[int, Running],
) -> None:
    pid, running = webhook_process
    status, _ignored = running.review(admission_review(pod(container("a"))))
    assert status == 200
    figures = [f"idle after one review: {_peak_kib(pid) / 1024:.1f} MiB"]
    for name, build in BODIES.items():
        accepted, refused = _largest_accepted(build)
        status, _headers, raw = running.request(
            "POST", "/validate", accepted, {"Content-Type": "application/json"}
        )
        assert status == 200, (name, raw[:300])
        assert json.loads(raw)["response"]["uid"]
        try:
            status, _headers, raw = running.request(
                "POST", "/validate", refused, {"Content-Type": "application/json"}
            )
        except (ssl.SSLError, ConnectionError):
            # Over the body cap it is refused on Content-Length and the connection closed
            # while the rest is still being sent.
            assert len(refused) > DEFAULT_MAX_BODY, name
        else:
            assert status == 413, (name, raw[:300])
        figures.append(
            f"{name} ({len(accepted) / 2**20:.2f} MiB body, cost "
            f"{parse_cost(accepted) / 2**20:.1f} MiB): peak {_peak_kib(pid) / 1024:.1f} MiB"
        )
    report = "peak RSS (VmHWM) of the webhook process:\n  " + "\n  ".join(figures)
    print(report)
    assert _peak_kib(pid) < PEAK_LIMIT_KIB, report


def test_peak_memory_with_every_connection_busy(webhook_process: tuple[int, Running]) -> None:
    """Nearly the connection cap's worth of clients: most stuck in their headers, four sending
    the costliest body at once. The whole process must stay under the Deployment's limit."""
    pid, running = webhook_process
    accepted, _ignored = _largest_accepted(BODIES["deep-lists"])
    context = running.client_context()
    stuck = []
    try:
        # Room is left for the senders' connections, and for the ones still closing. From two
        # addresses: one client may have only half the connections busy.
        for index in range(DEFAULT_MAX_CONNECTIONS - 8):
            plain = socket.create_connection(
                ("127.0.0.1", running.port),
                timeout=30,
                source_address=(f"127.0.0.{2 + index % 2}", 0),
            )
            tls = context.wrap_socket(plain, server_hostname="127.0.0.1")
            stuck.append(tls)
            # Headers up to just under the allowance, never finished.
            tls.sendall(b"POST /validate HTTP/1.1\r\nX: " + b"x" * (MAX_HEADER_BYTES - 100))

        def post(_index: int) -> int:
            return running.request(
                "POST", "/validate", accepted, {"Content-Type": "application/json"}
            )[0]

        with ThreadPoolExecutor(max_workers=4) as pool:
            statuses = list(pool.map(post, range(8)))
    finally:
        for tls in stuck:
            tls.close()
    # Some may be told to retry (503) while the parse is busy; none may fail otherwise.
    assert set(statuses) <= {200, 503}, statuses
    assert 200 in statuses
    peak = _peak_kib(pid)
    print(
        f"peak RSS (VmHWM) with {len(stuck)} stuck connections and 4 senders: {peak / 1024:.1f} MiB"
    )
    assert peak < 2 * PEAK_LIMIT_KIB


@pytest.fixture
def listing_webhook(
    tmp_path: Path, authority: Authority
) -> Iterator[tuple[int, Running, InCluster]]:
    """The webhook process checking sizes against the geometry Leases of the fake API server
    (reached over TLS as from a pod), listing them every second."""
    with in_cluster(tmp_path, authority) as cluster:
        cert_pem, key_pem, _ignored = authority.issue()
        (tmp_path / "tls.crt").write_bytes(cert_pem)
        (tmp_path / "tls.key").write_bytes(key_pem)
        log_path = tmp_path / "webhook.log"
        main = "import sys; from hygon_dcu_plugin.webhook.server import main; "
        with log_path.open("w") as log:
            process = subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    f"{cluster.preamble()}; {main}sys.exit(main(sys.argv[1:]))",
                    "--address=127.0.0.1",
                    "--port=0",
                    f"--cert-file={tmp_path / 'tls.crt'}",
                    f"--key-file={tmp_path / 'tls.key'}",
                    "--shutdown-delay-seconds=0",
                    f"--geometry-namespace={NAMESPACE}",
                    "--geometry-refresh-seconds=1",
                ],
                # The geometry reader brings the node layer: the collection too.
                env={**os.environ, **cluster.env, "PYTHONPATH": PROCESS_PYTHONPATH},
                stderr=log,
                stdout=subprocess.DEVNULL,
            )
        try:
            port = _listening_port(log_path, process)
            yield process.pid, Running(None, port, authority.pem, tmp_path, tmp_path), cluster
        finally:
            process.terminate()
            process.wait(timeout=60)


LEASES = 5000


def test_peak_memory_listing_thousands_of_geometry_leases(
    listing_webhook: tuple[int, Running, InCluster],
) -> None:
    pid, running, cluster = listing_webhook
    # 8-card nodes of the largest table the simulator has (the 8-slice one), ~4 KB each.
    text = node_text("hypo-x8", cards=8)
    for index in range(LEASES):
        cluster.put_lease(f"node-{index:05d}", text)
    largest = max(simnode.MODELS["hypo-x8"].profiles, key=lambda p: p.memory_mib)
    too_big = admission_review(pod(container("train", {FAMILY: "1", MEMORY_MIB: "9999999"})))
    deadline = time.monotonic() + 60
    while True:  # until a list was read whole: the size is refused, naming the largest
        status, answer = running.review(too_big)
        assert status == 200
        if not answer["response"]["allowed"]:
            break
        assert time.monotonic() < deadline, "the Leases were never read"
        time.sleep(0.2)
    assert largest.name in answer["response"]["status"]["message"]
    # And once more from the start, so the peak covers a list made while the last is kept.
    started = len([q for q in cluster.lease_lists() if "continue" not in q])
    while len([q for q in cluster.lease_lists() if "continue" not in q]) < started + 2:
        assert time.monotonic() < deadline, "the Leases were not listed again"
        time.sleep(0.2)
    peak = _peak_kib(pid)
    pages = len(cluster.lease_lists())
    print(f"peak RSS (VmHWM) listing {LEASES} Leases ({pages} list calls): {peak / 1024:.1f} MiB")
    assert peak <= PEAK_LIMIT_KIB
