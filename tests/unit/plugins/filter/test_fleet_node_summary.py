"""fleet_node_summary: one node's entry of fleet.json."""

from __future__ import annotations

import json
from typing import Any

import pytest
from ansible_collections.hygon.dcu.plugins.filter.fleet_node_summary import (
    FilterModule,
    fleet_node_summary,
)

PREFIX = "hygon.com/dcu.partition."
UUID_A = "3b2a1c9e-7f00-4c1d-9a55-0123456789ab"
UUID_B = "9d8c7b6a-0000-4000-8000-0000000000bb"


def card(index: int) -> dict[str, Any]:
    return {
        "index": index,
        "pci": f"0000:0{index}:00.0",
        "model": None,
        "slice_count": 4,
        "cu_count": 80,
        "memory_mib": 65520,
        "healthy": True,
        "error": None,
        "profiles": [],
        "occupied_slices": [0, 2, 3],
        "remaining": {},
        "free_placements": {"2g.15gb": ["1:1"], "4g.31gb": []},
    }


def instance(card_index: int, gi: int, placement: str, uuid: str | None) -> dict[str, Any]:
    return {
        "card": card_index,
        "pci": "x",
        "gpu_instance_id": gi,
        "compute_instance_id": 0 if uuid else None,
        "profile": "2g.15gb",
        "profile_id": 3,
        "placement": placement,
        "uuid": uuid,
        "conf_path": None,
    }


def mig_info(**more: Any) -> dict[str, Any]:
    info = {
        "mode": {"current": "enabled", "pending": "enabled", "source": "library", "error": None},
        "partitioned": True,
        "library": {"path": "/opt/hyhal/lib/libhydmi_mig.so.1", "usable": True, "error": None},
        "virtualization": True,
        "cards": [card(1), card(0)],
        "profiles": [],
        "instances": [
            instance(0, 5, "2:2", UUID_B),
            instance(0, 3, "0:1", UUID_A),
            instance(1, 4, "0:1", None),
        ],
        "poison": [
            # Sorted without regard to case: dev0 before Dev1.
            {"kind": "poison", "path": "/etc/dmi_mig_config/ci/Dev1gi9ci0.conf", "detail": "d"},
            {"kind": "poison", "path": "/etc/dmi_mig_config/ci/dev0gi9ci0.conf", "detail": "d"},
        ],
        "findings": [],
        "errors": [],
        "logical_slices": {
            "library": {"path": "/opt/hyhal/lib/libhydmi.so", "usable": True, "error": None},
            "vdevs": [],
            "conf_paths": [],
            "stray_confs": [],
        },
    }
    info.update(more)
    return info


def pod(namespace: str, name: str, annotations: dict[str, str], **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"namespace": namespace, "name": name, "annotations": annotations},
        "status": status,
    }


def plugin_pod(name: str, ready: bool) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "hygon-dcu-system", "name": name},
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def summary(info: dict[str, Any], kubernetes: bool = True, **more: Any) -> dict[str, Any]:
    arguments: dict[str, Any] = {"pods": [], "plugin_pods": [], **more}
    return fleet_node_summary(
        info,
        host="node-a",
        kubernetes=kubernetes,
        node_name="gpu-a",
        annotation_prefix=PREFIX,
        **arguments,
    )


def grant(uuid: str) -> str:
    return json.dumps({"card": "0", "uuid": uuid})


