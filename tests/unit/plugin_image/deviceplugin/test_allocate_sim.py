"""Allocate on the real node layer against the simulated node."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest
import simnode
from ansible_collections.hygon.dcu.plugins.module_utils.cards import Placement, Profile
from ansible_collections.hygon.dcu.plugins.module_utils.facts import card_facts
from hygon_dcu_plugin.deviceplugin.advertise import free_capacity
from hygon_dcu_plugin.deviceplugin.allocator import offered_views
from hygon_dcu_plugin.deviceplugin.refused import RequestRefused
from hygon_dcu_plugin.kube import KubeApiError
from hygon_dcu_plugin.vocabulary import (
    ANNOTATION_PREFIX,
    FAMILY,
    PROFILE_PREFIX,
    SLICED,
    WHOLE_CARD,
)
from plugin_harness import Harness, make_node

IDLE_BW = {
    FAMILY: 32,
    "hygon.com/dcu.partitioned.mig-2g.15gb": 32,
    "hygon.com/dcu.partitioned.mig-4g.31gb": 16,
    "hygon.com/dcu.partitioned.mig-8g.63gb": 8,
    WHOLE_CARD: 0,
    SLICED: 0,  # slices exclude the partition mode
}


def test_idle_bw_node_counts(harness: Harness) -> None:
    assert harness.counts() == IDLE_BW


def test_counts_follow_each_allocation_and_reclaim(harness: Harness) -> None:
    harness.admit("a", "2g.15gb")
    # Pack: one 2g on card 0 leaves 3 slices there (one 4g still fits at 2:2).
    assert harness.counts() == {
        **IDLE_BW,
        "hygon.com/dcu.partitioned.mig-2g.15gb": 32,
        "hygon.com/dcu.partitioned.mig-4g.31gb": 15,
        "hygon.com/dcu.partitioned.mig-8g.63gb": 7,
    }
    harness.admit("b", "4g.31gb")
    # Packed onto card 0 at 2:2: card 0 is full except slice 1. Family: 2 held + 1 + 7 * 4.
    assert harness.counts() == {
        **IDLE_BW,
        FAMILY: 31,
        "hygon.com/dcu.partitioned.mig-2g.15gb": 30,
        "hygon.com/dcu.partitioned.mig-4g.31gb": 15,
        "hygon.com/dcu.partitioned.mig-8g.63gb": 7,
    }
    assert [(pci, start) for pci, start, _ignored in harness.live()] == [
        ("0000:09:00.0", 0),
        ("0000:09:00.0", 2),
    ]
    harness.finish("a")
    harness.finish("b", how="Succeeded")
    report = harness.reclaimer.run_pass()
    assert len(report.destroyed) == 2
    assert harness.live() == []
    assert harness.counts() == IDLE_BW


def test_mode_off_serves_whole_cards_and_slices(
    simulator_build: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = make_node(tmp_path / "node", mode_on=False)
    monkeypatch.setenv(simnode.ROOT_ENV, str(node.root))
    harness = Harness(node, tmp_path / "state")
    assert harness.runtime.resources == [WHOLE_CARD, FAMILY, SLICED]
    assert harness.counts() == {WHOLE_CARD: 8, FAMILY: 0, SLICED: 32}
    ids = [d.id for d in harness.runtime.plan()[WHOLE_CARD]]
    assert ids == list(simnode.MODELS["c3000-bw"].pci_addresses)
    response = harness.allocator.allocate(WHOLE_CARD, [ids[2]])
    assert {d.container_path for d in response.devices} == {
        "/dev/kfd",
        "/dev/mkfd",
        "/dev/dri/card2",
        "/dev/dri/renderD130",
    }


def test_hypothetical_model_gives_its_own_counts(
    simulator_build: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = make_node(tmp_path / "node", model="hypo-x8", cards=2)
    monkeypatch.setenv(simnode.ROOT_ENV, str(node.root))
    harness = Harness(node, tmp_path / "state")
    assert harness.counts() == {
        WHOLE_CARD: 0,
        SLICED: 0,
        FAMILY: 16,
        "hygon.com/dcu.partitioned.mig-1g.16gb": 16,
        "hygon.com/dcu.partitioned.mig-2g.32gb": 8,
        "hygon.com/dcu.partitioned.mig-3g.48gb": 4,
        "hygon.com/dcu.partitioned.mig-4g.64gb": 4,
        "hygon.com/dcu.partitioned.mig-8g.128gb": 2,
    }
    harness.admit("x", "3g.48gb")
    # 3g at 0:3 on card 0: held 1 + one more 3g there (4:3) + two on card 1.
    counts = harness.counts()
    assert counts["hygon.com/dcu.partitioned.mig-3g.48gb"] == 4
    assert counts["hygon.com/dcu.partitioned.mig-8g.128gb"] == 1
    # Family: 1 held + card 0 (slices 3..7 free: five 1g) + card 1 (eight 1g).
    assert counts[FAMILY] == 14


def test_operators_read_the_free_capacity_the_kubelet_is_told(harness: Harness) -> None:
    harness.admit("a", "2g.15gb")
    harness.admit("b", "4g.31gb")
    harness.admit("c", "8g.63gb")
    cards = harness.node.cards()
    reported: dict[str, int] = {}
    for card in cards:
        for name, count in card_facts(card)["remaining"].items():  # mig_info's figure
            reported[PROFILE_PREFIX + name] = reported.get(PROFILE_PREFIX + name, 0) + count
    advertised = free_capacity(offered_views(cards))
    assert reported == {r: n for r, n in advertised.items() if r != FAMILY}
    assert reported[PROFILE_PREFIX + "8g.63gb"] == 6


def test_allocate_creates_the_chosen_profile_and_placement_as_read(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    create = harness.node.create
    asked: list[tuple[object, object]] = []

    def spy(card_index: int, profile: object, placement: object, **kwargs: object) -> object:
        asked.append((profile, placement))
        return create(card_index, profile, placement, **kwargs)

    monkeypatch.setattr(harness.node, "create", spy)
    harness.admit("a", "4g.31gb")
    ((profile, placement),) = asked
    assert isinstance(profile, Profile) and profile.name == "4g.31gb"
    assert isinstance(placement, Placement) and placement in profile.placements


def test_response_carries_what_the_runtime_needs(harness: Harness) -> None:
    response = harness.admit("a", "2g.15gb")
    (instance,) = harness.node.instances()
    root = str(harness.sim.root)
    assert dict(response.envs) == {"DMI_MIG_VISIBLE_DEVICE": f"MIG-{instance.uuid}"}
    devices = {(d.container_path, d.host_path, d.permissions) for d in response.devices}
    assert devices == {
        ("/dev/kfd", root + "/dev/kfd", "rwm"),
        ("/dev/mkfd", root + "/dev/mkfd", "rwm"),
        ("/dev/dri/card0", root + "/dev/dri/card0", "rw"),
        ("/dev/dri/renderD128", root + "/dev/dri/renderD128", "rw"),
    }
    mounts = {(m.container_path, m.host_path, m.read_only) for m in response.mounts}
    assert mounts == {
        (instance.conf_path, root + str(instance.conf_path), True),
        ("/opt/hyhal", root + "/opt/hyhal", True),
        ("/opt/hygondriver", root + "/opt/dtk", True),
    }
    annotation = json.loads(harness.kube.annotations["default/a"][ANNOTATION_PREFIX + "main"])
    assert annotation == {
        "card": "0000:09:00.0",
        "container": "main",
        "profile": "2g.15gb",
        "placement": f"{instance.placement.start}:1",
        "uuid": instance.uuid,
    }
    (grant,) = harness.runtime.store.load()
    assert grant.uuid == instance.uuid and grant.pod_name == "a"


def test_thirty_two_concurrent_allocations_then_refusal(harness: Harness) -> None:
    names = [f"p{i:02d}" for i in range(32)]
    tokens = [d.id for d in harness.runtime.plan()[FAMILY]][:32]
    for name in names:
        harness.kube.add_pod(
            "default", name, {"main": {FAMILY: "1", "hygon.com/dcu.partitioned.mig-2g.15gb": "1"}}
        )
        harness.kubelet.pods[f"default/{name}"] = {"main": {}}
    errors: list[BaseException] = []

    def admit(name: str, token: str) -> None:
        # All 32 containers are listed with no device while 32 calls race; which call serves
        # which pod is the plugin's choice (the kubelet itself admits one pod at a time).
        try:
            harness.allocator.allocate(FAMILY, [token])
        except BaseException as exc:
            errors.append(exc)

    threads = [
        threading.Thread(target=admit, args=(n, t)) for n, t in zip(names, tokens, strict=True)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    live = harness.node.instances()
    assert len(live) == 32
    slots = {(i.pci, i.placement.start) for i in live}
    assert len(slots) == 32
    assert {i.profile.name for i in live if i.profile} == {"2g.15gb"}
    assert len({i.uuid for i in live}) == 32
    grants = harness.runtime.store.load().grants
    assert sorted(r.pod_name for r in grants) == names
    assert sorted(t for r in grants for t in r.device_ids) == sorted(tokens)
    for grant in grants:
        harness.kubelet.pods[grant.pod_key]["main"] = {
            FAMILY: list(grant.device_ids),
            "hygon.com/dcu.partitioned.mig-2g.15gb": [f"2g.15gb-{grant.device_ids[0][-3:]}"],
        }
    assert harness.counts() == {
        FAMILY: 32,
        "hygon.com/dcu.partitioned.mig-2g.15gb": 32,
        "hygon.com/dcu.partitioned.mig-4g.31gb": 0,
        "hygon.com/dcu.partitioned.mig-8g.63gb": 0,
        WHOLE_CARD: 0,
        SLICED: 0,
    }
    harness.kube.add_pod(
        "default", "late", {"main": {FAMILY: "1", "hygon.com/dcu.partitioned.mig-2g.15gb": "1"}}
    )
    harness.kubelet.pods["default/late"] = {"main": {}}
    with pytest.raises(
        RequestRefused,
        match=r"no free 2g.15gb partition.*free capacity: 0 "
        r"partitions \(2g.15gb: 0, 4g.31gb: 0, 8g.63gb: 0\)",
    ):
        harness.allocator.allocate(FAMILY, ["partition-999"])


def test_refuses_more_than_one_token(harness: Harness) -> None:
    harness.kube.add_pod("default", "two", {"main": {FAMILY: "2"}})
    harness.kubelet.pods["default/two"] = {"main": {}}
    with pytest.raises(RequestRefused, match="exactly one partition"):
        harness.allocator.allocate(FAMILY, ["partition-000", "partition-001"])
    assert harness.node.instances() == []


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        ({FAMILY: "1"}, "no profile: add a limit"),
        (
            {
                FAMILY: "1",
                "hygon.com/dcu.partitioned.mig-2g.15gb": "1",
                "hygon.com/dcu.partitioned.mig-4g.31gb": "1",
            },
            "request exactly one profile",
        ),
        (
            {FAMILY: "1", "hygon.com/dcu.partitioned.mig-3g.23gb": "1"},
            "not offered on this node; offered: 2g.15gb, 4g.31gb, 8g.63gb",
        ),
    ],
)
def test_refuses_bad_profile_requests(
    harness: Harness, limits: dict[str, str], message: str
) -> None:
    harness.kube.add_pod("default", "bad", {"main": limits})
    harness.kubelet.pods["default/bad"] = {"main": {}}
    with pytest.raises(RequestRefused, match=message):
        harness.allocator.allocate(FAMILY, ["partition-000"])
    assert harness.node.instances() == []
    assert harness.runtime.store.load().grants == []


def test_refuses_when_no_container_is_waiting(harness: Harness) -> None:
    with pytest.raises(RequestRefused, match="no container waiting"):
        harness.allocator.allocate(FAMILY, ["partition-000"])


def test_retry_for_the_same_container_returns_the_same_partition(harness: Harness) -> None:
    harness.kube.add_pod(
        "default", "a", {"main": {FAMILY: "1", "hygon.com/dcu.partitioned.mig-2g.15gb": "1"}}
    )
    harness.kubelet.pods["default/a"] = {"main": {}}
    first = harness.allocator.allocate(FAMILY, ["partition-004"])
    again = harness.allocator.allocate(FAMILY, ["partition-004"])
    assert first == again
    assert len(harness.node.instances()) == 1


def test_annotation_failure_rolls_the_instance_back(harness: Harness) -> None:
    harness.kube.fail_annotate = "API server unavailable"
    with pytest.raises(KubeApiError):
        harness.admit("a")
    assert harness.node.instances() == []
    assert harness.runtime.store.load().grants == []
    ops = harness.sim.ops()
    assert [op.split()[0] for op in ops] == ["create_gi", "create_ci", "destroy_ci", "destroy_gi"]


def test_missing_conf_file_right_before_answering_rolls_back(harness: Harness) -> None:
    def remove_conf(step: str) -> None:
        if step == "annotated":
            for conf in harness.sim.ci_dir.iterdir():
                os.unlink(conf)

    harness.allocator.checkpoint = remove_conf
    with pytest.raises(Exception, match=r"registry file .* is missing"):
        harness.admit("a")
    assert harness.node.instances() == []
    assert harness.runtime.store.load().grants == []


def test_spread_policy_uses_the_emptiest_card(
    simulator_build: Path, bw_node: simnode.SimNode, tmp_path: Path
) -> None:
    harness = Harness(bw_node, tmp_path / "state", policy="spread")
    for name in ("a", "b", "c"):
        harness.admit(name)
    assert sorted(pci for pci, *_instance in harness.live()) == [
        "0000:09:00.0",
        "0000:0c:00.0",
        "0000:49:00.0",
    ]


def test_a_card_that_fails_queries_leaves_the_counts_and_is_never_used(harness: Harness) -> None:
    harness.admit("a")
    harness.sim.make_unreachable(7)
    assert harness.counts() == {
        FAMILY: 1 + 3 + 6 * 4,
        "hygon.com/dcu.partitioned.mig-2g.15gb": 1 + 3 + 6 * 4,
        "hygon.com/dcu.partitioned.mig-4g.31gb": 1 + 6 * 2,
        "hygon.com/dcu.partitioned.mig-8g.63gb": 6,
        WHOLE_CARD: 0,
        SLICED: 0,
    }
    harness.admit("b", "4g.31gb")
    for name in ("c", "d", "e", "f", "g", "h"):
        harness.admit(name, "8g.63gb")
    assert "0000:cc:00.0" not in {pci for pci, *_instance in harness.live()}
    harness.kube.add_pod(
        "default", "i", {"main": {FAMILY: "1", "hygon.com/dcu.partitioned.mig-8g.63gb": "1"}}
    )
    harness.kubelet.pods["default/i"] = {"main": {}}
    with pytest.raises(RequestRefused, match=r"no free 8g\.63gb"):
        harness.allocator.allocate(FAMILY, ["partition-031"])
    harness.finish("a")
    report = harness.reclaimer.run_pass()
    assert len(report.destroyed) == 1


def test_no_dtk_on_the_host_means_no_hygondriver_mount(harness: Harness) -> None:
    (harness.sim.root / "opt" / "dtk" / "lib").rmdir()
    (harness.sim.root / "opt" / "dtk").rmdir()
    response = harness.admit("a")
    assert "/opt/hygondriver" not in {m.container_path for m in response.mounts}
    assert "/opt/hyhal" in {m.container_path for m in response.mounts}


def test_whole_card_request_for_an_unknown_card_is_refused(
    simulator_build: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = make_node(tmp_path / "node", mode_on=False)
    monkeypatch.setenv(simnode.ROOT_ENV, str(node.root))
    harness = Harness(node, tmp_path / "state")
    with pytest.raises(RequestRefused, match="was never advertised by this plugin"):
        harness.allocator.allocate(WHOLE_CARD, ["0000:ff:00.0"])
