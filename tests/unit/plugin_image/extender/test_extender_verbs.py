"""Filter, prioritize and bind over real HTTPS, with the real API client against the fake API
server (fake_cluster.py says why a fake), on geometries read from simulated nodes."""

from __future__ import annotations

import ssl
import threading
from pathlib import Path
from typing import Any

import pytest
import simnode
from hygon_dcu_plugin.extender.kube import EXTENDER_ACCESS, EXTENDER_LEASE_ACCESS
from hygon_dcu_plugin.geometry import encode
from hygon_dcu_plugin.reservation import decode
from hygon_dcu_plugin.vocabulary import FAMILY, RESERVATION_ANNOTATION, RESERVED_LABEL
from plugin_harness import Harness
from webhook_support import Authority, make_authority

from .fake_cluster import NAMESPACE, FakeCluster
from .support import (
    T0,
    Client,
    Clock,
    Geometries,
    Running,
    client_certificate,
    occupy,
    profile_limits,
    serving,
    size_limits,
    text,
)


@pytest.fixture
def running(tmp_path: Path, authority: Authority, cluster: FakeCluster) -> Any:
    with serving(tmp_path, authority, cluster) as extender:
        yield extender


def reserved_spans(cluster: FakeCluster, name: str) -> set[tuple[str, int]]:
    """(card, slice) of every slice the pod's reservation annotation holds."""
    reservation = decode(cluster.pod(name)["metadata"]["annotations"][RESERVATION_ANNOTATION])
    return {
        (r.card, s)
        for r in reservation.containers.values()
        for s in range(r.start, r.start + r.size)
    }


def test_filter_fails_each_node_that_cannot_place_the_pod_and_says_why(
    tmp_path: Path, authority: Authority, cluster: FakeCluster, geometries: Geometries
) -> None:
    one_card = geometries.empty("c3000-bw", cards=1)
    cluster.put_lease("node-full", text(occupy(one_card, 0, 0, 4)), renewed=T0)
    cluster.put_lease("node-free", text(one_card), renewed=T0)
    cluster.put_lease("node-stale", text(one_card), renewed=T0 - 100, duration=40)
    cluster.put_lease("node-garbled", '{"v": 1, "gen": 1', renewed=T0)
    cluster.put_lease("node-unlabelled", text(one_card), renewed=T0, labelled=False)
    pod = cluster.add_pod("train", {"main": profile_limits("2g.15gb"), "sidecar": {"cpu": "1"}})
    nodes = ["node-full", "node-free", "node-stale", "node-garbled", "node-absent"]
    with serving(tmp_path, authority, cluster) as running:
        answer = running.filter(pod, [*nodes, "node-unlabelled"])
        wide = cluster.add_pod("wide", {"main": profile_limits("8g.128gb")})
        wide_answer = running.filter(wide, ["node-free"])

    assert answer["nodenames"] == ["node-free"]
    failed = answer["failedNodes"]
    assert failed["node-full"] == "no free placement for a 2g.15gb partition (container main)"
    assert failed["node-stale"] == ("geometry stale: renewed 100 s ago, plugin down or not Ready?")
    assert failed["node-garbled"].startswith("geometry unreadable: geometry is not JSON")
    assert failed["node-absent"] == "no geometry published"
    # Only Leases labelled as geometry are read.
    assert failed["node-unlabelled"] == "no geometry published"
    assert answer["error"] == ""
    assert wide_answer["nodenames"] == []
    assert wide_answer["failedNodes"]["node-free"] == (
        "no profile on this node covers a 8g.128gb partition"
    )


def test_a_pod_the_webhook_would_refuse_fails_every_node_with_its_message(
    running: Running, cluster: FakeCluster, geometries: Geometries
) -> None:
    cluster.put_lease("node-a", text(geometries.empty()), renewed=T0)
    running.state.refresh()
    pod = cluster.add_pod("bad", {"main": {FAMILY: "1"}})
    answer = running.filter(pod, ["node-a", "node-b"])
    assert answer["nodenames"] == []
    for node in ("node-a", "node-b"):
        why = answer["failedNodes"][node]
        assert why.startswith("the pod's partition request cannot be served: ")
        assert "but no profile" in why
    assert running.prioritize(pod, ["node-a"]) == {"node-a": 0}
    assert "cannot be served" in running.bind(pod, "node-a")
    assert "spec" in cluster.pod("bad") and "nodeName" not in cluster.pod("bad")["spec"]


