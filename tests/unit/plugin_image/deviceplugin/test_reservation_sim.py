"""Allocate on the simulated node with the scheduler extender's reservation on the pod, and
requests by size without one (docs/dev/extender.md).

A reservation is carved exactly as written (card, profile, placement) or refused, never moved:
``reservation_taken`` when the node cannot carve it now, ``bad_reservation`` when it cannot be
trusted. A size request without one gets the smallest covering profile that still has a free
placement.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import simnode
from ansible_collections.hygon.dcu.plugins.module_utils.cards import Profile
from hygon_dcu_plugin.deviceplugin.allocator import offered_views
from hygon_dcu_plugin.deviceplugin.api import deviceplugin_v1beta1_pb2 as pb
from hygon_dcu_plugin.deviceplugin.refused import RequestRefused
from hygon_dcu_plugin.placement import choose
from hygon_dcu_plugin.refusal import AllocateRefusal
from hygon_dcu_plugin.reservation import Reservation, Reserved, encode
from hygon_dcu_plugin.vocabulary import FAMILY, MEMORY_MIB, RESERVATION_ANNOTATION
from plugin_harness import Harness

COMPUTE_UNITS = FAMILY + ".compute-units"


def _profile_limits(profile: str) -> dict[str, str]:
    return {FAMILY: "1", f"{FAMILY}.mig-{profile}": "1"}


def _size_limits(memory_mib: int, cu: int | None = None) -> dict[str, str]:
    limits = {FAMILY: "1", MEMORY_MIB: str(memory_mib)}
    if cu is not None:
        limits[COMPUTE_UNITS] = str(cu)
    return limits


def _reservation(node: str = "node-1", **containers: Reserved) -> str:
    return encode(Reservation(node, 1764660000.0, containers))


def _admit(
    harness: Harness,
    name: str,
    containers: dict[str, dict[str, str]],
    annotation: str | None = None,
    device: str | None = None,
) -> pb.ContainerAllocateResponse:
    """The pod as the extender binds it (with its reservation, if any), listed by the kubelet
    and allocated for its first container that has no partition yet, with the family's
    device id ``device`` (default: one the kubelet holds free)."""
    key = f"default/{name}"
    if key not in harness.kube.pods:
        annotations = None if annotation is None else {RESERVATION_ANNOTATION: annotation}
        harness.kube.add_pod("default", name, containers, annotations=annotations)
        harness.kubelet.pods[key] = {c: {} for c in containers}
    token = device or harness.free_token()
    response: pb.ContainerAllocateResponse = harness.allocator.allocate(FAMILY, [token])
    served = next(c for c in containers if not harness.kubelet.pods[key][c])
    harness.kubelet.pods[key][served] = {FAMILY: [token]}
    return response


def _refused(
    harness: Harness,
    name: str,
    limits: dict[str, str],
    annotation: str | None,
    reason: AllocateRefusal,
) -> str:
    """Allocate is refused with ``reason``, carves nothing and says so on the pod."""
    before = harness.live()
    grants = harness.runtime.store.load().grants
    failures = _failures(harness, reason)
    with pytest.raises(RequestRefused) as refused:
        _admit(harness, name, {"main": limits}, annotation)
    assert refused.value.reason is reason, refused.value
    assert harness.live() == before
    assert harness.runtime.store.load().grants == grants
    assert "PartitionRefused" in harness.kube.reasons(name)
    assert "delete the pod" in str(refused.value)
    assert _failures(harness, reason) == failures + 1
    return str(refused.value)


def _failures(harness: Harness, reason: AllocateRefusal) -> int:
    """hygon_dcu_allocation_failures_total for ``reason``, as /metrics shows it."""
    series = f'hygon_dcu_allocation_failures_total{{reason="{reason.value}"}} '
    (line,) = [x for x in harness.runtime.metrics.render().splitlines() if x.startswith(series)]
    return int(float(line[len(series) :]))


def _profiles(harness: Harness) -> dict[str, Profile]:
    return {p.name: p for c in harness.node.cards() for p in c.profiles}


def _grant_of(harness: Harness, pod: str) -> tuple[str, str, int, int]:
    (grant,) = [g for g in harness.runtime.store.load().grants if g.pod_name == pod]
    return grant.card_pci, grant.profile, grant.placement_start, grant.placement_size


# A reservation is carved exactly as written ------------------------------------------------
def test_the_reservation_is_carved_where_it_says_not_where_the_policy_would(
    harness: Harness,
) -> None:
    views = offered_views(harness.node.cards())
    policy = choose(views, "4g.31gb", harness.settings.policy)
    assert policy is not None
    # The last card, at the second placement: somewhere the policy does not pick.
    card = views[-1]
    reserved = Reserved(card.pci, "4g.31gb", 2, 2)
    assert (policy.card.pci, policy.placement.start) != (reserved.card, reserved.start)
    _admit(harness, "r", {"main": _profile_limits("4g.31gb")}, _reservation(main=reserved))
    (instance,) = harness.node.instances()
    assert (instance.pci, instance.placement.start, instance.placement.size) == (card.pci, 2, 2)
    assert instance.profile is not None and instance.profile.name == "4g.31gb"
    assert _grant_of(harness, "r") == (card.pci, "4g.31gb", 2, 2)
    (granted,) = [t for p, k, r, t in harness.kube.kube_events if r == "PartitionGranted"]
    assert "reserved" in granted and card.pci in granted


def test_a_size_request_gets_the_reserved_profile_when_it_covers(harness: Harness) -> None:
    # The extender may reserve a bigger profile than the smallest (the smallest had no room
    # where it looked); the allocator carves what it reserved.
    profiles = _profiles(harness)
    small, big = profiles["2g.15gb"], profiles["8g.63gb"]
    views = offered_views(harness.node.cards())
    reserved = Reserved(views[3].pci, big.name, 0, big.slices)
    _admit(harness, "s", {"main": _size_limits(small.memory_mib)}, _reservation(main=reserved))
    assert _grant_of(harness, "s") == (views[3].pci, big.name, 0, big.slices)


def test_each_container_gets_its_own_entry(harness: Harness) -> None:
    views = offered_views(harness.node.cards())
    pci = views[2].pci
    text = _reservation(train=Reserved(pci, "4g.31gb", 0, 2), side=Reserved(pci, "2g.15gb", 3, 1))
    containers = {"train": _profile_limits("4g.31gb"), "side": _size_limits(1)}
    _admit(harness, "two", containers, text)
    _admit(harness, "two", containers, text)
    found = sorted((i.pci, i.placement.start, i.placement.size) for i in harness.node.instances())
    assert found == [(pci, 0, 2), (pci, 3, 1)]
    grants = {g.containers: g.placement_start for g in harness.runtime.store.load().grants}
    assert grants == {("train",): 0, ("side",): 3}


# reservation_taken: the node cannot carve it now ---------------------------------------------
def test_a_slice_held_by_another_pod_is_refused_naming_that_pod(harness: Harness) -> None:
    harness.admit("holder", "2g.15gb")
    (held,) = harness.node.instances()
    assert held.pci is not None
    # The 4g placement that covers the holder's slice.
    start = held.placement.start - held.placement.start % 2
    text = _reservation(main=Reserved(held.pci, "4g.31gb", start, 2))
    message = _refused(
        harness, "late", _profile_limits("4g.31gb"), text, AllocateRefusal.RESERVATION_TAKEN
    )
    assert held.pci in message
    assert f"slice {held.placement.start} " in message
    assert "pod default/holder" in message
    assert f"{start}:2" in message


def test_a_slice_held_by_an_instance_no_grant_owns_is_refused(harness: Harness) -> None:
    card = harness.node.cards()[1]
    assert card.pci is not None
    one_slice = _profiles(harness)["2g.15gb"]
    harness.node.create(card.index, one_slice, one_slice.placements[3])  # carved by hand
    text = _reservation(main=Reserved(card.pci, "8g.63gb", 0, 4))
    message = _refused(harness, "p", _size_limits(1), text, AllocateRefusal.RESERVATION_TAKEN)
    assert "slice 3 " in message and "no grant of this plugin owns" in message


def test_an_unreachable_card_is_refused(harness: Harness) -> None:
    pci = harness.node.cards()[7].pci
    assert pci is not None
    harness.sim.make_unreachable(7)
    text = _reservation(main=Reserved(pci, "2g.15gb", 0, 1))
    message = _refused(
        harness, "p", _profile_limits("2g.15gb"), text, AllocateRefusal.RESERVATION_TAKEN
    )
    assert f"card {pci}" in message and "not offered" in message


def test_a_card_this_node_does_not_have_is_refused(harness: Harness) -> None:
    text = _reservation(main=Reserved("0000:ff:00.0", "2g.15gb", 0, 1))
    message = _refused(
        harness, "p", _profile_limits("2g.15gb"), text, AllocateRefusal.RESERVATION_TAKEN
    )
    assert "0000:ff:00.0" in message and "no card of this node" in message


def test_a_profile_the_card_does_not_offer_is_refused(harness: Harness) -> None:
    pci = offered_views(harness.node.cards())[0].pci
    text = _reservation(main=Reserved(pci, "1g.16gb", 0, 1))
    message = _refused(harness, "p", _size_limits(1), text, AllocateRefusal.RESERVATION_TAKEN)
    assert "offers no profile 1g.16gb" in message and "2g.15gb" in message


# bad_reservation: it cannot be trusted ----------------------------------------------------
def _good(harness: Harness, profile: str = "2g.15gb", start: int = 0, size: int = 1) -> Reserved:
    return Reserved(offered_views(harness.node.cards())[0].pci, profile, start, size)


@pytest.mark.parametrize(
    ("case", "why"),
    [
        ("not-json", "not JSON"),
        ("empty", "not JSON"),
        ("other-node", "reserves node 'node-2', but this is node 'node-1'"),
        ("no-entry", "no partition entry for container 'main' (it reserves containers: other)"),
        ("other-profile", "reserves profile 4g.31gb for container 'main', which requests 2g.15gb"),
        ("illegal-placement", "1:2 is not a placement of 4g.31gb"),
        ("wrong-size", "0:2 is not a placement of 2g.15gb"),
        ("start-past-the-card", "8:1 is not a placement of 2g.15gb"),
    ],
)
def test_a_reservation_that_cannot_be_trusted_is_refused(
    harness: Harness, case: str, why: str
) -> None:
    limits = _profile_limits("4g.31gb" if case == "illegal-placement" else "2g.15gb")
    text = {
        "not-json": "{not json",
        "empty": "",
        "other-node": _reservation("node-2", main=_good(harness)),
        "no-entry": _reservation(other=_good(harness)),
        "other-profile": _reservation(main=_good(harness, "4g.31gb", 0, 2)),
        "illegal-placement": _reservation(main=_good(harness, "4g.31gb", 1, 2)),
        "wrong-size": _reservation(main=_good(harness, "2g.15gb", 0, 2)),
        "start-past-the-card": _reservation(main=_good(harness, "2g.15gb", 8, 1)),
    }[case]
    message = _refused(harness, "p", limits, text, AllocateRefusal.BAD_RESERVATION)
    assert why in message
    assert RESERVATION_ANNOTATION in message


def test_a_reserved_profile_smaller_than_the_size_is_refused(harness: Harness) -> None:
    small = _profiles(harness)["2g.15gb"]
    text = _reservation(main=_good(harness))
    for limits in (
        _size_limits(small.memory_mib + 1),
        _size_limits(small.memory_mib, small.cu_count + 1),
    ):
        name = f"p{len(harness.kube.pods)}"
        message = _refused(harness, name, limits, text, AllocateRefusal.BAD_RESERVATION)
        assert f"it reserves 2g.15gb ({small.memory_mib} MiB, {small.cu_count} compute" in message
        harness.finish(name)


# Requests by size without a reservation ---------------------------------------------------
def test_a_size_gets_the_smallest_covering_profile(harness: Harness) -> None:
    profiles = sorted(_profiles(harness).values(), key=lambda p: p.slices)
    small, middle, large = profiles
    cases: list[tuple[dict[str, Any], str]] = [
        (_size_limits(1), small.name),
        (_size_limits(small.memory_mib), small.name),
        (_size_limits(small.memory_mib + 1), middle.name),
        (_size_limits(1, small.cu_count + 1), middle.name),
        (_size_limits(middle.memory_mib + 1), large.name),
    ]
    for number, (limits, expected) in enumerate(cases):
        _admit(harness, f"s{number}", {"main": limits})
        assert _grant_of(harness, f"s{number}")[1] == expected, limits


def test_a_size_no_profile_covers_names_what_is_offered(harness: Harness) -> None:
    largest = max(_profiles(harness).values(), key=lambda p: p.memory_mib)
    message = _refused_size(harness, _size_limits(largest.memory_mib + 1))
    assert message.reason is AllocateRefusal.UNKNOWN_PROFILE
    assert f"at least {largest.memory_mib + 1} MiB" in str(message)
    for profile in _profiles(harness).values():
        figures = f"{profile.name} ({profile.memory_mib} MiB, {profile.cu_count} compute units)"
        assert figures in str(message)


def test_a_size_that_fits_nowhere_now_says_what_is_free(harness: Harness) -> None:
    largest = max(_profiles(harness).values(), key=lambda p: p.slices)
    for number in range(len(offered_views(harness.node.cards()))):
        harness.admit(f"full{number}", largest.name)
    message = _refused_size(harness, _size_limits(1))
    assert message.reason is AllocateRefusal.NO_CAPACITY
    tried = sorted(_profiles(harness).values(), key=lambda p: p.slices)
    assert f"tried {', '.join(p.name for p in tried)}" in str(message)
    assert "0 partitions" in str(message)


def _refused_size(harness: Harness, limits: dict[str, str]) -> RequestRefused:
    before = harness.live()
    with pytest.raises(RequestRefused) as refused:
        # A token the kubelet still had: it learns of the full node only after the carve.
        _admit(harness, "sized", {"main": limits}, device="partition-999")
    assert harness.live() == before
    return refused.value


# No simulated model has a table where a wider profile still fits once a narrower covering one
# does not (their placements nest), so this node gets a HYPOTHETICAL table: the 2-slice profile
# only at slice 0, the 3-slice one only at slice 1.
_UNALIGNED = (
    ("1s.16gb", 1, 20, 16000, "0,1,2,3"),
    ("2s.32gb", 2, 40, 32000, "0"),
    ("3s.48gb", 3, 60, 48000, "1"),
    ("4s.64gb", 4, 80, 64000, "0"),
)


@pytest.fixture
def unaligned(
    simulator_build: Path, tmp_path: Path, short_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> Harness:
    node = simnode.init(tmp_path / "node", model="c3000-bw", cards=1)
    conf = node.sim_dir / "node.conf"
    kept = [line for line in conf.read_text().splitlines() if not line.startswith("profile ")]
    table = [
        f"profile {10 + n} {slices} {cu} {mib} 1 {name} {starts}"
        for n, (name, slices, cu, mib, starts) in enumerate(_UNALIGNED)
    ]
    conf.write_text("\n".join(["# HYPOTHETICAL profile table", *kept, *table]) + "\n")
    node.switch_mode()
    monkeypatch.setenv(simnode.ROOT_ENV, str(node.root))
    return Harness(node, short_tmp)


def test_a_size_moves_up_when_the_smallest_has_no_free_placement(unaligned: Harness) -> None:
    profiles = _profiles(unaligned)
    assert sorted(profiles) == sorted(entry[0] for entry in _UNALIGNED)
    two, three = profiles["2s.32gb"], profiles["3s.48gb"]
    wanted = _size_limits(two.memory_mib)
    # Idle: the smallest covering profile.
    _admit(unaligned, "first", {"main": wanted})
    assert _grant_of(unaligned, "first")[1:] == (two.name, 0, 2)
    unaligned.finish("first")
    assert len(unaligned.reclaimer.run_pass().destroyed) == 1
    # Slice 0 taken: the 2-slice profile has no free placement, the 3-slice one does.
    unaligned.admit("blocker", "1s.16gb")
    assert [start for _pci, start, _uuid in unaligned.live()] == [0]
    _admit(unaligned, "second", {"main": wanted})
    assert _grant_of(unaligned, "second")[1:] == (three.name, 1, 3)
