"""fleet_node_lines: one node of the fleet report as the lines the run prints."""

from __future__ import annotations

from typing import Any

from ansible_collections.hygon.dcu.plugins.filter.fleet_node_lines import (
    FilterModule,
    fleet_node_lines,
)


def node(**more: Any) -> dict[str, Any]:
    summary = {
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
        "errors": [],
        "cards": [
            {
                "index": 0,
                "pci": "0000:09:00.0",
                "model": None,
                "slice_count": 4,
                "cu_count": 80,
                "memory_mib": 65520,
                "healthy": True,
                "error": None,
                "occupied_slices": [0, 2, 3],
                "partitions": [
                    {
                        "profile": "2g.15gb",
                        "placement": "0:1",
                        "start": 0,
                        "size": 1,
                        "uuid": "u-1",
                        "gpu_instance_id": 3,
                        "compute_instance_id": 0,
                        "pods": [{"namespace": "ml", "name": "trainer"}],
                    },
                    {
                        "profile": None,
                        "placement": "2:2",
                        "start": 2,
                        "size": 2,
                        "uuid": None,
                        "gpu_instance_id": 5,
                        "compute_instance_id": None,
                        "pods": [],
                    },
                ],
                "free_placements": {"4g.31gb": [], "2g.15gb": ["1:1"], "Big": []},
                "logical_slices": [],
                "slice_use": {
                    "used_compute_units": 0,
                    "free_compute_units": 80,
                    "used_memory_mib": 0,
                    "free_memory_mib": 65520,
                },
            }
        ],
        "poison": [],
        "plugin": {"state": "ready", "pods": [{"namespace": "hygon-dcu-system", "name": "dp-a"}]},
    }
    summary.update(more)
    return summary


def test_a_partitioned_node_is_shown_card_by_card() -> None:
    assert fleet_node_lines(node(), 10) == [
        "mode enabled, read from the library; device plugin: ready (dp-a)",
        "card 0 0000:09:00.0, model not reported by the driver, 4 slices [#.##]"
        " (80 CUs, 65520 MiB)",
        "  partition 2g.15gb at 0:1 (GPU instance 3, compute instance 0) uuid u-1: pod ml/trainer",
        "  partition unknown profile at 2:2 (GPU instance 5, compute instance none) uuid none:"
        " no pod",
        "  free placements: 2g.15gb 1:1; 4g.31gb none; Big none",
        "poison directories: none",
    ]


def test_long_lists_are_cut_at_shown() -> None:
    poison = [f"/etc/dmi_mig_config/ci/dev0gi{n}ci0.conf" for n in range(4)]

    lines = fleet_node_lines(node(poison=poison, errors=["e1", "e2", "e3"]), 2)

    assert lines[-2:] == [
        "poison directories: 4: /etc/dmi_mig_config/ci/dev0gi0ci0.conf,"
        " /etc/dmi_mig_config/ci/dev0gi1ci0.conf and 2 more (see fleet.json)",
        "query errors: e1, e2 and 1 more (see fleet.json)",
    ]


def test_a_list_of_exactly_shown_entries_is_not_cut() -> None:
    assert fleet_node_lines(node(errors=["e1", "e2"]), 2)[-1] == "query errors: e1, e2"


def test_a_node_read_without_kubernetes_says_its_pods_are_not_read() -> None:
    summary = node(kubernetes=False, plugin={"state": "not read", "pods": []})
    for part in summary["cards"][0]["partitions"]:
        part["pods"] = None

    lines = fleet_node_lines(summary, 10)

    assert (
        lines[0]
        == "mode enabled, read from the library; device plugin: not read (Kubernetes steps off)"
    )
    assert lines[2].endswith(": pods not read (Kubernetes steps off)")


def test_a_node_with_partitioning_off_and_a_card_that_fails() -> None:
    summary = node(mode="disabled", pending="enabled", library_error="no library")
    card = summary["cards"][0]
    card.update(pci=None, healthy=False, error="query failed", partitions=[], free_placements={})

    assert fleet_node_lines(summary, 10)[:6] == [
        "mode disabled (pending enabled), read from the library; device plugin: ready (dp-a)",
        "management library unusable: no library",
        "card 0 PCI address unknown (mode off), model not reported by the driver, 4 slices [#.##]"
        " (80 CUs, 65520 MiB); FAILS QUERIES: query failed",
        "  no partition",
        "  free placements once partitioning is on: none (no profile reported)",
        "  logical slices: none; free 80 CUs, 65520 MiB",
    ]


def test_a_node_with_partitioning_off_lists_each_cards_slices_and_whats_free() -> None:
    summary = node(mode="disabled", pending="disabled")
    card = summary["cards"][0]
    card.update(occupied_slices=[], partitions=[])
    card["logical_slices"] = [
        {
            "id": 0,
            "compute_units": 20,
            "memory_mib": 16384,
            "conf_problem": None,
            "pods": [{"namespace": "ml", "name": "notebook"}],
        },
        {
            "id": 2,
            "compute_units": 30,
            "memory_mib": 24576,
            "conf_problem": "vdev2.conf is missing",
            "pods": [],
        },
    ]
    card["slice_use"] = {
        "used_compute_units": 50,
        "free_compute_units": 30,
        "used_memory_mib": 40960,
        "free_memory_mib": 24560,
    }

    assert fleet_node_lines(summary, 10)[-2] == (
        "  logical slices: 0 (20 CUs, 16384 MiB; pod ml/notebook), 2 (30 CUs, 24576 MiB; conf: "
        "vdev2.conf is missing); free 30 CUs, 24560 MiB"
    )
    unknown = node(mode="disabled", pending="disabled", slices_error="libhydmi.so: not found")
    lines = fleet_node_lines(unknown, 10)
    assert "logical slices unknown: libhydmi.so: not found" in lines
    assert not any(line.startswith("  logical slices:") for line in lines)


def test_the_plugin_exposes_the_filter_by_its_name() -> None:
    assert FilterModule().filters() == {"fleet_node_lines": fleet_node_lines}