def test_a_pod_without_partitions_passes_everywhere_and_binds_without_reservation(
    running: Running, cluster: FakeCluster
) -> None:
    pod = cluster.add_pod("web", {"main": {"cpu": "1"}})
    answer = running.filter(pod, ["node-a", "node-b"])
    assert answer["nodenames"] == ["node-a", "node-b"]
    assert answer["failedNodes"] == {}
    assert running.bind(pod, "node-a") == ""
    stored = cluster.pod("web")
    assert stored["spec"]["nodeName"] == "node-a"
    assert RESERVATION_ANNOTATION not in stored["metadata"].get("annotations", {})


@pytest.mark.parametrize("policy", ["binpack", "spread"])
def test_binpack_prefers_the_fuller_node_and_spread_the_emptier(
    tmp_path: Path,
    authority: Authority,
    cluster: FakeCluster,
    geometries: Geometries,
    policy: str,
) -> None:
    one_card = geometries.empty("c3000-bw", cards=1)
    cluster.put_lease("node-busy", text(occupy(one_card, 0, 0, 2)), renewed=T0)
    cluster.put_lease("node-idle", text(one_card), renewed=T0)
    cluster.put_lease("node-full", text(occupy(one_card, 0, 0, 4)), renewed=T0)
    pod = cluster.add_pod("train", {"main": profile_limits("2g.15gb")})
    with serving(tmp_path, authority, cluster, policy=policy) as running:
        scores = running.prioritize(pod, ["node-idle", "node-busy", "node-full"])
    assert scores["node-full"] == 0  # cannot place: no score
    assert all(0 <= s <= 10 for s in scores.values())
    if policy == "binpack":
        assert scores["node-busy"] > scores["node-idle"]
    else:
        assert scores["node-idle"] > scores["node-busy"]


def test_size_requests_get_each_nodes_smallest_covering_profile(
    running: Running, cluster: FakeCluster, geometries: Geometries
) -> None:
    cluster.put_lease("node-bw", text(geometries.empty("c3000-bw", cards=1)), renewed=T0)
    cluster.put_lease("node-x8", text(geometries.empty("hypo-x8", cards=1)), renewed=T0)
    running.state.refresh()
    first = cluster.add_pod("first", {"main": size_limits(20000)})
    second = cluster.add_pod("second", {"main": size_limits(20000)})
    assert running.filter(first, ["node-bw", "node-x8"])["nodenames"] == ["node-bw", "node-x8"]
    huge = cluster.add_pod("huge", {"main": size_limits(70000)})
    answer = running.filter(huge, ["node-bw", "node-x8"])
    assert answer["nodenames"] == ["node-x8"]  # 8g.128gb
    assert answer["failedNodes"]["node-bw"] == (
        "no profile on this node covers a partition of 70000 MiB"
    )
    assert running.bind(first, "node-bw") == ""
    assert running.bind(second, "node-x8") == ""
    profiles = {
        name: decode(cluster.pod(name)["metadata"]["annotations"][RESERVATION_ANNOTATION])
        .containers["main"]
        .profile
        for name in ("first", "second")
    }
    # 20000 MiB: on BW 4g.31gb (2g.15gb is too small), on the 8-slice card 2g.32gb.
    assert profiles == {"first": "4g.31gb", "second": "2g.32gb"}


def test_reservations_count_in_filter_except_the_pods_own(
    running: Running, cluster: FakeCluster, geometries: Geometries
) -> None:
    # One card, three of four slices carved: one 2g.15gb placement is left.
    cluster.put_lease(
        "node-a", text(occupy(geometries.empty("c3000-bw", cards=1), 0, 0, 3)), renewed=T0
    )
    running.state.refresh()
    first = cluster.add_pod("first", {"main": profile_limits("2g.15gb")})
    second = cluster.add_pod("second", {"main": profile_limits("2g.15gb")})
    assert running.bind(first, "node-a") == ""
    assert running.filter(first, ["node-a"])["nodenames"] == ["node-a"]  # its own: not counted
    answer = running.filter(second, ["node-a"])
    assert answer["nodenames"] == []
    assert "no free placement" in answer["failedNodes"]["node-a"]
    assert "cannot place the pod" in running.bind(second, "node-a")


