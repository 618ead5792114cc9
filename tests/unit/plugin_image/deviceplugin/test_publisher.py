"""The geometry Lease publisher (docs/dev/extender.md) through the real `kubernetes` client
(KubernetesApi) against the minimal API server: create, replace with the version read, the
heartbeat, coalescing, outages, conflicts, a hung server; then the runtime's wiring on the
simulated node and `serve` as a process."""

from __future__ import annotations

import logging
import os
import re
import signal
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import simnode
from ansible_collections.hygon.dcu.plugins.module_utils.hydmi import LibraryUnusable
from fake_api_server import FakeApiServer, Fault, Hook, Request, pod
from fake_api_server.validation import MICRO_TIME
from fake_kube import FakeKube
from hygon_dcu_plugin.deviceplugin.publisher import GeometryPublisher
from hygon_dcu_plugin.geometry import GeoCard, Geometry, GeoOwner, GeoPlacement, GeoProfile, decode
from hygon_dcu_plugin.kube import (
    LEASE_ACCESS,
    KubeApi,
    KubeApiError,
    KubernetesApi,
    micro_time,
)
from hygon_dcu_plugin.vocabulary import FAMILY, GEOMETRY_ANNOTATION, GEOMETRY_LABEL
from kubelet_emulator import KubeletEmulator
from kubernetes import client
from plugin_harness import Harness, make_node, serve_argv
from polling import wait_until

REPO = Path(__file__).resolve().parents[4]
NAMESPACE = "hygon-dcu"
NODE = "node-1"
HOLDER = "plugin-pod-a"
P2G = "hygon.com/dcu.partitioned.mig-2g.15gb"
ANNOTATION = GEOMETRY_ANNOTATION


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    with FakeApiServer() as api:
        yield api
        for behaviour in api.behaviours:
            if isinstance(behaviour, Fault) and behaviour.hold is not None:
                behaviour.hold.set()  # a hung call must not outlive the test


def for_leases(request: Request) -> bool:
    return request.is_for("leases")


def lease_calls(server: FakeApiServer) -> list[tuple[str, int]]:
    """(method, status) of every Lease call answered so far."""
    return [(r.method, r.status) for r in server.requests_for("leases") if r.status]


def lease_writes(server: FakeApiServer) -> list[tuple[str, dict[str, Any]]]:
    """The creates and updates the server accepted, in order: (method, body)."""
    return [
        (r.method, r.body)
        for r in server.requests_for("leases")
        if r.method != "GET" and r.status in (200, 201)
    ]


def hang_leases(server: FakeApiServer) -> threading.Event:
    """Every Lease call waits until the returned event is set: a hung API server."""
    hold = threading.Event()
    server.plug(Fault(for_leases, status=None, hold=hold))
    return hold


def stored_lease(server: FakeApiServer, name: str = NODE) -> dict[str, Any] | None:
    return server.get("Lease", name, NAMESPACE)


def real_api(server: FakeApiServer, tmp_path: Path, timeout: float = 5.0) -> KubernetesApi:
    kubeconfig = server.kubeconfig(tmp_path / f"kubeconfig-{uuid.uuid4().hex[:6]}")
    return KubernetesApi(str(kubeconfig), timeout=timeout, node_name=NODE)


def geometry(*uids: str, slices: int = 4) -> Geometry:
    """One card; ``uids`` own its first slices, one each."""
    profile = GeoProfile("2g.15gb", 1, 16380, 20, tuple(GeoPlacement(s, 1) for s in range(4)))
    card = GeoCard(
        "0000:09:00.0",
        slices,
        (profile,),
        frozenset(range(len(uids))),
        tuple(GeoOwner(i, 1, uid) for i, uid in enumerate(uids)),
    )
    return Geometry(0, (card,))


