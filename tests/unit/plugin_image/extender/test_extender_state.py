"""The extender's view (state.py): when a geometry can be used, and when a reservation is
released, with the real API client against the fake API server."""

from __future__ import annotations

from pathlib import Path

import hygon_dcu_plugin.extender.state as state_module
import pytest
from hygon_dcu_plugin import geometry
from hygon_dcu_plugin.extender.kube import KubernetesExtenderApi, LeaseInfo, PodInfo
from hygon_dcu_plugin.extender.state import ExtenderState, Sighting, lease_view
from hygon_dcu_plugin.reservation import Reservation, Reserved, encode
from hygon_dcu_plugin.vocabulary import RESERVATION_ANNOTATION, RESERVED_LABEL
from webhook_support import Authority

from .fake_cluster import NAMESPACE, FakeCluster
from .support import T0, Clock, Geometries, occupy, profile_limits, serving, text
from .worst_leases import largest_legal, over_the_old_bound, profile_name


def make_state(
    cluster: FakeCluster, tmp_path: Path, clock: Clock, reservation_seconds: float = 300.0
) -> ExtenderState:
    api = KubernetesExtenderApi(str(cluster.kubeconfig(tmp_path / "kubeconfig")))
    return ExtenderState(api, NAMESPACE, reservation_seconds=reservation_seconds, clock=clock)


def test_a_lease_is_trusted_for_its_capped_duration_from_when_it_was_seen_to_change(
    geometries: Geometries,
) -> None:
    geometry = geometries.empty()
    lease = LeaseInfo("node-a", text(geometry), renewed=T0, duration=40, version="7")
    first = Sighting.first(lease, 0.0)
    assert lease_view(lease, first, T0 + 40, 40.0) == (geometry, "")
    # First sight: renewTime's own age may withhold trust ...
    assert lease_view(lease, first, T0 + 41, 0.0) == (
        None,
        "geometry stale: renewed 41 s ago, plugin down or not Ready?",
    )
    # ... and the extender's clock since it saw the Lease always counts.
    assert lease_view(lease, first, T0, 41.0)[1] == (
        "geometry stale: no renewal seen for 41 s, plugin down or not Ready?"
    )
    assert first.then(lease, 30.0) is first  # read again unchanged: not a renewal
    # A renewal seen (here a writer's clock an hour behind): its renewTime no longer matters.
    behind = LeaseInfo("node-a", text(geometry), renewed=T0 - 3600, duration=40, version="8")
    seen = first.then(behind, 10.0)
    assert (seen.changed, seen.at) == (True, 10.0)
    assert lease_view(behind, seen, T0, 50.0) == (geometry, "")
    assert lease_view(behind, seen, T0, 51.0)[1].startswith("geometry stale: no renewal seen")
    # A new resourceVersion alone is a change too (renewTime has a second's resolution).
    rewritten = LeaseInfo("node-a", text(geometry), renewed=T0, duration=40, version="9")
    assert first.then(rewritten, 5.0).changed
    # No duration over the plugin's longest setting.
    huge = LeaseInfo("node-a", text(geometry), renewed=T0 + 10**6, duration=2**31 - 1)
    assert lease_view(huge, Sighting.first(huge, 0.0), T0, 600.0) == (geometry, "")
    assert lease_view(huge, Sighting.first(huge, 0.0), T0, 601.0)[1] == (
        "geometry stale: no renewal seen for 601 s, plugin down or not Ready?"
    )
    unrenewed = LeaseInfo("n", text(geometry), None, 40)
    assert lease_view(unrenewed, Sighting.first(unrenewed, 0.0), T0, 0.0)[1] == (
        "geometry Lease has no renewTime or leaseDurationSeconds"
    )
    bare = LeaseInfo("n", None, T0, 40)
    assert lease_view(bare, Sighting.first(bare, 0.0), T0, 0.0)[1] == (
        "no geometry published (the Lease has no hygon.com/dcu.geometry annotation)"
    )
    future = LeaseInfo("n", '{"v": 3, "gen": 1, "cards": []}', T0, 40)
    garbled = lease_view(future, Sighting.first(future, 0.0), T0, 0.0)
    assert garbled == (None, "geometry unreadable: geometry schema '3' is not one of 1, 2")