def test_32_concurrent_binds_on_one_node_never_reserve_one_slice_twice(
    running: Running, cluster: FakeCluster, geometries: Geometries
) -> None:
    cluster.put_lease("node-a", text(geometries.empty("c3000-bw", cards=4)), renewed=T0)
    running.state.refresh()
    pods = [cluster.add_pod(f"p{i}", {"main": profile_limits("2g.15gb")}) for i in range(32)]
    errors = running.bind_all_at_once(pods, "node-a")

    bound = sorted(name for name, error in errors.items() if not error)
    refused = sorted(name for name, error in errors.items() if error)
    assert len(errors) == 32
    assert len(bound) == 16  # 4 cards x 4 one-slice placements
    for name in refused:
        assert errors[name].startswith("node node-a cannot place the pod: no free placement")
        assert RESERVATION_ANNOTATION not in cluster.pod(name)["metadata"].get("annotations", {})
        assert "nodeName" not in cluster.pod(name)["spec"]
    taken: set[tuple[str, int]] = set()
    for name in bound:
        spans = reserved_spans(cluster, name)
        assert not spans & taken, f"{name} reserved a slice another pod holds"
        taken |= spans
        stored = cluster.pod(name)
        assert stored["spec"]["nodeName"] == "node-a"
        assert stored["metadata"]["labels"][RESERVED_LABEL] == "true"
    assert len(taken) == 16
    assert running.state.counts()[0] == 16
    assert running.metric('hygon_dcu_extender_binds_total{outcome="bound"}') == 16
    assert running.metric('hygon_dcu_extender_binds_total{outcome="no-fit"}') == 16
    assert len(running.extender.locks) == 0  # no lock left behind


def test_a_bind_whose_pod_changed_is_refused_and_leaves_no_entry(
    running: Running, cluster: FakeCluster, geometries: Geometries
) -> None:
    cluster.put_lease("node-a", text(geometries.empty()), renewed=T0)
    running.state.refresh()
    pod = cluster.add_pod("train", {"main": profile_limits("2g.15gb")})
    uid = pod["metadata"]["uid"]
    # Someone changes the pod after the extender read it and before its patch.
    touching = cluster.touch_before_each_patch()
    error = running.bind(pod, "node-a")
    assert "the pod changed since it was read (HTTP 409)" in error
    assert running.state.reservation_of(uid) is None
    stored = cluster.pod("train")
    assert "nodeName" not in stored["spec"]
    assert RESERVATION_ANNOTATION not in stored["metadata"].get("annotations", {})
    assert running.metric('hygon_dcu_extender_binds_total{outcome="pod-changed"}') == 1
    # The scheduler's retry reads the pod again and succeeds.
    cluster.unplug(touching)
    assert running.bind(pod, "node-a") == ""
    assert running.state.reservation_of(uid) is not None
    assert cluster.patch_types_sent() == ["application/merge-patch+json"] * 2


def test_a_refused_binding_drops_the_entry_and_an_unknown_outcome_keeps_it_for_the_retry(
    running: Running, cluster: FakeCluster, geometries: Geometries
) -> None:
    cluster.put_lease("node-a", text(geometries.empty()), renewed=T0)
    running.state.refresh()
    refused = cluster.add_pod("refused", {"main": profile_limits("2g.15gb")})
    refusal = cluster.refuse_bindings(403)
    assert "HTTP 403" in running.bind(refused, "node-a")
    assert running.state.reservation_of(refused["metadata"]["uid"]) is None

    retried = cluster.add_pod("retried", {"main": profile_limits("2g.15gb")})
    cluster.unplug(refusal)
    outage = cluster.refuse_bindings(503)  # the outcome is unknown: the pod may be bound
    assert "HTTP 503" in running.bind(retried, "node-a")
    held = running.state.reservation_of(retried["metadata"]["uid"])
    assert held is not None
    written = cluster.pod("retried")["metadata"]["annotations"][RESERVATION_ANNOTATION]
    cluster.unplug(outage)
    assert running.bind(retried, "node-a") == ""
    # The retry bound the reservation made before: same entry, annotation not rewritten.
    assert running.state.reservation_of(retried["metadata"]["uid"]) is held
    assert cluster.pod("retried")["metadata"]["annotations"][RESERVATION_ANNOTATION] == written
    assert running.metric('hygon_dcu_extender_binds_total{outcome="reused"}') == 1


def test_after_a_bind_of_unknown_outcome_a_bind_to_another_node_is_refused(
    running: Running, cluster: FakeCluster, geometries: Geometries
) -> None:
    """The API server may still apply the first Binding: a second one, to another node, would
    rewrite the reservation of a pod that ends up bound to the first."""
    one_card = geometries.empty("c3000-bw", cards=1)
    cluster.put_lease("node-a", text(one_card), renewed=T0)
    cluster.put_lease("node-b", text(one_card), renewed=T0)
    running.state.refresh()
    pod = cluster.add_pod("train", {"main": profile_limits("2g.15gb")})
    uid = pod["metadata"]["uid"]
    outage = cluster.refuse_bindings(503)
    assert "HTTP 503" in running.bind(pod, "node-a")
    cluster.unplug(outage)
    error = running.bind(pod, "node-b")
    assert error.startswith("the earlier bind of pod ml/train to node-a has an unknown outcome")
    stored = cluster.pod("train")
    assert "nodeName" not in stored["spec"]
    assert decode(stored["metadata"]["annotations"][RESERVATION_ANNOTATION]).node == "node-a"
    held = running.state.reservation_of(uid)
    assert held is not None and held.node == "node-a"
    assert running.bind(pod, "node-a") == ""  # the same node: its reservation is bound
    assert cluster.pod("train")["spec"]["nodeName"] == "node-a"