def test_partitions_list_the_pods_whose_grant_holds_their_uuid() -> None:
    pods = [
        pod("ml", "trainer", {PREFIX + "main": grant(UUID_A)}, phase="Running"),
        # The key's format may change: any key under the prefix without its last "." counts.
        pod("Research", "long", {"hygon.com/dcu.partition-7f3a9c": grant(UUID_B)}),
        pod("ml", "bystander", {"example.com/note": UUID_A}),
        pod("ml", "two-containers", {PREFIX + "a": grant(UUID_A), PREFIX + "b": grant(UUID_A)}),
    ]

    node = summary(mig_info(), pods=pods)

    (card0, card1) = node["cards"]
    assert [card0["index"], card1["index"]] == [0, 1]
    assert [p["placement"] for p in card0["partitions"]] == ["0:1", "2:2"]
    first, second = card0["partitions"]
    assert (first["start"], first["size"], second["start"], second["size"]) == (0, 1, 2, 2)
    assert [(p["namespace"], p["name"]) for p in first["pods"]] == [
        ("ml", "trainer"),
        ("ml", "two-containers"),
    ]
    assert first["pods"][1] == {
        "namespace": "ml",
        "name": "two-containers",
        "phase": "",
        "terminating": False,
    }
    assert [p["name"] for p in second["pods"]] == ["long"]
    assert card1["partitions"][0]["pods"] == []


def test_pods_are_sorted_by_namespace_and_name_without_regard_to_case() -> None:
    pods = [
        pod("ml", "b", {PREFIX + "c": grant(UUID_A)}),
        pod("ML", "a", {PREFIX + "c": grant(UUID_A)}),
        pod("aa", "z", {PREFIX + "c": grant(UUID_A)}),
    ]

    (first, _second) = summary(mig_info(), pods=pods)["cards"][0]["partitions"]

    assert [(p["namespace"], p["name"]) for p in first["pods"]] == [
        ("aa", "z"),
        ("ML", "a"),
        ("ml", "b"),
    ]


def test_a_terminating_pod_is_marked() -> None:
    terminating = pod("ml", "going", {PREFIX + "c": grant(UUID_A)})
    terminating["metadata"]["deletionTimestamp"] = "2024-05-01T10:00:00Z"

    (first, _second) = summary(mig_info(), pods=[terminating])["cards"][0]["partitions"]

    assert first["pods"][0]["terminating"] is True


def test_the_node_facts_are_carried_over() -> None:
    node = summary(mig_info(errors=["card 2: query failed"]))

    assert {key: node[key] for key in node if key not in {"cards", "plugin"}} == {
        "host": "node-a",
        "kubernetes": True,
        "node_name": "gpu-a",
        "mode": "enabled",
        "pending": "enabled",
        "mode_source": "library",
        "partitioned": True,
        "virtualization": True,
        "library_error": None,
        "slices_error": None,
        "errors": ["card 2: query failed"],
        "poison": [
            "/etc/dmi_mig_config/ci/dev0gi9ci0.conf",
            "/etc/dmi_mig_config/ci/Dev1gi9ci0.conf",
        ],
    }
    assert list(node["cards"][0]) == [
        "index",
        "pci",
        "model",
        "slice_count",
        "cu_count",
        "memory_mib",
        "healthy",
        "error",
        "occupied_slices",
        "partitions",
        "free_placements",
        "logical_slices",
        "slice_use",
    ]


def vdev(vdev_id: int, card_index: int, cus: int, mib: int) -> dict[str, Any]:
    return {
        "id": vdev_id,
        "card": card_index,
        "compute_units": cus,
        "memory_mib": mib,
        "conf_path": f"/etc/vdev/vdev{vdev_id}.conf",
        "conf_problem": None,
    }


def test_each_card_lists_its_slices_and_what_they_use() -> None:
    info = mig_info(
        mode={"current": "disabled", "pending": "disabled", "source": "library", "error": None},
        instances=[],
    )
    info["logical_slices"]["vdevs"] = [
        vdev(4, 1, 40, 32768),
        vdev(1, 0, 20, 16384),
        vdev(0, 0, 30, 8192),
    ]

    first, second = summary(info)["cards"]

    assert [s["id"] for s in first["logical_slices"]] == [0, 1]
    assert first["slice_use"] == {
        "used_compute_units": 50,
        "free_compute_units": 30,
        "used_memory_mib": 24576,
        "free_memory_mib": 40944,
    }
    assert second["logical_slices"] == [
        {"id": 4, "compute_units": 40, "memory_mib": 32768, "conf_problem": None, "pods": []}
    ]