def test_staleness_is_judged_when_the_node_is_read_not_when_it_was_listed(
    tmp_path: Path, cluster: FakeCluster, geometries: Geometries
) -> None:
    clock = Clock()
    cluster.put_lease("node-a", text(geometries.empty()), renewed=T0, duration=40)
    state = make_state(cluster, tmp_path, clock)
    assert state.rebuild()
    state.refresh()
    assert state.node_state("node-a").geometry is not None
    clock.now += 45  # no refresh since: the plugin may well be gone
    view = state.node_state("node-a")
    assert view.geometry is None
    assert view.why == "geometry stale: renewed 45 s ago, plugin down or not Ready?"
    assert state.counts() == (0, 1)


def _reserve(
    state: ExtenderState,
    cluster: FakeCluster,
    name: str,
    made_at: float,
    **containers: Reserved,
) -> PodInfo:
    """What bind leaves: the pod annotated, labelled and bound, and its entry in the table."""
    pod = cluster.add_pod(name, {c: profile_limits(r.profile) for c, r in containers.items()})
    reservation = Reservation("node-a", made_at, containers)
    cluster.change_pod(
        name,
        metadata={
            "annotations": {RESERVATION_ANNOTATION: encode(reservation)},
            "labels": {RESERVED_LABEL: "true"},
        },
        spec={"nodeName": "node-a"},
    )
    info = state.api.get_pod("ml", name)
    assert info is not None and info.ref.uid == pod["metadata"]["uid"]
    state.hold(info.ref, reservation)
    return info


def test_a_pod_with_two_partitions_is_released_span_by_span_as_they_are_carved(
    tmp_path: Path, cluster: FakeCluster, geometries: Geometries
) -> None:
    clock = Clock()
    geometry = geometries.empty("c3000-bw", cards=2)
    pcis = [c.pci for c in geometry.cards]
    cluster.put_lease("node-a", text(geometry), renewed=T0)
    state = make_state(cluster, tmp_path, clock)
    assert state.rebuild()
    state.refresh()
    pod = _reserve(
        state,
        cluster,
        "pair",
        T0,
        left=Reserved(pcis[0], "4g.31gb", 0, 2),
        right=Reserved(pcis[1], "4g.31gb", 2, 2),
    )
    uid = pod.ref.uid
    cluster.put_lease("node-a", text(occupy(geometry, 0, 0, 2, owner=uid)), renewed=T0)
    assert state.refresh() == []
    held = state.reservation_of(uid)
    assert held is not None
    assert set(held.containers) == {"right"}
    assert state.node_state("node-a").reserved == {pcis[1]: ((2, 2),)}
    carved = occupy(occupy(geometry, 0, 0, 2, owner=uid), 1, 2, 2, owner=uid)
    cluster.put_lease("node-a", text(carved), renewed=T0)
    assert [r.why for r in state.refresh()] == ["carved"]
    assert state.reservation_of(uid) is None


class _ListsThenBinds(KubernetesExtenderApi):
    """The reserved-pod list returns, then a bind lands (its pod not in that list)."""

    late: tuple[ExtenderState, PodInfo, Reservation] | None = None

    def list_reserved_pods(self) -> list[PodInfo]:
        pods = super().list_reserved_pods()
        if self.late is not None:
            state, pod, reservation = self.late
            state.hold(pod.ref, reservation)
            self.late = None
        return pods


def test_a_bind_that_lands_during_a_refresh_is_not_released_as_gone(
    tmp_path: Path, cluster: FakeCluster, geometries: Geometries
) -> None:
    geometry = geometries.empty()
    cluster.put_lease("node-a", text(geometry), renewed=T0)
    api = _ListsThenBinds(str(cluster.kubeconfig(tmp_path / "kubeconfig")))
    state = ExtenderState(api, NAMESPACE, clock=Clock())
    assert state.rebuild()
    cluster.add_pod("late", {"main": profile_limits("2g.15gb")})
    late = api.get_pod("ml", "late")
    assert late is not None
    reservation = Reservation("node-a", T0, {"main": Reserved(geometry.cards[0].pci, "2g", 0, 1)})
    api.late = (state, late, reservation)
    assert state.refresh() == []
    assert state.reservation_of(late.ref.uid) is not None
    # The next refresh lists it without the label (the patch never landed): now it is gone.
    assert [r.why for r in state.refresh()] == ["pod-gone"]