def test_a_binding_of_unknown_outcome_holds_the_pod_only_while_it_can_land(
    tmp_path: Path, authority: Authority, cluster: FakeCluster, geometries: Geometries
) -> None:
    clock = Clock()
    one_card = geometries.empty("c3000-bw", cards=1)
    cluster.put_lease("node-a", text(one_card), renewed=T0)
    cluster.put_lease("node-b", text(one_card), renewed=T0)
    pod = cluster.add_pod("train", {"main": profile_limits("2g.15gb")})
    with serving(tmp_path, authority, cluster, clock=clock) as running:
        outage = cluster.refuse_bindings(503)
        assert "HTTP 503" in running.bind(pod, "node-a")
        cluster.unplug(outage)
        assert "unknown outcome" in running.bind(pod, "node-b")
        clock.elapse(61)  # past kube-apiserver's request timeout: it cannot land any more
        cluster.put_lease("node-b", text(one_card), renewed=clock.now)
        assert running.bind(pod, "node-b") == ""
        annotations = cluster.pod("train")["metadata"]["annotations"]
        assert decode(annotations[RESERVATION_ANNOTATION]).node == "node-b"
        held = running.state.reservation_of(pod["metadata"]["uid"])
        assert held is not None and held.node == "node-b"
        assert running.metric('hygon_dcu_extender_binds_total{outcome="earlier-bind"}') == 1


def test_a_retry_to_the_same_node_while_the_first_bind_runs_answers_its_outcome(
    running: Running, cluster: FakeCluster, geometries: Geometries
) -> None:
    cluster.put_lease("node-a", text(geometries.empty()), renewed=T0)
    running.state.refresh()
    pod = cluster.add_pod("train", {"main": profile_limits("2g.15gb")})
    first_arrived = threading.Event()

    def slow_first(namespace: str, name: str, node: str) -> None:
        if not first_arrived.is_set():
            first_arrived.set()
            threading.Event().wait(0.5)

    cluster.before_each_binding(slow_first)
    errors: list[str] = []
    first = threading.Thread(target=lambda: errors.append(running.bind(pod, "node-a")))
    first.start()
    assert first_arrived.wait(30)
    errors.append(running.bind(pod, "node-a"))
    first.join(30)
    assert errors == ["", ""]
    assert [r.method for r in cluster.requests if r.path.endswith("/binding")] == ["POST"]
    assert running.metric('hygon_dcu_extender_binds_total{outcome="bound"}') == 1
    assert running.metric('hygon_dcu_extender_binds_total{outcome="already-bound"}') == 1
    assert len(running.extender.pod_locks) == 0


def test_a_bind_of_a_pod_that_is_gone_or_replaced_is_refused(
    running: Running, cluster: FakeCluster, geometries: Geometries
) -> None:
    cluster.put_lease("node-a", text(geometries.empty()), renewed=T0)
    running.state.refresh()
    pod = cluster.add_pod("train", {"main": profile_limits("2g.15gb")})
    cluster.delete_pod("train")
    assert "no longer exists" in running.bind(pod, "node-a")
    cluster.add_pod("train", {"main": profile_limits("2g.15gb")})  # a namesake, new uid
    assert "a different pod has that name now" in running.bind(pod, "node-a")


def test_a_bound_reservation_outlives_reservation_seconds_with_one_warning(
    tmp_path: Path, authority: Authority, cluster: FakeCluster, geometries: Geometries
) -> None:
    """Bound, not admitted yet (the kubelet busy or down): the allocator will carve exactly
    this reservation whenever it comes, so its slice is never offered to another pod."""
    clock = Clock()
    one_slot = occupy(geometries.empty("c3000-bw", cards=1), 0, 0, 3)
    cluster.put_lease("node-a", text(one_slot), renewed=clock.now)
    with serving(tmp_path, authority, cluster, clock=clock, reservation_seconds=300) as running:
        first = cluster.add_pod("first", {"main": profile_limits("2g.15gb")})
        uid = first["metadata"]["uid"]
        assert running.bind(first, "node-a") == ""
        clock.now += 301
        cluster.put_lease("node-a", text(one_slot), renewed=clock.now)  # renewed, not carved
        assert running.state.refresh() == []
        assert running.state.reservation_of(uid) is not None
        second = cluster.add_pod("second", {"main": profile_limits("2g.15gb")})
        answer = running.filter(second, ["node-a"])
        assert answer["failedNodes"]["node-a"].startswith("no free placement")
        assert "cannot place the pod: no free placement" in running.bind(second, "node-a")
        clock.now += 3600
        cluster.put_lease("node-a", text(one_slot), renewed=clock.now)
        assert running.state.refresh() == []
        assert running.state.reservation_of(uid) is not None
        assert running.metric("hygon_dcu_extender_reservations") == 1
        # Gone at last: released, and the slice is offered again.
        cluster.delete_pod("first")
        assert [r.why for r in running.state.refresh()] == ["pod-gone"]
        assert running.filter(second, ["node-a"])["nodenames"] == ["node-a"]
    (event,) = cluster.events_for("first", "ReservationNotCarved")  # once, not every refresh
    assert event["type"] == "Warning"
    assert event["involvedObject"]["uid"] == uid
    assert "not carved 301 s after it was made" in event["message"]
    assert "node-a" in event["message"]
    assert "kept" in event["message"]


