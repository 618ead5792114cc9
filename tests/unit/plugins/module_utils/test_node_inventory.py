"""Node inventory, create and destroy through the real binding on simulated nodes."""

from __future__ import annotations

import dataclasses
import re
from typing import TYPE_CHECKING, Any

import pytest
from simnode import SimNode

if TYPE_CHECKING:
    from collections.abc import Callable

    SimNodeFactory = Callable[..., SimNode]
    HoldFactory = Callable[[str], Any]
    SimBuild = Any

from ansible_collections.hygon.dcu.plugins.module_utils import hydmi
from ansible_collections.hygon.dcu.plugins.module_utils.cards import Placement
from ansible_collections.hygon.dcu.plugins.module_utils.hydmi import HydmiError, InstanceInUse
from ansible_collections.hygon.dcu.plugins.module_utils.node import (
    InstanceNotFound,
    Node,
    PlacementRefused,
    UuidMismatch,
)

UUID_LINE = re.compile(r"^mig_uuid:\s+(\S+)$", re.MULTILINE)


def enabled_node(sim_node: SimNode) -> Node:
    node = Node(str(sim_node.root))
    sim_node.switch_mode()
    return node


def test_bw_card_inventory_with_mode_off(sim_node: SimNode) -> None:
    node = Node(str(sim_node.root))
    assert node.mode().current is False and node.mode().source == "library"
    assert not node.partitioned()
    cards = node.cards()
    assert [c.index for c in cards] == [0, 1]
    card = cards[0]
    assert card.pci is None  # the registry exists only while the mode is on
    assert (card.slice_count, card.cu_count, card.memory_mib, card.healthy) == (4, 80, 65520, True)
    assert [
        (p.name, p.id, p.slices, p.cu_count, p.memory_mib, p.gi_count_max) for p in card.profiles
    ] == [
        ("2g.15gb", 3, 1, 20, 16380, 4),
        ("4g.31gb", 1, 2, 40, 32760, 2),
        ("8g.63gb", 0, 4, 80, 65520, 1),
    ]
    assert [tuple(map(str, p.placements)) for p in card.profiles] == [
        ("0:1", "1:1", "2:1", "3:1"),
        ("0:2", "2:2"),
        ("0:4",),
    ]
    assert card.remaining == {3: 4, 1: 2, 0: 1}
    assert node.instances() == []


def test_hypothetical_model_is_discovered_not_assumed(sim_node_factory: SimNodeFactory) -> None:
    sim = sim_node_factory(model="hypo-x8", cards=3)
    node = enabled_node(sim)
    cards = node.cards()
    assert len(cards) == 3
    card = cards[2]
    assert card.pci == "0000:5e:00.0"
    assert [p.name for p in card.profiles] == [
        "1g.16gb",
        "2g.32gb",
        "3g.48gb",
        "4g.64gb",
        "8g.128gb",
    ]
    assert [p.slices for p in card.profiles] == [1, 2, 3, 4, 8]  # widths 5..7 are gaps
    # real CU count: max(cu_count x gi_count_max) = max(112, 112, 84, 112, 112)
    assert card.cu_count == 112 and card.slice_count == 8
    created = node.create(2, 9, 4)  # 3g.48gb at 4:3
    assert created.gpu_instance_id == 1  # this model's first id
    assert created.profile is not None and created.profile.name == "3g.48gb"
    assert node.cards()[2].occupied == frozenset({4, 5, 6})


def test_no_virtualization_reports_no_profiles(sim_node_factory: SimNodeFactory) -> None:
    node = Node(str(sim_node_factory(virtualization=False).root))
    cards = node.cards()
    assert [c.profiles for c in cards] == [(), ()]
    assert all(c.healthy for c in cards)
    assert cards[0].cu_count == 80  # the attribute, as there is nothing to multiply


def test_mode_on_maps_cards_to_pci_through_the_registry(sim_node: SimNode) -> None:
    node = enabled_node(sim_node)
    assert node.mode().current is True and node.partitioned()
    assert [c.pci for c in node.cards()] == [sim_node.pci(0), sim_node.pci(1)]


def test_card_unreachable_by_pci_is_unhealthy(sim_node: SimNode) -> None:
    node = enabled_node(sim_node)
    sim_node.make_unreachable(1)
    cards = node.cards()
    assert cards[0].healthy and cards[0].profiles
    assert not cards[1].healthy
    assert cards[1].error is not None and "unreachable by PCI" in cards[1].error
    assert cards[1].pci == sim_node.pci(1)
    with pytest.raises(HydmiError):
        node.instances(1)
    assert node.instances(0) == []


def test_remaining_capacity_and_free_placements(sim_node: SimNode) -> None:
    node = enabled_node(sim_node)
    node.create(0, 1, 0)  # 4g.31gb on slices 0-1
    card = node.cards()[0]
    two, four, eight = card.profiles
    assert card.occupied == frozenset({0, 1})
    assert card.remaining == {3: 2, 1: 1, 0: 0}
    assert card.free_placements(two) == (Placement(2, 1), Placement(3, 1))
    assert card.free_placements(four) == (Placement(2, 2),)
    assert card.free_placements(eight) == ()
    assert node.cards()[1].remaining == {3: 4, 1: 2, 0: 1}