def test_the_rebuild_keeps_each_bound_reservation_whatever_its_age_and_skips_the_rest(
    tmp_path: Path, cluster: FakeCluster, geometries: Geometries
) -> None:
    clock = Clock()
    pci = geometries.empty().cards[0].pci
    state = make_state(cluster, tmp_path, clock, reservation_seconds=300)
    fresh = _reserve(state, cluster, "fresh", T0 - 10, main=Reserved(pci, "2g.15gb", 0, 1))
    old = _reserve(state, cluster, "old", T0 - 86400, main=Reserved(pci, "2g.15gb", 1, 1))
    garbled = _reserve(state, cluster, "garbled", T0, main=Reserved(pci, "2g.15gb", 2, 1))
    cluster.change_pod("garbled", metadata={"annotations": {RESERVATION_ANNOTATION: "{"}})
    elsewhere = _reserve(state, cluster, "moved", T0, main=Reserved(pci, "2g.15gb", 3, 1))
    cluster.change_pod("moved", spec={"nodeName": "node-b"})
    finished = _reserve(state, cluster, "finished", T0, main=Reserved(pci, "2g.15gb", 0, 1))
    cluster.set_phase("finished", "Failed")
    unbound = _reserve(state, cluster, "unbound", T0, main=Reserved(pci, "2g.15gb", 0, 1))
    cluster.change_pod("unbound", spec={"nodeName": None})
    restarted = make_state(cluster, tmp_path, clock, reservation_seconds=300)
    assert not restarted.ready
    assert restarted.rebuild()
    assert restarted.reservation_of(fresh.ref.uid) is not None
    assert restarted.reservation_of(old.ref.uid) is not None
    for pod in (garbled, elsewhere, finished, unbound):
        assert restarted.reservation_of(pod.ref.uid) is None, pod.ref.name


def test_a_failed_list_keeps_the_view_and_the_reservations(
    tmp_path: Path, cluster: FakeCluster, geometries: Geometries
) -> None:
    clock = Clock()
    geometry = geometries.empty()
    cluster.put_lease("node-a", text(occupy(geometry, 0, 0, 1)), renewed=T0)
    state = make_state(cluster, tmp_path, clock)
    assert state.rebuild()
    state.refresh()
    pod = _reserve(state, cluster, "kept", T0, main=Reserved(geometry.cards[0].pci, "2g", 1, 1))
    cluster.fail_lease_lists(500)
    assert state.refresh() == []
    assert state.reservation_of(pod.ref.uid) is not None
    view = state.node_state("node-a")
    assert view.geometry is not None
    assert view.geometry.cards[0].occupied == {0}


@pytest.mark.parametrize("seconds", [299.0, 301.0, 86400.0])
def test_a_reservation_not_carved_in_time_is_reported_once_and_kept(
    tmp_path: Path, cluster: FakeCluster, geometries: Geometries, seconds: float
) -> None:
    clock = Clock()
    pci = geometries.empty().cards[0].pci
    state = make_state(cluster, tmp_path, clock, reservation_seconds=300)
    assert state.rebuild()
    pod = _reserve(state, cluster, "waiting", T0, main=Reserved(pci, "2g.15gb", 0, 1))
    clock.now = T0 + seconds
    assert state.refresh() == []
    assert state.refresh() == []
    assert state.reservation_of(pod.ref.uid) is not None
    reported = cluster.events_for("waiting", "ReservationNotCarved")
    assert len(reported) == (0 if seconds < 300 else 1)
    assert all(f"is not carved {seconds:.0f} s after" in e["message"] for e in reported)
    assert RESERVED_LABEL in cluster.pod("waiting")["metadata"]["labels"]


def test_labelled_pods_outside_the_table_are_taken_back_or_unlabelled(
    tmp_path: Path, cluster: FakeCluster, geometries: Geometries
) -> None:
    """A labelled pod outside the table: one the rebuild would keep (bound there, not
    finished, not carved) is taken back, whatever its age; a fresh unbound one (a bind
    between its patch and its table entry) keeps its label; the others lose it."""
    clock = Clock()
    geometry = geometries.empty()
    pci = geometry.cards[0].pci
    state = make_state(cluster, tmp_path, clock, reservation_seconds=300)
    assert state.rebuild()
    names = {
        "lost": T0 - 86400,
        "carved": T0 - 10,
        "fresh-unbound": T0 - 10,
        "old-unbound": T0 - 400,
        "finished": T0 - 10,
        "unreadable": T0 - 10,
        "moved": T0 - 10,
    }
    uids = {}
    for name, made_at in names.items():
        pod = _reserve(state, cluster, name, made_at, main=Reserved(pci, "2g.15gb", 0, 1))
        uids[name] = pod.ref.uid
        assert state.forget(state.reservation_of(pod.ref.uid) or pytest.fail("not held"))
    cluster.put_lease("node-a", text(occupy(geometry, 0, 0, 1, owner=uids["carved"])), renewed=T0)
    cluster.set_phase("finished", "Succeeded")
    for name in ("fresh-unbound", "old-unbound"):
        cluster.change_pod(name, spec={"nodeName": None})
    cluster.change_pod("moved", spec={"nodeName": "node-b"})
    cluster.change_pod("unreadable", metadata={"annotations": {RESERVATION_ANNOTATION: "{"}})
    assert state.refresh() == []
    assert [name for name in names if state.reservation_of(uids[name]) is not None] == ["lost"]
    labelled = {
        name for name in names if RESERVED_LABEL in cluster.pod(name)["metadata"].get("labels", {})
    }
    assert labelled == {"lost", "fresh-unbound"}
    assert RESERVATION_ANNOTATION in cluster.pod("old-unbound")["metadata"]["annotations"]