def test_a_carved_reservation_is_released_when_the_lease_shows_its_owner(
    running: Running, cluster: FakeCluster, geometries: Geometries
) -> None:
    geometry = geometries.empty("c3000-bw", cards=1)
    cluster.put_lease("node-a", text(geometry), renewed=T0)
    running.state.refresh()
    pod = cluster.add_pod("train", {"main": profile_limits("4g.31gb")})
    uid = pod["metadata"]["uid"]
    assert running.bind(pod, "node-a") == ""
    entry = decode(cluster.pod("train")["metadata"]["annotations"][RESERVATION_ANNOTATION])
    spot = entry.containers["main"]
    # Another pod carved at that spot does not release it.
    cluster.put_lease(
        "node-a", text(occupy(geometry, 0, spot.start, spot.size, owner="other")), renewed=T0
    )
    assert running.state.refresh() == []
    assert running.state.reservation_of(uid) is not None
    cluster.put_lease(
        "node-a", text(occupy(geometry, 0, spot.start, spot.size, owner=uid)), renewed=T0
    )
    released = running.state.refresh()
    assert [(r.reservation.pod.uid, r.why) for r in released] == [(uid, "carved")]
    assert running.state.reservation_of(uid) is None
    # Released: out of the reserved-pod list; the annotation stays for the allocator.
    metadata = cluster.pod("train")["metadata"]
    assert RESERVED_LABEL not in metadata["labels"]
    assert RESERVATION_ANNOTATION in metadata["annotations"]
    # The geometry counts it now: the other half of the card is what is left.
    other = cluster.add_pod("other", {"main": profile_limits("4g.31gb")})
    assert running.filter(other, ["node-a"])["nodenames"] == ["node-a"]
    assert running.bind(other, "node-a") == ""
    assert not reserved_spans(cluster, "other") & reserved_spans(cluster, "train")


def test_gone_and_finished_pods_release_their_reservations(
    running: Running, cluster: FakeCluster, geometries: Geometries
) -> None:
    cluster.put_lease("node-a", text(geometries.empty()), renewed=T0)
    running.state.refresh()
    gone = cluster.add_pod("gone", {"main": profile_limits("2g.15gb")})
    done = cluster.add_pod("done", {"main": profile_limits("2g.15gb")})
    kept = cluster.add_pod("kept", {"main": profile_limits("2g.15gb")})
    for pod in (gone, done, kept):
        assert running.bind(pod, "node-a") == ""
    cluster.delete_pod("gone")
    cluster.set_phase("done", "Succeeded")
    released = {r.reservation.pod.name: r.why for r in running.state.refresh()}
    assert released == {"gone": "pod-gone", "done": "pod-finished"}
    assert running.state.reservation_of(kept["metadata"]["uid"]) is not None


def test_a_restarted_extender_rebuilds_its_reservations_from_the_pods(
    tmp_path: Path, authority: Authority, cluster: FakeCluster, geometries: Geometries
) -> None:
    cluster.put_lease(
        "node-a", text(occupy(geometries.empty("c3000-bw", cards=1), 0, 0, 3)), renewed=T0
    )
    first = cluster.add_pod("first", {"main": profile_limits("2g.15gb")})
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    with serving(tmp_path / "one", authority, cluster) as running:
        assert running.bind(first, "node-a") == ""
        held = running.state.reservation_of(first["metadata"]["uid"])
    # An older reserved pod that finished, and one never bound: neither is counted again.
    done = cluster.add_pod(
        "done", {"main": profile_limits("2g.15gb")}, phase="Succeeded", node="node-a"
    )
    cluster.change_pod(
        "done",
        metadata={
            "annotations": cluster.pod("first")["metadata"]["annotations"],
            "labels": {RESERVED_LABEL: "true"},
        },
    )
    with serving(tmp_path / "two", authority, cluster) as running:
        again = running.state.reservation_of(first["metadata"]["uid"])
        assert again is not None and held is not None
        assert (again.node, dict(again.containers)) == (held.node, dict(held.containers))
        assert running.state.reservation_of(done["metadata"]["uid"]) is None
        second = cluster.add_pod("second", {"main": profile_limits("2g.15gb")})
        assert "no free placement" in running.filter(second, ["node-a"])["failedNodes"]["node-a"]