def slice_grant(card_pci: str, vdev_id: int) -> str:
    """The annotation value the device plugin writes on a pod it gave a slice."""
    return json.dumps(
        {
            "card": card_pci,
            "container": "main",
            "slice": vdev_id,
            "compute_units": 20,
            "memory_mib": 16384,
        }
    )


def test_each_slice_lists_the_running_pods_the_plugin_gave_it() -> None:
    info = mig_info(
        mode={"current": "disabled", "pending": "disabled", "source": "library", "error": None},
        instances=[],
    )
    info["logical_slices"]["vdevs"] = [vdev(0, 0, 20, 16384), vdev(1, 1, 20, 16384)]
    pods = [
        pod("ml", "notebook", {PREFIX + "main": slice_grant("0000:00:00.0", 0)}, phase="Running"),
        # Same id on another card: not this slice.
        pod("ml", "other-card", {PREFIX + "main": slice_grant("0000:01:00.0", 0)}),
        # Finished: its slice was destroyed and the id may be reused.
        pod("ml", "done", {PREFIX + "main": slice_grant("0000:00:00.0", 0)}, phase="Succeeded"),
        pod("ml", "partition", {PREFIX + "main": grant(UUID_A)}),
        pod("ml", "damaged", {PREFIX + "main": "{not json"}),
    ]

    first, second = summary(info, pods=pods)["cards"]

    assert [p["name"] for p in first["logical_slices"][0]["pods"]] == ["notebook"]
    assert second["logical_slices"][0]["pods"] == []
    without = summary(info, kubernetes=False)["cards"][0]
    assert without["logical_slices"][0]["pods"] is None


def test_slices_that_cannot_be_read_are_said_so_not_shown_as_none() -> None:
    info = mig_info()
    info["logical_slices"]["library"] = {"path": None, "usable": False, "error": "no libhydmi.so"}
    assert summary(info)["slices_error"] == "no libhydmi.so"
    older = mig_info()
    del older["logical_slices"]
    assert summary(older)["slices_error"] == "not reported by this node's mig_info"


def test_an_unusable_library_and_an_unread_mode_are_said_so() -> None:
    info = mig_info(
        mode={"current": None, "pending": None, "source": "registry", "error": "x"},
        library={"path": None, "usable": False, "error": "libhydmi_mig.so.1: not found"},
        cards=[],
        instances=[],
    )

    node = summary(info)

    assert (node["mode"], node["mode_source"]) == ("unknown", "registry")
    assert node["library_error"] == "libhydmi_mig.so.1: not found"
    assert node["cards"] == []


@pytest.mark.parametrize(
    ("pods", "state"),
    [
        ([], "absent"),
        ([plugin_pod("p-1", ready=False)], "not ready"),
        ([plugin_pod("p-2", ready=False), plugin_pod("p-1", ready=True)], "ready"),
    ],
)
def test_the_device_plugin_state_follows_its_pods_readiness(
    pods: list[dict[str, Any]], state: str
) -> None:
    plugin = summary(mig_info(), plugin_pods=pods)["plugin"]

    assert plugin["state"] == state
    assert [p["name"] for p in plugin["pods"]] == sorted(p["metadata"]["name"] for p in pods)


def test_without_kubernetes_no_pod_is_known() -> None:
    node = summary(mig_info(), kubernetes=False)

    assert node["node_name"] is None
    assert node["plugin"] == {"state": "not read", "pods": []}
    assert all(p["pods"] is None for c in node["cards"] for p in c["partitions"])


@pytest.mark.parametrize(
    ("placement", "start", "size"), [("3:2", 3, 2), ("7", 7, 0), ("x:y", 0, 0)]
)
def test_a_placement_is_read_as_start_and_size(placement: str, start: int, size: int) -> None:
    info = mig_info(cards=[card(0)], instances=[instance(0, 1, placement, None)])

    (part,) = summary(info)["cards"][0]["partitions"]

    assert (part["placement"], part["start"], part["size"]) == (placement, start, size)


def test_the_plugin_exposes_the_filter_by_its_name() -> None:
    assert FilterModule().filters() == {"fleet_node_summary": fleet_node_summary}