def test_a_pod_written_since_the_list_keeps_its_label(
    tmp_path: Path, cluster: FakeCluster, geometries: Geometries
) -> None:
    clock = Clock()
    pci = geometries.empty().cards[0].pci
    state = make_state(cluster, tmp_path, clock, reservation_seconds=300)
    assert state.rebuild()
    pod = _reserve(state, cluster, "rebound", T0 - 400, main=Reserved(pci, "2g.15gb", 0, 1))
    assert state.forget(state.reservation_of(pod.ref.uid) or pytest.fail("not held"))
    # never bound (its Binding was refused): no longer in the table
    cluster.change_pod("rebound", spec={"nodeName": None})
    # A bind writes the pod after the refresh listed it: the unlabel (at the listed
    # resourceVersion) is refused and the label stays.
    cluster.touch_before_each_patch()
    assert state.refresh() == []
    assert RESERVED_LABEL in cluster.pod("rebound")["metadata"]["labels"]


# the largest Leases: each content decoded once, and no larger one read ----------------------
def test_filters_refreshes_and_a_bind_decode_each_largest_legal_lease_once(
    tmp_path: Path, authority: Authority, cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    nodes = ["node-0", "node-1", "node-2", "node-free"]
    for index, node in enumerate(nodes):
        cluster.put_lease(node, largest_legal(index, carved=node != "node-free"), renewed=T0)
    decoded: list[object] = []
    real_decode = geometry.decode

    def counted(text: object) -> geometry.Geometry:
        decoded.append(text)
        return real_decode(text)

    monkeypatch.setattr(state_module, "decode", counted)
    pod = cluster.add_pod("train", {"main": profile_limits(profile_name(0))})
    with serving(tmp_path, authority, cluster) as running:  # listed once already
        assert len(decoded) == len(nodes)
        for _round in range(3):
            answer = running.filter(pod, nodes)
            assert answer["nodenames"] == ["node-free"]
            assert answer["failedNodes"]["node-0"] == (
                f"no free placement for a {profile_name(0)} partition (container main)"
            )
            running.state.refresh()
        assert running.bind(pod, "node-free") == ""  # bind reads the node's Lease afresh
        assert len(decoded) == len(nodes)  # nothing was written: nothing decoded again
        # A renewal (a new resourceVersion, the same geometry) is not decoded again, and the
        # node keeps its geometry object; a new geometry is decoded.
        kept = running.state.node_state("node-1").geometry
        cluster.put_lease("node-1", largest_legal(1), renewed=T0 + 1)
        running.state.refresh()
        assert len(decoded) == len(nodes)
        assert running.state.node_state("node-1").geometry is kept
        cluster.put_lease("node-1", largest_legal(1, carved=False), renewed=T0 + 2)
        running.state.refresh()
        assert len(decoded) == len(nodes) + 1
        assert running.state.node_state("node-1").geometry != kept


def test_a_lease_over_the_bound_is_refused_with_its_size(
    tmp_path: Path, authority: Authority, cluster: FakeCluster
) -> None:
    # The largest legal text is the bound; one accepted before the bounds were tightened is
    # refused for its size, before it is parsed.
    assert len(largest_legal(7)) == geometry.MAX_TEXT
    forged = over_the_old_bound(7)
    cluster.put_lease("node-legal", largest_legal(7, carved=False), renewed=T0)
    cluster.put_lease("node-forged", forged, renewed=T0)
    pod = cluster.add_pod("train", {"main": profile_limits(profile_name(1))})
    with serving(tmp_path, authority, cluster) as running:
        answer = running.filter(pod, ["node-legal", "node-forged"])
    assert answer["nodenames"] == ["node-legal"]
    assert answer["failedNodes"]["node-forged"] == (
        f"geometry unreadable: geometry is {len(forged)} characters; at most "
        f"{geometry.MAX_TEXT} are read (the largest node the bounds allow: 16 cards of 8 "
        "slices)"
    )