class World:
    """A publisher whose snapshot returns ``self.now`` (or raises ``self.broken``), writing
    through the real client to the fake API server."""

    def __init__(
        self,
        server: FakeApiServer,
        tmp_path: Path,
        renew: float = 30.0,
        holder: str = HOLDER,
        timeout: float = 5.0,
    ) -> None:
        self.server = server
        self.now = geometry()
        self.broken: Exception | None = None
        self.gate: threading.Event | None = None  # set: the snapshot waits for it
        self.snapshots = 0
        api: KubeApi = real_api(server, tmp_path, timeout)  # the real client is a KubeApi
        self.publisher = GeometryPublisher(
            self.snapshot,
            lambda text: api.put_geometry_lease(NAMESPACE, NODE, text, holder, 40),
            renew_seconds=renew,
            first_backoff=0.1,
            max_backoff=0.3,
        )

    def snapshot(self) -> Geometry:
        self.snapshots += 1
        if self.gate is not None:
            self.gate.wait(10)
        if self.broken is not None:
            raise self.broken
        return self.now

    def lease(self) -> dict[str, Any] | None:
        return stored_lease(self.server)

    def published(self) -> Geometry | None:
        lease = self.lease()
        return (
            None if lease is None else decode(lease["metadata"]["annotations"][GEOMETRY_ANNOTATION])
        )

    def shows(self, wanted: Geometry) -> bool:
        published = self.published()
        return published is not None and published.cards == wanted.cards

    def writes(self) -> list[tuple[str, dict[str, Any]]]:
        return lease_writes(self.server)


@pytest.fixture
def world(server: FakeApiServer, tmp_path: Path) -> Iterator[World]:
    made = World(server, tmp_path)
    yield made
    made.publisher.stop()


@pytest.fixture(autouse=True)
def publisher_logs(caplog: pytest.LogCaptureFixture) -> None:
    # The publisher's own level, so what these tests read of its log does not hang on the
    # root logger's level.
    caplog.set_level(logging.INFO, logger="hygon_dcu_plugin.deviceplugin.publisher")


def records(caplog: pytest.LogCaptureFixture, level: int | None = None) -> list[logging.LogRecord]:
    return [
        r
        for r in caplog.records
        if r.name == "hygon_dcu_plugin.deviceplugin.publisher"
        and (level is None or r.levelno == level)
    ]


def messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in records(caplog)]


def verbs_used(server: FakeApiServer) -> set[tuple[str, str, str]]:
    return {r.access for r in server.requests_for("leases")}


def test_the_first_publish_creates_the_lease(server: FakeApiServer, tmp_path: Path) -> None:
    started_ms = int(time.time() * 1000)
    world = World(server, tmp_path)
    world.now = geometry("pod-a")
    world.publisher.start()
    assert wait_until(lambda: world.lease() is not None)
    world.publisher.stop()
    lease = world.lease()
    assert lease is not None
    assert lease_calls(server) == [("GET", 404), ("POST", 201)]
    assert lease["metadata"]["labels"] == {GEOMETRY_LABEL: "v1"}
    published = world.published()
    assert published is not None and published.cards == world.now.cards
    # The generation starts from the wall clock in ms, so a restart still counts forward.
    assert started_ms <= published.generation <= int(time.time() * 1000)
    spec = lease["spec"]
    assert (spec["holderIdentity"], spec["leaseDurationSeconds"]) == (HOLDER, 40)
    assert MICRO_TIME.fullmatch(spec["renewTime"]) and spec["acquireTime"] == spec["renewTime"]
    assert verbs_used(server) <= set(LEASE_ACCESS)