def test_a_restarted_extender_keeps_an_old_uncarved_reservation_of_a_bound_pod(
    tmp_path: Path, authority: Authority, cluster: FakeCluster, geometries: Geometries
) -> None:
    clock = Clock()
    one_slot = occupy(geometries.empty("c3000-bw", cards=1), 0, 0, 3)
    cluster.put_lease("node-a", text(one_slot), renewed=clock.now)
    first = cluster.add_pod("first", {"main": profile_limits("2g.15gb")})
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    with serving(tmp_path / "one", authority, cluster, clock=clock) as running:
        assert running.bind(first, "node-a") == ""
    clock.now += 3600  # far past reservation_seconds, and still not carved
    cluster.put_lease("node-a", text(one_slot), renewed=clock.now)
    with serving(tmp_path / "two", authority, cluster, clock=clock) as running:
        assert running.state.reservation_of(first["metadata"]["uid"]) is not None
        second = cluster.add_pod("second", {"main": profile_limits("2g.15gb")})
        assert "cannot place the pod: no free placement" in running.bind(second, "node-a")
        assert RESERVED_LABEL in cluster.pod("first")["metadata"]["labels"]


def test_health_and_the_verbs_wait_for_the_first_lists(
    tmp_path: Path, authority: Authority, cluster: FakeCluster
) -> None:
    with serving(tmp_path, authority, cluster, ready=False, refresh_seconds=0.1) as running:
        status, body = running.request("GET", "/healthz")
        assert status == 503
        assert b"not rebuilt yet" in body
        pod = cluster.add_pod("train", {"main": profile_limits("2g.15gb")})
        status, answer = running.post("/filter", {"Pod": pod, "NodeNames": ["node-a"]})
        assert status == 503
        assert "has not read the cluster yet" in answer["error"]
        assert "not read the cluster yet" in running.bind(pod, "node-a")
        assert running.state.rebuild()
        running.state.refresh()
        assert running.request("GET", "/healthz") == (200, b"ok\n")
        status, _ignored = running.request("HEAD", "/healthz")
        assert status == 200
        cluster.fail_lease_lists(500)
        running.state.refresh()
        assert running.state.health()[0]  # one failed list is within three periods
        import time  # noqa: PLC0415

        time.sleep(0.35)
        running.state.refresh()
        status, body = running.request("GET", "/healthz")
        assert status == 503
        assert b"the last good geometry Lease list was" in body
        assert b"HTTP 500" in body


def test_every_api_call_is_covered_by_the_rbac_constants_and_each_constant_is_used(
    tmp_path: Path, authority: Authority, cluster: FakeCluster, geometries: Geometries
) -> None:
    clock = Clock()
    cluster.put_lease("node-a", text(geometries.empty()), renewed=clock.now)
    with serving(tmp_path, authority, cluster, clock=clock, reservation_seconds=10) as running:
        pod = cluster.add_pod("train", {"main": profile_limits("2g.15gb")})
        assert running.bind(pod, "node-a") == ""
        clock.now += 11
        running.state.refresh()  # not carved in time: a Warning Event
    used: set[tuple[str, str, str]] = set()
    for request in cluster.requests:
        group, resource, verb = request.access  # as an RBAC rule names it
        used.add((group, resource, verb))
        if resource == "leases":
            namespace = request.route.namespace if request.route is not None else ""
            assert namespace == NAMESPACE  # the namespaced Role's namespace, nothing else
    assert used == set(EXTENDER_ACCESS) | set(EXTENDER_LEASE_ACCESS)


