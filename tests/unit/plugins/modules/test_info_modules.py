"""kfd_holders_info and mig_info against simulated nodes."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from ansible_collections.hygon.dcu.plugins.module_utils.node import Node
from ansible_collections.hygon.dcu.plugins.modules import kfd_holders_info, mig_info
from simnode import SimNode

if TYPE_CHECKING:
    ModuleRunner = Callable[..., dict[str, Any]]
    HoldFactory = Callable[[Any], Any]
    SimNodeFactory = Callable[..., SimNode]


def test_holders_named_mkfd_ignored(
    sim_node: SimNode, run_module: ModuleRunner, kfd_holder: HoldFactory
) -> None:
    args = {"host_root": str(sim_node.root)}
    empty = run_module(kfd_holders_info, args)
    assert empty["holders"] == [] and empty["changed"] is False
    assert empty["device"] == str(sim_node.kfd)
    kfd_holder(sim_node.mkfd)
    first, second = kfd_holder(sim_node.kfd), kfd_holder(sim_node.kfd)
    found = run_module(kfd_holders_info, args, check_mode=True)
    assert [(h["pid"], h["fd_count"]) for h in found["holders"]] == [
        (first.pid, 1),
        (second.pid, 1),
    ]
    assert all("import os, sys" in h["command"] for h in found["holders"])
    assert set(found["holders"][0]) == {"pid", "command", "fd_count", "pod_uid", "container_id"}
    excluded = run_module(kfd_holders_info, dict(args, exclude_pids=[first.pid]))
    assert [h["pid"] for h in excluded["holders"]] == [second.pid]


def test_wait_fails_naming_the_remaining_holder(
    sim_node: SimNode, run_module: ModuleRunner, kfd_holder: HoldFactory
) -> None:
    holder = kfd_holder(sim_node.kfd)
    result = run_module(kfd_holders_info, {"host_root": str(sim_node.root), "wait_timeout": 1})
    assert result["failed"] is True
    assert f"pid {holder.pid} (" in result["msg"] and "after 1 s" in result["msg"]
    assert [h["pid"] for h in result["holders"]] == [holder.pid]


def test_wait_returns_once_the_holder_goes(
    sim_node: SimNode, run_module: ModuleRunner, kfd_holder: HoldFactory
) -> None:
    holder = kfd_holder(sim_node.kfd)
    releaser = threading.Timer(0.5, holder.release)
    releaser.start()
    try:
        result = run_module(kfd_holders_info, {"host_root": str(sim_node.root), "wait_timeout": 60})
    finally:
        releaser.join()
    assert "failed" not in result and result["holders"] == []


def test_mig_info_reports_everything(sim_node: SimNode, run_module: ModuleRunner) -> None:
    node = Node(str(sim_node.root))
    sim_node.switch_mode()
    created = node.create(1, 3, 3)
    sim_node.ci_conf(0, 7, 0).mkdir()
    info = run_module(mig_info, {"host_root": str(sim_node.root)}, check_mode=True)["mig_info"]
    assert info["mode"] == {
        "current": "enabled",
        "pending": "enabled",
        "source": "library",
        "error": None,
    }
    assert info["partitioned"] is True and info["virtualization"] is True
    assert info["library"]["usable"] is True
    # In-process the loader may answer by soname once any test loaded it: only the name is stable.
    assert info["library"]["path"].endswith("libhydmi_mig.so.1")
    assert [(c["index"], c["pci"], c["cu_count"], c["memory_mib"]) for c in info["cards"]] == [
        (0, sim_node.pci(0), 80, 65520),
        (1, sim_node.pci(1), 80, 65520),
    ]
    card1 = info["cards"][1]
    assert card1["occupied_slices"] == [3]
    assert card1["remaining"] == {"2g.15gb": 3, "4g.31gb": 1, "8g.63gb": 0}
    assert card1["free_placements"]["4g.31gb"] == ["0:2"]
    assert [(p["name"], p["cards"]) for p in info["profiles"]] == [
        ("2g.15gb", [0, 1]),
        ("4g.31gb", [0, 1]),
        ("8g.63gb", [0, 1]),
    ]
    assert [(i["card"], i["profile"], i["placement"], i["uuid"]) for i in info["instances"]] == [
        (1, "2g.15gb", "3:1", created.uuid)
    ]
    assert [p["path"] for p in info["poison"]] == ["/etc/dmi_mig_config/ci/dev0gi7ci0.conf"]
    assert info["errors"] == []
    # Capacity on empty cards, whatever is carved: four 2g.15gb, two 4g.31gb, one 8g.63gb each.
    assert info["node_labels"] == {
        "hygon.com/dcu.count": "2",
        "hygon.com/dcu.mig.capable": "true",
        "hygon.com/dcu.mig.mode": "on",
        "hygon.com/dcu.mig-2g.15gb.count": "8",
        "hygon.com/dcu.mig-4g.31gb.count": "4",
        "hygon.com/dcu.mig-8g.63gb.count": "2",
    }


def test_mig_info_without_virtualization_or_library(
    sim_node_factory: SimNodeFactory, run_module: ModuleRunner
) -> None:
    plain = sim_node_factory(virtualization=False)
    info = run_module(mig_info, {"host_root": str(plain.root)})["mig_info"]
    assert info["virtualization"] is False and info["partitioned"] is False
    assert [c["profiles"] for c in info["cards"]] == [[], []]
    assert info["node_labels"] == {
        "hygon.com/dcu.count": "2",
        "hygon.com/dcu.mig.capable": "false",
        "hygon.com/dcu.mig.mode": "off",
    }

    broken = run_module(
        mig_info, {"host_root": str(plain.root), "library_path": str(plain.root / "x.so")}
    )["mig_info"]
    assert broken["partitioned"] is False and broken["library"]["usable"] is False
    assert "LIBRARY_NOT_FOUND" in broken["library"]["error"]
    assert broken["mode"]["source"] == "registry" and broken["mode"]["current"] == "disabled"
    assert broken["cards"] == [] and broken["virtualization"] is None
    assert broken["node_labels"] is None  # not "0 cards": nothing is certain


def test_mig_info_unreachable_card_is_a_gap_not_a_failure(
    sim_node: SimNode, run_module: ModuleRunner
) -> None:
    node = Node(str(sim_node.root))
    sim_node.switch_mode()
    node.create(0, 0, 0)
    sim_node.make_unreachable(1)
    info = run_module(mig_info, {"host_root": str(sim_node.root)})["mig_info"]
    assert [c["healthy"] for c in info["cards"]] == [True, False]
    assert len(info["instances"]) == 1
    assert len(info["errors"]) == 1 and info["errors"][0].startswith("card 1:")


def test_a_host_root_without_dev_kfd_is_reported_as_an_incomplete_scan(
    sim_node: SimNode, run_module: ModuleRunner, kfd_holder: HoldFactory, tmp_path: Path
) -> None:
    kfd_holder(sim_node.kfd)
    wrong_root = tmp_path / "not-the-node"
    wrong_root.mkdir()

    report = run_module(kfd_holders_info, {"host_root": str(wrong_root)}, check_mode=True)

    assert "failed" not in report
    assert report["holders"] == []
    assert report["complete"] is False
    assert report["gaps"] == [
        {
            "kind": "no_device",
            "detail": f"{wrong_root}/dev/kfd does not exist, so no open file can be matched to it",
        }
    ]
    # Waiting for an empty list is no answer when the list cannot be trusted.
    waited = run_module(kfd_holders_info, {"host_root": str(wrong_root), "wait_timeout": 1})
    assert waited["failed"] is True
    assert waited["msg"].startswith(f"cannot tell whether anything holds {wrong_root}/dev/kfd: ")
    assert "point host_root at the node's root directory" in waited["msg"]
    complete = run_module(kfd_holders_info, {"host_root": str(sim_node.root)})
    assert complete["complete"] is True and complete["gaps"] == []


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run the module as another user")
def test_a_scan_as_a_user_who_cannot_read_every_process_says_so_instead_of_warning(
    run_module_as: Callable[..., dict[str, Any]],
) -> None:
    # /dev/null exists for every user, so the only gap left is the processes it may not read.
    report = run_module_as(65534, kfd_holders_info, {"device": "/dev/null"})

    assert "failed" not in report, report
    assert "warnings" not in report
    assert report["complete"] is False
    assert 1 in report["unreadable_pids"]
    assert [gap["kind"] for gap in report["gaps"]] == ["unreadable_processes"]
    assert "which runs as uid 65534" in report["gaps"][0]["detail"]
