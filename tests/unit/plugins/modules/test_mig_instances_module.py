"""mig_instances against a simulated node: forced order, held instances, poison, card filter."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from ansible_collections.hygon.dcu.plugins.module_utils.node import Instance, Node
from ansible_collections.hygon.dcu.plugins.modules import mig_instances, mig_mode
from simnode import SimNode

if TYPE_CHECKING:
    from collections.abc import Callable

    ModuleRunner = Callable[..., dict[str, Any]]
    HoldFactory = Callable[[Any], Any]
    SimBuild = Any


def carve(sim_node: SimNode) -> tuple[Node, list[Instance]]:
    node = Node(str(sim_node.root))
    sim_node.switch_mode()
    created = [node.create(0, 3, 0), node.create(0, 1, 2), node.create(1, 0, 0)]
    return node, created


def destroy_ops(sim_node: SimNode) -> list[str]:
    return [op for op in sim_node.ops() if op.startswith("destroy_")]


def test_teardown_check_real_check_real_then_disable(
    sim_node: SimNode, sim_build: SimBuild, run_module: ModuleRunner
) -> None:
    node, created = carve(sim_node)
    args = {"state": "absent", "host_root": str(sim_node.root)}

    predicted = run_module(mig_instances, args, check_mode=True, diff=True)
    assert predicted["changed"] is True
    assert sorted(i["uuid"] for i in predicted["destroyed"]) == sorted(str(c.uuid) for c in created)
    assert "uuid " + str(created[0].uuid) in predicted["diff"]["before"]
    assert predicted["diff"]["after"] == "\n"
    assert destroy_ops(sim_node) == [] and len(node.instances()) == 3

    done = run_module(mig_instances, args, diff=True)
    assert done["changed"] is True and done["remaining"] == []
    assert sorted(i["uuid"] for i in done["destroyed"]) == sorted(str(c.uuid) for c in created)
    ops = destroy_ops(sim_node)
    assert len(ops) == 6
    # Every GPU instance goes only after its compute instance.
    for instance in created:
        gi = f"card={instance.card_index} gi={instance.gpu_instance_id}"
        assert ops.index(f"destroy_ci {gi} ci=0") < ops.index(f"destroy_gi {gi}")
    assert node.instances() == []

    assert run_module(mig_instances, args, check_mode=True)["changed"] is False
    assert run_module(mig_instances, args)["changed"] is False
    disabled = run_module(
        mig_mode,
        {
            "state": "disabled",
            "host_root": str(sim_node.root),
            "hy_smi_path": str(sim_build.hy_smi),
        },
    )
    assert disabled["changed"] is True and disabled["mode"] == "disabled"


def test_held_instance_is_reported_not_forced_then_destroyed(
    sim_node: SimNode, run_module: ModuleRunner, kfd_holder: HoldFactory
) -> None:
    node, created = carve(sim_node)
    held = created[1]
    holder = kfd_holder(held.conf_host_path)
    args = {"state": "absent", "host_root": str(sim_node.root)}

    result = run_module(mig_instances, args)
    assert result["failed"] is True
    assert [r["uuid"] for r in result["remaining"]] == [held.uuid]
    (named,) = result["remaining"][0]["holders"]
    assert named.startswith(f"pid {holder.pid} (")
    assert f"GPU instance {held.gpu_instance_id} 4g.31gb at placement 2:2" in result["msg"]
    assert "still in use" in result["msg"]
    assert sorted(i["uuid"] for i in result["destroyed"]) == sorted(
        str(c.uuid) for c in created if c is not held
    )
    assert [i.uuid for i in node.instances()] == [held.uuid]
    assert f"destroy_gi card=0 gi={held.gpu_instance_id}" not in sim_node.ops()

    holder.release()
    again = run_module(mig_instances, args)
    assert again["changed"] is True and [i["uuid"] for i in again["destroyed"]] == [held.uuid]
    assert node.instances() == []


def test_held_instance_released_while_waiting(
    sim_node: SimNode, run_module: ModuleRunner, kfd_holder: HoldFactory
) -> None:
    node, created = carve(sim_node)
    holder = kfd_holder(created[2].conf_host_path)
    releaser = threading.Timer(0.5, holder.release)
    releaser.start()
    try:
        result = run_module(
            mig_instances,
            {"host_root": str(sim_node.root), "wait_timeout": 60, "retry_interval": 0.1},
        )
    finally:
        releaser.join()
    assert result["changed"] is True and result["remaining"] == []
    assert len(result["destroyed"]) == 3 and node.instances() == []


def test_poison_is_swept_and_a_full_directory_is_left(
    sim_node: SimNode, run_module: ModuleRunner
) -> None:
    sim_node.switch_mode()
    sim_node.ci_conf(0, 5, 0).mkdir()
    full = sim_node.ci_conf(1, 4, 0)
    full.mkdir()
    (full / "keep").write_text("x")
    args = {"host_root": str(sim_node.root)}

    predicted = run_module(mig_instances, args, check_mode=True)
    assert predicted["changed"] is True
    assert predicted["swept"] == ["/etc/dmi_mig_config/ci/dev0gi5ci0.conf"]
    assert sim_node.ci_conf(0, 5, 0).is_dir()

    done = run_module(mig_instances, args)
    assert done["changed"] is True and done["destroyed"] == []
    assert done["swept"] == ["/etc/dmi_mig_config/ci/dev0gi5ci0.conf"]
    assert [p["path"] for p in done["poison_left"]] == ["/etc/dmi_mig_config/ci/dev1gi4ci0.conf"]
    assert "not empty" in str(done["warnings"])
    assert not sim_node.ci_conf(0, 5, 0).exists() and (full / "keep").exists()
    assert run_module(mig_instances, args)["changed"] is False


def test_cards_by_index_and_pci(sim_node: SimNode, run_module: ModuleRunner) -> None:
    node, created = carve(sim_node)
    sim_node.ci_conf(0, 9, 0).mkdir()
    only_one = run_module(
        mig_instances, {"host_root": str(sim_node.root), "cards": [sim_node.pci(1)]}
    )
    assert [i["uuid"] for i in only_one["destroyed"]] == [created[2].uuid]
    assert only_one["swept"] == []  # the poison belongs to card 0
    assert sorted(str(i.uuid) for i in node.instances()) == sorted(
        [str(created[0].uuid), str(created[1].uuid)]
    )
    zero = run_module(mig_instances, {"host_root": str(sim_node.root), "cards": ["0"]})
    assert len(zero["destroyed"]) == 2
    assert zero["swept"] == ["/etc/dmi_mig_config/ci/dev0gi9ci0.conf"]
    bad = run_module(mig_instances, {"host_root": str(sim_node.root), "cards": ["0000:ff:00.0"]})
    assert bad["failed"] is True and "neither a card index" in bad["msg"]
    assert sim_node.pci(0) in bad["msg"]


def test_missing_library_fails_with_next_step(sim_node: SimNode, run_module: ModuleRunner) -> None:
    carve(sim_node)
    result = run_module(
        mig_instances,
        {"host_root": str(sim_node.root), "library_path": str(sim_node.root / "nope.so")},
    )
    assert result["failed"] is True
    assert "LIBRARY_NOT_FOUND" in result["msg"] and "library_path" in result["msg"]
    assert destroy_ops(sim_node) == []


def test_sweep_only_keeps_every_instance_and_needs_no_library(
    sim_node: SimNode, run_module: ModuleRunner
) -> None:
    node, created = carve(sim_node)
    sim_node.ci_conf(0, 9, 0).mkdir()
    sim_node.ci_conf(1, 7, 0).mkdir()
    # A library that cannot load: a sweep of every card reads only the registry.
    args = {
        "host_root": str(sim_node.root),
        "sweep_only": True,
        "library_path": str(sim_node.root / "nope.so"),
    }
    swept = ["/etc/dmi_mig_config/ci/dev0gi9ci0.conf", "/etc/dmi_mig_config/ci/dev1gi7ci0.conf"]

    predicted = run_module(mig_instances, args, check_mode=True, diff=True)
    assert predicted["changed"] is True and predicted["destroyed"] == []
    assert predicted["swept"] == swept
    assert sim_node.ci_conf(0, 9, 0).is_dir()

    done = run_module(mig_instances, args, diff=True)
    assert done["changed"] is True and done["destroyed"] == [] and done["swept"] == swept
    assert done["diff"] == predicted["diff"]
    assert not sim_node.ci_conf(0, 9, 0).exists() and not sim_node.ci_conf(1, 7, 0).exists()
    assert destroy_ops(sim_node) == []
    assert sorted(str(i.uuid) for i in node.instances()) == sorted(str(c.uuid) for c in created)

    assert run_module(mig_instances, args, check_mode=True)["changed"] is False
    assert run_module(mig_instances, args)["changed"] is False

    sim_node.ci_conf(0, 8, 0).mkdir()
    sim_node.ci_conf(1, 8, 0).mkdir()
    one_card = run_module(
        mig_instances, {"host_root": str(sim_node.root), "sweep_only": True, "cards": ["1"]}
    )
    assert one_card["swept"] == ["/etc/dmi_mig_config/ci/dev1gi8ci0.conf"]
    assert sim_node.ci_conf(0, 8, 0).is_dir() and len(node.instances()) == 3