def test_a_lease_duration_over_the_cap_counts_as_the_cap(
    tmp_path: Path, authority: Authority, cluster: FakeCluster, geometries: Geometries
) -> None:
    """leaseDurationSeconds 2147483647 would keep a node whose plugin is gone schedulable for
    68 years: no Lease is trusted longer than the plugin's own longest setting (600 s)."""
    clock = Clock()
    geometry = geometries.empty()
    cluster.put_lease("node-a", text(geometry), renewed=T0, duration=2147483647)
    pod = cluster.add_pod("train", {"main": profile_limits("2g.15gb")})
    with serving(tmp_path, authority, cluster, clock=clock) as running:
        assert running.filter(pod, ["node-a"])["nodenames"] == ["node-a"]
        clock.now += 601
        assert running.filter(pod, ["node-a"])["failedNodes"] == {
            "node-a": "geometry stale: renewed 601 s ago, plugin down or not Ready?"
        }
        assert running.state.counts() == (0, 1)
        # Renewed: the extender sees it change, and counts the capped time from then.
        cluster.put_lease("node-a", text(geometry), renewed=clock.now, duration=2147483647)
        running.state.refresh()
        clock.elapse(600)
        assert running.filter(pod, ["node-a"])["nodenames"] == ["node-a"]
        clock.elapse(1)
        assert running.filter(pod, ["node-a"])["failedNodes"] == {
            "node-a": "geometry stale: no renewal seen for 601 s, plugin down or not Ready?"
        }


def test_a_lease_is_trusted_from_first_sight_for_one_duration_unless_already_old(
    tmp_path: Path, authority: Authority, cluster: FakeCluster, geometries: Geometries
) -> None:
    """A new extender has seen no renewal yet: the Lease's own renewTime may withhold trust
    (already expired by the extender's clock) but never extends it past one duration."""
    clock = Clock()
    geometry = geometries.empty()
    cluster.put_lease("node-ahead", text(geometry), renewed=T0 + 86400, duration=40)
    cluster.put_lease("node-behind", text(geometry), renewed=T0 - 41, duration=40)
    pod = cluster.add_pod("train", {"main": profile_limits("2g.15gb")})
    with serving(tmp_path, authority, cluster, clock=clock) as running:
        answer = running.filter(pod, ["node-ahead", "node-behind"])
        assert answer["nodenames"] == ["node-ahead"]
        assert answer["failedNodes"]["node-behind"] == (
            "geometry stale: renewed 41 s ago, plugin down or not Ready?"
        )
        clock.elapse(40)
        running.state.refresh()  # listed again, unchanged
        assert running.filter(pod, ["node-ahead"])["nodenames"] == ["node-ahead"]
        clock.elapse(1)
        assert running.filter(pod, ["node-ahead"])["failedNodes"]["node-ahead"] == (
            "geometry stale: no renewal seen for 41 s, plugin down or not Ready?"
        )
        # Bind reads the Lease itself; the same rule, from the same sighting.
        assert "geometry stale: no renewal seen for 41 s" in running.bind(pod, "node-ahead")
        # The plugin behind renews (its clock still behind): seen, so current.
        cluster.put_lease("node-behind", text(geometry), renewed=clock.now - 41, duration=40)
        assert running.bind(pod, "node-behind") == ""


def test_metrics_count_latency_and_stale_nodes(
    running: Running, cluster: FakeCluster, geometries: Geometries
) -> None:
    cluster.put_lease("node-a", text(geometries.empty()), renewed=T0)
    cluster.put_lease("node-b", text(geometries.empty()), renewed=T0 - 1000)
    running.state.refresh()
    pod = cluster.add_pod("train", {"main": profile_limits("2g.15gb")})
    running.filter(pod, ["node-a", "node-b"])
    running.prioritize(pod, ["node-a"])
    assert running.bind(pod, "node-a") == ""
    assert running.metric('hygon_dcu_extender_request_duration_seconds_count{verb="filter"}') == 1
    assert (
        running.metric('hygon_dcu_extender_request_duration_seconds_count{verb="prioritize"}') == 1
    )
    assert running.metric('hygon_dcu_extender_request_duration_seconds_count{verb="bind"}') == 1
    assert running.metric("hygon_dcu_extender_reservations") == 1
    assert running.metric("hygon_dcu_extender_stale_nodes") == 1
    status, _ignored = running.post("/filter", {"Pod": pod})
    assert status == 400
    assert running.metric('hygon_dcu_extender_bad_requests_total{reason="no-nodes"}') == 1
    status, body = running.request("GET", "/metrics")
    assert status == 200
    assert "hygon_dcu_admission" not in body.decode()  # the webhook's series are not ours