def test_a_change_replaces_the_lease_with_the_version_read(
    world: World, server: FakeApiServer
) -> None:
    world.publisher.start()
    assert wait_until(lambda: world.lease() is not None)
    first = world.lease()
    assert first is not None
    first_generation = decode(first["metadata"]["annotations"][GEOMETRY_ANNOTATION]).generation
    world.now = geometry("pod-a", "pod-b")
    world.publisher.notify()
    assert wait_until(lambda: world.shows(world.now))
    second = world.lease()
    assert second is not None
    (method, body) = world.writes()[-1]
    assert method == "PUT"
    assert body["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
    assert second["metadata"]["uid"] == first["metadata"]["uid"]
    published = world.published()
    assert published is not None and published.generation == first_generation + 1
    assert second["spec"]["acquireTime"] == first["spec"]["acquireTime"]  # same holder
    assert second["spec"]["renewTime"] > first["spec"]["renewTime"]
    assert verbs_used(server) == set(LEASE_ACCESS)


def test_no_change_writes_nothing_until_the_heartbeat(
    server: FakeApiServer, tmp_path: Path
) -> None:
    world = World(server, tmp_path, renew=1.5)
    try:
        world.publisher.start()
        assert wait_until(lambda: len(world.writes()) == 1)
        created = time.monotonic()
        before = world.lease()
        for _round in range(5):
            world.publisher.notify()
            time.sleep(0.1)
        rounds = world.publisher.rounds
        assert rounds >= 2  # the notifications were looked at ...
        assert len(world.writes()) == 1  # ... and nothing was written
        assert wait_until(lambda: len(world.writes()) == 2, timeout=5)
        assert time.monotonic() - created >= 1.4  # the heartbeat, not a notification
        after = world.lease()
        assert before is not None and after is not None
        assert world.writes()[-1][0] == "PUT"
        # Same text (same generation); only renewTime moved.
        note = GEOMETRY_ANNOTATION
        assert after["metadata"]["annotations"][note] == before["metadata"]["annotations"][note]
        assert after["spec"]["renewTime"] > before["spec"]["renewTime"]
    finally:
        world.publisher.stop()


def test_a_burst_of_notifications_coalesces_into_few_writes(world: World) -> None:
    world.publisher.start()
    assert wait_until(lambda: world.lease() is not None)
    first = world.published()
    assert first is not None
    for i in range(100):
        world.now = geometry(f"pod-{i}")
        world.publisher.notify()
    last = world.now
    assert wait_until(lambda: world.shows(last))
    time.sleep(0.3)  # and nothing more follows
    writes = len(world.writes())
    assert 2 <= writes <= 5, writes
    published = world.published()
    assert published is not None and published.cards == last.cards
    # One generation per content change seen, not per notification.
    assert first.generation < published.generation <= first.generation + writes


def test_an_outage_is_retried_with_backoff_logged_once_and_recovers(
    world: World, server: FakeApiServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="hygon_dcu_plugin.deviceplugin.publisher")
    outage = server.plug(Fault(for_leases, status=503))
    world.publisher.start()
    assert wait_until(lambda: len(lease_calls(server)) >= 4)
    window_start = len(lease_calls(server))
    for _notify in range(100):  # notifications do not shorten the backoff
        world.publisher.notify()
        time.sleep(0.01)
    during_second = len(lease_calls(server)) - window_start
    assert during_second <= 6, during_second  # backoff 0.3 s at most here: about 3-4
    assert world.lease() is None
    server.unplug(outage)
    assert wait_until(lambda: "geometry published again" in messages(caplog), timeout=5)
    assert world.lease() is not None
    warnings = records(caplog, logging.WARNING)
    assert len(warnings) == 1 and "503" in str(getattr(warnings[0], "error", ""))


def test_a_conflict_is_retried_with_the_new_version(
    world: World, server: FakeApiServer, caplog: pytest.LogCaptureFixture
) -> None:
    world.publisher.start()
    assert wait_until(lambda: world.lease() is not None)
    # another writer updates the Lease right after our next read
    server.plug(
        Hook(
            lambda r: r.is_for("leases", method="GET", named=True),
            lambda api, _r: api.change("Lease", NODE, NAMESPACE),
            after_request=True,
            times=1,
        )
    )
    world.now = geometry("pod-a")
    world.publisher.notify()
    assert wait_until(lambda: world.shows(world.now))
    codes = lease_calls(server)
    assert ("PUT", 409) in codes
    assert codes[-1] == ("PUT", 200)
    assert any("409" in str(getattr(r, "error", "")) for r in records(caplog))


def test_notify_returns_at_once_while_the_server_hangs(
    server: FakeApiServer, tmp_path: Path
) -> None:
    hold = hang_leases(server)
    world = World(server, tmp_path, timeout=10.0)
    try:
        world.publisher.start()
        assert wait_until(lambda: world.snapshots >= 1)
        time.sleep(0.2)  # the first call is now waiting in the server
        started = time.monotonic()
        for i in range(100):
            world.now = geometry(f"pod-{i}")
            world.publisher.notify()
        assert time.monotonic() - started < 0.1
        assert lease_calls(server) == []  # nothing answered yet
        hold.set()
        last = world.now
        assert wait_until(lambda: world.shows(last))
    finally:
        hold.set()
        world.publisher.stop()


def test_stop_is_bounded_while_the_server_hangs(server: FakeApiServer, tmp_path: Path) -> None:
    hold = hang_leases(server)
    world = World(server, tmp_path, timeout=10.0)
    world.publisher.start()
    assert wait_until(lambda: world.snapshots >= 1)
    started = time.monotonic()
    world.publisher.stop(timeout=0.5)
    assert time.monotonic() - started < 1.5
    assert world.publisher.alive()  # still in its call ...
    hold.set()
    world.publisher.stop()
    assert not world.publisher.alive()  # ... which ends it: the call in flight, no more rounds
    assert [m for m, _c in lease_calls(server)] == ["GET", "POST"]


def test_a_round_stopped_before_its_write_writes_nothing(
    world: World, server: FakeApiServer
) -> None:
    world.gate = gate = threading.Event()
    world.publisher.start()
    assert wait_until(lambda: world.snapshots >= 1)  # the round is reading the node
    world.publisher.stop(timeout=0.2)
    gate.set()
    world.publisher.stop()
    assert not world.publisher.alive()
    assert lease_calls(server) == []


def test_a_failing_snapshot_publishes_nothing_not_even_the_heartbeat(
    server: FakeApiServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="hygon_dcu_plugin.deviceplugin.publisher")
    world = World(server, tmp_path, renew=1.0)
    try:
        world.broken = RuntimeError("management library unusable")
        world.publisher.start()
        assert wait_until(lambda: world.snapshots >= 3)
        assert lease_calls(server) == []
        world.broken = None
        assert wait_until(lambda: world.lease() is not None)
        writes = len(world.writes())
        world.broken = RuntimeError("management library unusable again")
        time.sleep(2.5)  # over two renewal periods
        assert len(world.writes()) == writes  # the Lease goes stale: the extender's signal
        assert world.snapshots >= writes + 3
        world.broken = None
        assert wait_until(lambda: len(world.writes()) > writes, timeout=5)
    finally:
        world.publisher.stop()
    errors = [str(getattr(r, "error", "")) for r in records(caplog, logging.WARNING)]
    assert len(errors) == 2, errors  # once per failure streak
    assert all("cannot read this node's geometry" in e for e in errors)


def test_a_geometry_the_extender_would_refuse_is_not_published(
    world: World, server: FakeApiServer, caplog: pytest.LogCaptureFixture
) -> None:
    world.now = geometry(slices=65)  # more slices than the extender reads
    world.publisher.start()
    assert wait_until(lambda: world.snapshots >= 2)
    assert lease_calls(server) == []
    assert any(
        "not one the extender can read" in str(getattr(r, "error", "")) for r in records(caplog)
    )


def test_a_restarted_plugin_counts_forward_and_a_new_holder_takes_over(
    server: FakeApiServer, tmp_path: Path
) -> None:
    first = World(server, tmp_path)
    first.publisher.start()
    assert wait_until(lambda: first.lease() is not None)
    first.now = geometry("pod-a")
    first.publisher.notify()
    assert wait_until(lambda: first.shows(first.now))
    first.publisher.stop()
    before = first.lease()
    old = first.published()
    assert before is not None and old is not None
    time.sleep(0.01)
    second = World(server, tmp_path, holder="plugin-pod-b")
    second.now = first.now
    try:
        second.publisher.start()
        assert wait_until(lambda: len(second.writes()) == 3)
        after = second.lease()
        new = second.published()
        assert after is not None and new is not None
        assert new.generation > old.generation
        assert after["spec"]["holderIdentity"] == "plugin-pod-b"
        assert after["spec"]["leaseTransitions"] == 1
        assert after["spec"]["acquireTime"] > before["spec"]["acquireTime"]
    finally:
        second.publisher.stop()


@pytest.mark.parametrize(
    ("namespace", "name", "message"),
    [
        (NAMESPACE, "Node_1", "name 'Node_1': must be a DNS subdomain"),
        (NAMESPACE, "a" * 254, "must be a DNS subdomain"),
        (NAMESPACE, "node-1.", "must be a DNS subdomain"),
        ("kube.system", NODE, "namespace 'kube.system': must be a DNS label"),
        ("", NODE, "must be a DNS label"),
    ],
)
def test_lease_names_are_checked_before_any_call(
    server: FakeApiServer, tmp_path: Path, namespace: str, name: str, message: str
) -> None:
    api = real_api(server, tmp_path)
    with pytest.raises(KubeApiError, match=re.escape(message)):
        api.put_geometry_lease(namespace, name, "{}", HOLDER, 40)
    assert lease_calls(server) == []


def test_a_node_name_with_dots_is_a_legal_lease_name(server: FakeApiServer, tmp_path: Path) -> None:
    api = real_api(server, tmp_path)
    api.put_geometry_lease(NAMESPACE, "gpu-7.rack-2.example.com", "{}", HOLDER, 40)
    assert stored_lease(server, "gpu-7.rack-2.example.com") is not None


@pytest.mark.parametrize(
    "moment",
    [
        datetime(2026, 1, 1, 10, 0, 0, tzinfo=UTC),  # microsecond 0: isoformat drops it
        datetime(2026, 1, 1, 10, 0, 0),  # naive: isoformat gives no offset
        datetime(2026, 1, 1, 10, 0, 0, 123456, tzinfo=UTC),
    ],
)
def test_times_reach_the_server_as_micro_time(moment: datetime) -> None:
    spec = client.V1LeaseSpec(renew_time=micro_time(moment), acquire_time=micro_time(moment))
    wire = client.ApiClient().sanitize_for_serialization(spec)
    assert MICRO_TIME.fullmatch(wire["renewTime"]), wire
    assert abs(micro_time(moment).timestamp() - moment.replace(tzinfo=UTC).timestamp()) < 1e-5


# the runtime's wiring ---------------------------------------------------------------------
class LeasingKube(FakeKube):  # type: ignore[misc]
    """The harness's in-memory pods (what it drives Allocate with) plus the real client for
    the Lease, which FakeKube does not serve."""

    def __init__(self, leases: KubernetesApi) -> None:
        super().__init__()
        self.leases = leases

    def put_geometry_lease(
        self, namespace: str, name: str, text: str, holder: str, duration_seconds: int
    ) -> None:
        self.leases.put_geometry_lease(namespace, name, text, holder, duration_seconds)


def lease_geometry(server: FakeApiServer) -> Geometry | None:
    lease = stored_lease(server)
    return None if lease is None else decode(lease["metadata"]["annotations"][ANNOTATION])


def test_the_runtime_publishes_after_allocate_and_after_reclaim(
    bw_node: simnode.SimNode, short_tmp: Path, server: FakeApiServer, tmp_path: Path
) -> None:
    kube = LeasingKube(real_api(server, tmp_path))
    # A renewal far off: every update below comes from a notification.
    harness = Harness(
        bw_node, short_tmp, kube=kube, geometry_namespace=NAMESPACE, geometry_renew_seconds=300.0
    )
    runtime = harness.runtime
    assert runtime.publisher is not None
    runtime.publisher.start()
    try:
        assert wait_until(lambda: lease_geometry(server) is not None)
        empty = lease_geometry(server)
        assert empty is not None
        assert len(empty.cards) == 8 and not any(c.occupied or c.owners for c in empty.cards)
        lease = stored_lease(server)
        assert lease is not None and lease["spec"]["holderIdentity"] == socket.gethostname()
        assert lease["spec"]["leaseDurationSeconds"] == 40

        harness.admit("train")
        ((pci, start, _uuid),) = harness.live()
        uid = harness.kube.pods["default/train"].uid

        def carved() -> bool:
            now = lease_geometry(server)
            card = now.card(pci) if now else None
            return card is not None and [(o.start, o.pod_uid) for o in card.owners] == [
                (start, uid)
            ]

        assert wait_until(carved, timeout=5)
        published = lease_geometry(server)
        assert published is not None and published.generation == empty.generation + 1
        card = published.card(pci)
        assert card is not None and card.occupied == frozenset({start})

        harness.finish("train")
        harness.reclaimer.run_pass()
        assert harness.live() == []
        assert wait_until(
            lambda: (
                (g := lease_geometry(server)) is not None
                and not any(c.occupied or c.owners for c in g.cards)
            ),
            timeout=5,
        )
    finally:
        runtime.stop()
    assert not runtime.publisher.alive()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_the_runtime_is_not_alive_without_its_publisher(
    bw_node: simnode.SimNode,
    short_tmp: Path,
    server: FakeApiServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kube = LeasingKube(real_api(server, tmp_path))
    harness = Harness(bw_node, short_tmp, kube=kube, geometry_namespace=NAMESPACE)
    runtime = harness.runtime
    publisher = runtime.publisher
    assert publisher is not None
    publisher.start()
    try:
        assert wait_until(lambda: lease_geometry(server) is not None)
        assert runtime.alive()

        def interrupted() -> None:
            raise SystemExit("the thread ends")  # what no except Exception catches

        monkeypatch.setattr(runtime.node, "cards", interrupted)
        publisher.notify()
        assert wait_until(lambda: not publisher.alive())
        assert not runtime.alive()  # the liveness probe then restarts the plugin
    finally:
        runtime.stop()


def test_the_runtime_snapshot_on_a_mode_off_node_has_no_cards(
    simulator_build: Path,
    tmp_path: Path,
    short_tmp: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    node = make_node(tmp_path / "node", mode_on=False)
    monkeypatch.setenv(simnode.ROOT_ENV, str(node.root))
    harness = Harness(node, short_tmp)
    assert not harness.runtime.partitioned
    caplog.clear()
    assert harness.runtime.geometry().cards == ()
    # Not read through the mode-on path: its cards have no registry address there, which
    # would be logged as a problem on every round.
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_the_runtime_snapshot_fails_when_the_library_is_unusable(harness: Harness) -> None:
    assert len(harness.runtime.geometry().cards) == 8
    harness.sim.driver_error(9)
    with pytest.raises(LibraryUnusable, match="DRIVER_NOT_LOADED"):
        harness.runtime.geometry()


def test_the_runtime_snapshot_fails_when_the_library_was_unusable_at_start(
    bw_node: simnode.SimNode, short_tmp: Path
) -> None:
    bw_node.driver_error(9)
    harness = Harness(bw_node, short_tmp)
    assert not harness.runtime.partitioned
    with pytest.raises(RuntimeError, match="unusable at start"):
        harness.runtime.geometry()


@pytest.mark.parametrize(
    ("settings", "message", "missing"),
    [
        ({}, "the scheduler extender cannot place partitions", "geometry_namespace"),
        ({"geometry_namespace": ""}, "cannot place partitions", "geometry_namespace"),
        ({"geometry_namespace": NAMESPACE, "node_name": None}, "cannot place", "node_name"),
        ({"geometry_namespace": NAMESPACE, "node_name": "Node_1"}, "cannot name a Lease", None),
    ],
)
def test_without_a_namespace_or_a_usable_node_name_nothing_is_published(
    bw_node: simnode.SimNode,
    short_tmp: Path,
    caplog: pytest.LogCaptureFixture,
    settings: dict[str, Any],
    message: str,
    missing: str | None,
) -> None:
    caplog.set_level(logging.INFO, logger="hygon_dcu_plugin.deviceplugin.runtime")
    harness = Harness(bw_node, short_tmp, **settings)
    assert harness.runtime.publisher is None
    said = [r for r in caplog.records if message in r.getMessage()]
    assert len(said) == 1
    if missing:
        assert getattr(said[0], "missing", None) == missing


# serve as a process -----------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_serve_publishes_the_lease_in_the_pod_namespace(
    bw_node: simnode.SimNode, short_tmp: Path, server: FakeApiServer
) -> None:
    kubelet = KubeletEmulator(str(short_tmp / "dp"), str(short_tmp / "pr" / "kubelet.sock"))
    kubelet.start()
    argv = serve_argv(bw_node, short_tmp, server.kubeconfig(short_tmp / "kc"), kubelet, free_port())
    env = {
        **bw_node.env(),
        "PYTHONPATH": os.pathsep.join(
            [str(REPO / "plugin_image" / "src"), str(REPO / ".venv" / "collections")]
        ),
        "POD_NAMESPACE": NAMESPACE,  # what the DaemonSet sets through the downward API
    }
    process = subprocess.Popen(argv, env=env, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_until(lambda: lease_geometry(server) is not None, timeout=60)
        first = lease_geometry(server)
        assert first is not None and len(first.cards) == 8
        assert kubelet.wait_for(lambda: kubelet.counts().get(P2G) == 32)
        train = pod("train", "team", node=NODE, containers={"main": {FAMILY: "1", P2G: "1"}})
        uid = server.seed(train)["metadata"]["uid"]
        kubelet.admit("team", "train", "main", {FAMILY: 1, P2G: 1})
        assert wait_until(
            lambda: (
                (g := lease_geometry(server)) is not None
                and [o.pod_uid for c in g.cards for o in c.owners] == [uid]
            )
        )
        assert verbs_used(server) <= set(LEASE_ACCESS)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        _out, err = process.communicate(timeout=30)
        kubelet.stop()
    assert process.returncode == 0, err[-3000:]
