"""Child processes for the crash-safety tests: run one Allocate or one reclaim pass with the
plugin's kill hook armed, so the process dies by SIGKILL at the named step."""

from __future__ import annotations

import os
from pathlib import Path

import simnode
from fake_kube import limits_for, slice_limits
from hygon_dcu_plugin.cli import kill_at
from plugin_harness import Harness


def allocate_and_die(root: str, state: str, uid: str, step: str) -> None:
    os.environ[simnode.ROOT_ENV] = root
    harness = Harness(simnode.open_node(root), Path(state), checkpoint=kill_at(step))
    harness.kube.add_pod("default", "victim", {"main": limits_for("2g.15gb")}, uid=uid)
    harness.kubelet.pods["default/victim"] = {"main": {}}
    harness.allocator.allocate("hygon.com/dcu.partitioned", ["partition-000"])


def reclaim_and_die(root: str, state: str, bystander_uid: str, step: str) -> None:
    """A reclaim pass whose API server knows only the bystander: the victim's pod is gone."""
    os.environ[simnode.ROOT_ENV] = root
    harness = Harness(simnode.open_node(root), Path(state), checkpoint=kill_at(step))
    harness.kube.add_pod(
        "default", "bystander", {"main": limits_for("2g.15gb")}, uid=bystander_uid, phase="Running"
    )
    harness.reclaimer.run_pass()


def allocate_slice_and_die(root: str, state: str, uid: str, step: str) -> None:
    os.environ[simnode.ROOT_ENV] = root
    harness = Harness(simnode.open_node(root), Path(state), checkpoint=kill_at(step))
    harness.admit_slice("victim", 8192, uid=uid)


def reclaim_slices_and_die(root: str, state: str, bystander_uid: str, step: str) -> None:
    """A slice reclaim pass whose API server knows only the bystander: the victim is gone."""
    os.environ[simnode.ROOT_ENV] = root
    harness = Harness(simnode.open_node(root), Path(state), checkpoint=kill_at(step))
    harness.kube.add_pod(
        "default", "bystander", {"main": slice_limits(8192)}, uid=bystander_uid, phase="Running"
    )
    harness.runtime.reclaim_slices()