def library_remaining(node: Node, card_index: int) -> dict[int, int]:
    device = node.library.device_by_index(card_index)
    return {
        p.id: node.library.remaining_capacity(device, p.id)
        for p in node.cards()[card_index].profiles
    }


@pytest.mark.parametrize(
    ("model", "carve"),
    [
        ("c3000-bw", [(1, 0)]),  # 4g.31gb at 0:2
        ("c3000-bw", [(3, 1), (3, 3)]),  # two 2g.15gb, at slices 1 and 3
        ("hypo-x8", [(9, 0), (19, 5)]),  # 3g.48gb at 0:3, 1g.16gb at 5
        ("hypo-x8", [(14, 2), (19, 7)]),  # 2g.32gb at 2:2, 1g.16gb at 7
    ],
)
def test_computed_remaining_equals_the_librarys(
    sim_node_factory: SimNodeFactory, model: str, carve: list[tuple[int, int]]
) -> None:
    # Operators (mig_info) and the kubelet read the computed figure; the library's own must
    # agree, on an idle card and on a partly carved one.
    node = enabled_node(sim_node_factory(model=model, cards=2))
    for profile_id, start in carve:
        node.create(0, profile_id, start)
    carved, idle = node.cards()[0], node.cards()[1]
    assert carved.occupied and not idle.occupied
    assert carved.remaining == library_remaining(node, 0)
    assert idle.remaining == library_remaining(node, 1)
    assert carved.remaining != idle.remaining


def test_create_takes_the_cards_own_profile_and_placement(sim_node: SimNode) -> None:
    node = enabled_node(sim_node)
    _two, four, _eight = node.cards()[0].profiles
    created = node.create(0, four, four.placements[1])
    assert (created.profile, created.placement) == (four, Placement(2, 2))
    # By value: an equal profile read from the other card (same table) is this card's too.
    (_two, four_of_card1, _eight) = node.cards()[1].profiles
    again = node.create(0, four_of_card1, Placement(0, 2))
    assert again.placement == Placement(0, 2)
    assert sim_node.ops()[0] == "create_gi card=0 gi=3 profile=1 placement=2:2"


def test_create_refuses_a_profile_or_placement_the_card_does_not_have(sim_node: SimNode) -> None:
    node = enabled_node(sim_node)
    two, four, _eight = node.cards()[0].profiles
    with pytest.raises(PlacementRefused, match=r"offers no profile 4g\.31gb \(id 1\) as given"):
        node.create(0, dataclasses.replace(four, placements=(Placement(0, 2),)), Placement(0, 2))
    with pytest.raises(PlacementRefused, match=r"offers no profile 4g\.31gb"):
        node.create(0, dataclasses.replace(four, memory_mib=1), four.placements[0])
    with pytest.raises(
        PlacementRefused, match="no placement 1:2 on card 0; legal placements: 0:2 2:2"
    ):
        node.create(0, four, Placement(1, 2))
    with pytest.raises(PlacementRefused, match="no placement 1:1 on card 0"):
        node.create(0, four, two.placements[1])  # another profile's placement
    assert sim_node.ops() == []


def test_create_reads_uuid_from_conf_and_orders_gi_then_ci(sim_node: SimNode) -> None:
    node = enabled_node(sim_node)
    steps: list[str] = []
    created = node.create(1, 3, 2, checkpoint=steps.append)
    assert steps == ["gpu_instance_created", "compute_instance_created"]
    assert (created.card_index, created.gpu_instance_id, created.compute_instance_id) == (1, 3, 0)
    assert created.pci == sim_node.pci(1)
    assert created.placement == Placement(2, 1)
    assert created.conf_path == "/etc/dmi_mig_config/ci/dev1gi3ci0.conf"
    conf = sim_node.ci_conf(1, 3, 0)
    assert created.conf_host_path == str(conf)
    uuid_in_file = UUID_LINE.search(conf.read_text())
    assert uuid_in_file is not None and created.uuid == uuid_in_file.group(1)
    assert sim_node.ops() == [
        "create_gi card=1 gi=3 profile=3 placement=2:1",
        f"create_ci card=1 gi=3 ci=0 profile=0 uuid={created.uuid}",
    ]
    listed = node.instances()
    assert [(i.card_index, i.gpu_instance_id, i.uuid) for i in listed] == [(1, 3, created.uuid)]


def test_compute_instance_failure_destroys_the_gpu_instance(sim_node: SimNode) -> None:
    node = enabled_node(sim_node)
    sim_node.fail_next("ci_create", code=hydmi.INSUFFICIENT_RESOURCES)
    with pytest.raises(HydmiError) as caught:
        node.create(0, 1, 2)
    assert caught.value.code == hydmi.INSUFFICIENT_RESOURCES
    assert caught.value.call == "nvmlGpuInstanceCreateComputeInstance"
    assert sim_node.ops() == [
        "create_gi card=0 gi=3 profile=1 placement=2:2",
        "destroy_gi card=0 gi=3",
    ]
    assert node.instances() == [] and node.cards()[0].occupied == frozenset()