def test_the_plugin_carves_the_reservation_and_its_published_geometry_releases_it(
    tmp_path: Path,
    authority: Authority,
    cluster: FakeCluster,
    bw_node: simnode.SimNode,
    short_tmp: Path,
) -> None:
    """End to end on the simulated node: the extender reserves, the plugin's allocator carves
    there, and the geometry the plugin publishes shows the owner, which releases the entry."""
    harness = Harness(bw_node, short_tmp)  # node-1
    harness.admit("earlier", profile="2g.15gb")  # carved before, without a reservation
    cluster.put_lease("node-1", encode(harness.runtime.geometry()), renewed=T0)
    with serving(tmp_path, authority, cluster) as running:
        pod = cluster.add_pod("train", {"main": profile_limits("4g.31gb")})
        uid = pod["metadata"]["uid"]
        assert running.bind(pod, "node-1") == ""
        annotation = cluster.pod("train")["metadata"]["annotations"][RESERVATION_ANNOTATION]
        reserved = decode(annotation).containers["main"]
        # The kubelet admits the bound pod: Allocate reads the pod as the API server has it.
        harness.kube.add_pod(
            "ml",
            "train",
            {"main": profile_limits("4g.31gb")},
            uid=uid,
            annotations={RESERVATION_ANNOTATION: annotation},
        )
        harness.kubelet.pods["ml/train"] = {"main": {}}
        token = harness.free_token()
        harness.allocator.allocate(FAMILY, [token])
        harness.kubelet.pods["ml/train"]["main"] = {FAMILY: [token]}
        live = {(pci, start) for pci, start, _uuid in harness.live()}
        assert (reserved.card, reserved.start) in live
        assert running.state.refresh() == []  # the Lease does not show it yet
        cluster.put_lease("node-1", encode(harness.runtime.geometry()), renewed=T0)
        released = running.state.refresh()
        assert [(r.reservation.pod.uid, r.why) for r in released] == [(uid, "carved")]
        assert running.state.reservation_of(uid) is None


def test_bind_serves_only_pods_of_its_own_scheduler(
    running: Running, cluster: FakeCluster, geometries: Geometries
) -> None:
    cluster.put_lease("node-a", text(geometries.empty()), renewed=T0)
    running.state.refresh()
    pod = cluster.add_pod("other", {"main": profile_limits("2g.15gb")})
    cluster.change_pod("other", spec={"schedulerName": "default-scheduler"})
    error = running.bind(pod, "node-a")
    assert error == (
        "pod ml/other names scheduler 'default-scheduler', not 'hygon-dcu-scheduler'; this "
        "extender binds only that scheduler's pods"
    )
    assert "nodeName" not in cluster.pod("other")["spec"]
    assert running.state.counts()[0] == 0


def test_with_a_client_ca_only_a_client_certificate_it_signed_is_served(
    tmp_path: Path, authority: Authority, cluster: FakeCluster
) -> None:
    client_ca = make_authority("scheduler client CA")
    (tmp_path / "client-ca.crt").write_bytes(client_ca.pem)
    (tmp_path / "ours").mkdir()
    (tmp_path / "theirs").mkdir()
    ours = client_certificate(client_ca, tmp_path / "ours")
    theirs = client_certificate(authority, tmp_path / "theirs")  # the wrong CA
    with serving(tmp_path, authority, cluster, client_ca=tmp_path / "client-ca.crt") as running:
        scheduler = Client(running.port, authority.pem, certificate=ours)
        assert scheduler.request("GET", "/healthz") == (200, b"ok\n")
        for stranger in (
            Client(running.port, authority.pem),
            Client(running.port, authority.pem, certificate=theirs),
        ):
            with pytest.raises((ssl.SSLError, ConnectionError)):
                stranger.request("GET", "/healthz")
        assert scheduler.metric("hygon_dcu_extender_tls_handshake_failures_total") == 2


def test_a_new_client_ca_is_trusted_from_the_next_handshake(
    tmp_path: Path, authority: Authority, cluster: FakeCluster
) -> None:
    # The role renews the client CA and certificate together, apart from the serving
    # certificate: the extender must not wait for its own certificate to change.
    old_ca, new_ca = make_authority("client CA 1"), make_authority("client CA 2")
    (tmp_path / "client-ca.crt").write_bytes(old_ca.pem)
    for name in ("old", "new"):
        (tmp_path / name).mkdir()
    old = client_certificate(old_ca, tmp_path / "old")
    new = client_certificate(new_ca, tmp_path / "new")
    with serving(tmp_path, authority, cluster, client_ca=tmp_path / "client-ca.crt") as running:
        assert Client(running.port, authority.pem, certificate=old).request("GET", "/healthz")[0]
        with pytest.raises((ssl.SSLError, ConnectionError)):
            Client(running.port, authority.pem, certificate=new).request("GET", "/healthz")
        # Renewed: the new CA, with the previous one kept beside it for a while.
        (tmp_path / "client-ca.crt").write_bytes(new_ca.pem + old_ca.pem)
        for certificate in (new, old):
            client = Client(running.port, authority.pem, certificate=certificate)
            assert client.request("GET", "/healthz") == (200, b"ok\n")
        (tmp_path / "client-ca.crt").write_bytes(new_ca.pem)  # the previous CA dropped
        with pytest.raises((ssl.SSLError, ConnectionError)):
            Client(running.port, authority.pem, certificate=old).request("GET", "/healthz")
