"""The extender process keeps answering kube-scheduler and the kubelet's probes while other
clients hold connections without making requests (it serves with the webhook's server, whose
own tests cover the other kinds of such clients). Real TLS on loopback, the fake API server."""

from __future__ import annotations

import ssl
import time
from pathlib import Path

from misbehaving_clients import Crowd
from webhook_support import Authority

from .fake_cluster import FakeCluster
from .support import profile_limits
from .test_extender_main import Process

ANSWER_SECONDS = 2.0


def test_idle_and_unhandshaken_connections_do_not_keep_filter_or_probes_out(
    tmp_path: Path, authority: Authority, cluster: FakeCluster
) -> None:
    pod = cluster.add_pod("train", {"main": profile_limits("2g.15gb")})
    process = Process(tmp_path, authority, cluster, "--refresh-seconds", "0.2")
    try:
        client = process.ready_client(authority)
        context = ssl.create_default_context(cadata=authority.pem.decode())
        with Crowd(client.port, context) as crowd:
            crowd.idle_tls(64)
            crowd.unhandshaken(64)
            started = time.monotonic()
            assert client.request("GET", "/healthz") == (200, b"ok\n")
            assert time.monotonic() - started < ANSWER_SECONDS
            started = time.monotonic()
            answer = client.filter(pod, ["node-a"])
            assert time.monotonic() - started < ANSWER_SECONDS
            assert answer["failedNodes"] == {"node-a": "no geometry published"}
    finally:
        process.kill()