def test_illegal_requests_are_refused_before_the_library(sim_node: SimNode) -> None:
    node = enabled_node(sim_node)
    with pytest.raises(PlacementRefused, match="legal placements: 0:2 2:2"):
        node.create(0, 1, 1)
    with pytest.raises(PlacementRefused, match="offers no profile id 7"):
        node.create(0, 7, 0)
    assert sim_node.ops() == []


def test_reused_id_is_detected_through_the_uuid(sim_node: SimNode) -> None:
    node = enabled_node(sim_node)
    first = node.create(0, 3, 1)
    node.destroy(0, first.gpu_instance_id, expected_uuid=first.uuid)
    second = node.create(0, 3, 1)  # same profile, same placement: same id, fresh uuid
    assert second.gpu_instance_id == first.gpu_instance_id
    assert second.uuid != first.uuid
    ops_before = sim_node.ops()
    with pytest.raises(UuidMismatch) as caught:
        node.destroy(0, second.gpu_instance_id, expected_uuid=first.uuid)
    assert caught.value.actual == [second.uuid]
    assert sim_node.ops() == ops_before  # nothing destroyed
    assert [i.uuid for i in node.instances()] == [second.uuid]


def test_destroy_held_instance_is_in_use_then_succeeds_ci_first(
    sim_node: SimNode, kfd_holder: HoldFactory
) -> None:
    node = enabled_node(sim_node)
    created = node.create(0, 1, 0)
    assert created.conf_host_path is not None
    holder = kfd_holder(created.conf_host_path)  # a process using the instance
    with pytest.raises(InstanceInUse) as caught:
        node.destroy(0, created.gpu_instance_id, expected_uuid=created.uuid)
    assert caught.value.code == hydmi.IN_USE
    assert [i.uuid for i in node.instances()] == [created.uuid]
    holder.release()
    steps: list[str] = []
    node.destroy(0, created.gpu_instance_id, expected_uuid=created.uuid, checkpoint=steps.append)
    assert steps == ["compute_instance_destroyed"]
    assert sim_node.ops()[-2:] == [
        f"destroy_ci card=0 gi={created.gpu_instance_id} ci=0",
        f"destroy_gi card=0 gi={created.gpu_instance_id}",
    ]
    assert node.instances() == []


def test_gpu_instance_without_compute_instance_is_listed_and_destroyable(
    sim_node: SimNode,
) -> None:
    node = enabled_node(sim_node)

    def die(step: str) -> None:
        if step == "gpu_instance_created":
            raise KeyboardInterrupt  # the caller dies between GI and CI: no rollback

    with pytest.raises(KeyboardInterrupt):
        node.create(1, 0, 0, checkpoint=die)
    (bare,) = node.instances(1)
    assert (bare.compute_instance_id, bare.uuid, bare.conf_path) == (None, None, None)
    assert bare.profile is not None and bare.profile.name == "8g.63gb"
    with pytest.raises(UuidMismatch):
        node.destroy(1, bare.gpu_instance_id, expected_uuid="00000000-0000-0000-0000-000000000000")
    node.destroy(1, bare.gpu_instance_id)
    assert node.instances() == []
    with pytest.raises(InstanceNotFound):
        node.destroy(1, bare.gpu_instance_id)


def test_poison_directory_blocks_create_until_swept(sim_node: SimNode) -> None:
    node = enabled_node(sim_node)
    sim_node.ci_conf(0, 3, 0).mkdir()  # what a runtime leaves for a missing bind source
    registry = node.registry()
    assert [(f.kind, f.path) for f in registry.poison] == [
        ("poison", "/etc/dmi_mig_config/ci/dev0gi3ci0.conf")
    ]
    with pytest.raises(HydmiError) as caught:
        node.create(0, 3, 0)
    assert caught.value.code == hydmi.INSUFFICIENT_RESOURCES
    assert node.instances() == []  # rolled back
    assert node.sweep_poison().swept == ["/etc/dmi_mig_config/ci/dev0gi3ci0.conf"]
    assert node.create(0, 3, 0).uuid is not None


def test_reboot_loses_instances_and_the_driver_recreates_the_registry(sim_node: SimNode) -> None:
    # With the mode on, the driver writes the registry again when the mode comes up after boot:
    # the card files are back, no instance entry is (docs/dev/hardware.md, "Mode").
    node = enabled_node(sim_node)
    node.create(0, 0, 0)
    sim_node.reboot()
    assert node.mode().current is True
    assert node.instances() == []
    registry = node.registry()
    assert registry.present and registry.conf_files == [] and registry.findings == []
    assert [c.pci for c in node.cards()] == [sim_node.pci(0), sim_node.pci(1)]
