"""Peak memory of the real extender process holding the costliest geometry Leases any plugin
token can write (worst_leases.py): the largest legal ones, and ones the extender accepted
before the bounds were tightened (docs/dev/extender.md, "Bounds"). The peak resident size
(VmHWM) must stay under half the Deployment's memory limit (512Mi)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from hygon_dcu_plugin import geometry
from webhook_support import Authority

from .fake_cluster import FakeCluster
from .support import Client, profile_limits
from .test_extender_main import Process
from .worst_leases import largest_legal, over_the_old_bound, profile_name

PEAK_LIMIT_KIB = 256 * 1024
LEGAL = 500
FORGED = 150


def _peak_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


def _lease_pages(cluster: FakeCluster) -> int:
    """Lease list calls so far (a page each; the extender lists at every refresh)."""
    return len(cluster.requests_for("leases", method="GET", named=False))


def test_peak_memory_with_the_costliest_leases(
    tmp_path: Path, authority: Authority, cluster: FakeCluster
) -> None:
    renewed = time.time()
    for index in range(LEGAL):
        cluster.put_lease(f"node-{index:04d}", largest_legal(index), renewed, duration=600)
    forged = over_the_old_bound(0)
    for index in range(FORGED):
        cluster.put_lease(f"forged-{index:04d}", over_the_old_bound(index), renewed, duration=600)
    pod = cluster.add_pod("train", {"main": profile_limits(profile_name(0))})
    process = Process(tmp_path, authority, cluster, "--refresh-seconds", "1")
    try:
        port = process.next_event("listening")["port"]
        # Its log (a line per refused Lease) is read on, or the pipe fills and it blocks.
        threading.Thread(target=process.popen.communicate, daemon=True).start()
        client = Client(port, authority.pem)
        deadline = time.monotonic() + 120
        while client.request("GET", "/healthz")[0] != 200:
            assert time.monotonic() < deadline, "the first Lease list never finished"
            time.sleep(0.2)
        # At least one more whole list, made while the geometries of the last are held.
        first = _lease_pages(cluster)
        while _lease_pages(cluster) < 3 * first:
            assert time.monotonic() < deadline, "the Leases were not listed again"
            time.sleep(0.2)
        started = time.monotonic()
        answer = client.filter(pod, ["node-0000", "forged-0000"])
        took = time.monotonic() - started
        peak = _peak_kib(process.popen.pid)
    finally:
        process.popen.kill()
        process.popen.wait(timeout=60)
    print(
        f"peak RSS (VmHWM) with {LEGAL} largest legal and {FORGED} forged Leases: "
        f"{peak / 1024:.1f} MiB; a two-node filter took {took * 1000:.0f} ms"
    )
    assert peak <= PEAK_LIMIT_KIB
    failed = answer["failedNodes"]
    assert failed["node-0000"] == (
        f"no free placement for a {profile_name(0)} partition (container main)"
    )
    assert failed["forged-0000"].startswith(
        f"geometry unreadable: geometry is {len(forged)} characters; at most "
        f"{geometry.MAX_TEXT} are read"
    )
