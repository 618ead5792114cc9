"""Crash safety: the plugin is SIGKILLed at each step of create and of
destroy; after a restart the node converges with no leaked instance and no double grant."""

from __future__ import annotations

import multiprocessing
import os
import signal
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
import simnode
from crash_child import (
    allocate_and_die,
    allocate_slice_and_die,
    reclaim_and_die,
    reclaim_slices_and_die,
)
from fake_kube import limits_for, slice_limits
from plugin_harness import Harness

CREATE_STEPS = ["gpu_instance_created", "compute_instance_created", "grant_written", "annotated"]
DESTROY_STEPS = ["compute_instance_destroyed", "instance_destroyed"]


def run_child(target: Callable[..., None], *args: str) -> int | None:
    context = multiprocessing.get_context("spawn")
    process = context.Process(target=target, args=args)
    process.start()
    process.join(timeout=120)
    return process.exitcode


def converge_and_check(bw_node: simnode.SimNode, state: Path, victim_uid: str) -> Harness:
    restarted = Harness(bw_node, state)
    # The kubelet saw Allocate fail: the pod is rejected (Failed) and stays until deleted.
    restarted.kube.add_pod(
        "default", "victim", {"main": limits_for("2g.15gb")}, uid=victim_uid, phase="Failed"
    )
    restarted.reclaimer.run_pass()
    assert restarted.node.instances() == []
    assert restarted.runtime.store.load().grants == []
    assert restarted.runtime.store.load().unreadable == []
    return restarted


@pytest.mark.parametrize("step", CREATE_STEPS)
def test_killed_during_create(bw_node: simnode.SimNode, short_tmp: Path, step: str) -> None:
    uid = str(uuid.uuid4())
    code = run_child(allocate_and_die, str(bw_node.root), str(short_tmp), uid, step)
    assert code == -signal.SIGKILL
    assert bw_node.status().gpu_instances  # it died holding a created instance
    restarted = converge_and_check(bw_node, short_tmp, uid)
    # No double grant: the next pods get distinct partitions and the counts are exact.
    restarted.admit("next-a")
    restarted.admit("next-b")
    live = restarted.node.instances()
    assert len({(i.pci, i.placement.start) for i in live}) == 2
    assert restarted.counts()["hygon.com/dcu.partitioned"] == 32


@pytest.mark.parametrize("step", DESTROY_STEPS)
def test_killed_during_destroy(bw_node: simnode.SimNode, short_tmp: Path, step: str) -> None:
    first = Harness(bw_node, short_tmp)
    first.admit("victim")
    first.admit("bystander")
    victim = next(r for r in first.runtime.store.load() if r.pod_name == "victim")
    bystander = next(r for r in first.runtime.store.load() if r.pod_name == "bystander")
    code = run_child(reclaim_and_die, str(bw_node.root), str(short_tmp), bystander.pod_uid, step)
    assert code == -signal.SIGKILL
    restarted = Harness(bw_node, short_tmp)
    restarted.kube.add_pod(
        "default",
        "bystander",
        {"main": limits_for("2g.15gb")},
        uid=bystander.pod_uid,
        phase="Running",
    )
    restarted.reclaimer.run_pass()
    assert [i.uuid for i in restarted.node.instances()] == [bystander.uuid]
    assert [r.uuid for r in restarted.runtime.store.load()] == [bystander.uuid]
    assert victim.uuid not in {i.uuid for i in restarted.node.instances()}


SLICE_CREATE_STEPS = ["vdev_created", "slice_grant_written", "mark_written", "slice_annotated"]
SLICE_RECLAIM_STEPS = ["vdev_destroyed", "mark_removed"]


def slice_marks(node: simnode.SimNode) -> list[str]:
    directory = node.root / "etc/vdev/dynamic"
    return sorted(os.listdir(directory)) if directory.is_dir() else []


@pytest.mark.parametrize("step", SLICE_CREATE_STEPS)
def test_killed_during_a_slice_create(
    off_node: simnode.SimNode, short_tmp: Path, step: str
) -> None:
    uid = str(uuid.uuid4())
    code = run_child(allocate_slice_and_die, str(off_node.root), str(short_tmp), uid, step)
    assert code == -signal.SIGKILL
    assert off_node.status().vdevs  # it died holding a created vdev
    restarted = Harness(off_node, short_tmp)
    # The kubelet saw Allocate fail: the pod is rejected (Failed) and stays until deleted.
    restarted.kube.add_pod(
        "default", "victim", {"main": slice_limits(8192)}, uid=uid, phase="Failed"
    )
    restarted.runtime.reclaim_slices()
    assert off_node.status().vdevs == []
    loaded = restarted.runtime.store.load()
    assert loaded.slices == [] and loaded.unreadable == []
    assert slice_marks(off_node) == []
    # No double grant: the next pods get distinct slices and the counts are exact.
    restarted.admit_slice("next-a", 8192)
    restarted.admit_slice("next-b", 8192)
    assert len({v.id for v in off_node.status().vdevs}) == 2
    assert restarted.counts()["hygon.com/dcu.sliced"] == 32


@pytest.mark.parametrize("step", SLICE_RECLAIM_STEPS)
def test_killed_during_a_slice_reclaim(
    off_node: simnode.SimNode, short_tmp: Path, step: str
) -> None:
    first = Harness(off_node, short_tmp)
    first.admit_slice("victim", 8192)
    first.admit_slice("bystander", 8192)
    slices = {g.pod_name: g for g in first.runtime.store.load().slices}
    bystander = slices["bystander"]
    code = run_child(
        reclaim_slices_and_die, str(off_node.root), str(short_tmp), bystander.pod_uid, step
    )
    assert code == -signal.SIGKILL
    restarted = Harness(off_node, short_tmp)
    restarted.kube.add_pod(
        "default",
        "bystander",
        {"main": slice_limits(8192)},
        uid=bystander.pod_uid,
        phase="Running",
    )
    restarted.runtime.reclaim_slices()
    assert [v.id for v in off_node.status().vdevs] == [bystander.vdev_id]
    assert restarted.runtime.store.load().slices == [bystander]
    assert slice_marks(off_node) == [bystander.mark_name]
