"""Restarts around a running plugin: the kubelet's, and the plugin's own (SIGKILL, pod gone).

Leaves: partition mode on, no workload pod, no instance, the plugin Ready.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

from e2e_support import (
    CLUSTER_SH,
    Kube,
    SimNode,
    granted_uuid,
    partition_pod,
    phase,
    wait_for,
)
from hygon_dcu_plugin.vocabulary import FAMILY


def cluster(*args: str) -> None:
    subprocess.run([str(CLUSTER_SH), *args], check=True, timeout=300)


def plugin_pids() -> list[int]:
    """Host pids of the device plugin's `serve` process (it runs in the DaemonSet's pod)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(a.endswith(b"hygon-dcu-plugin") for a in argv) and b"serve" in argv:
            pids.append(int(entry.name))
    return pids


def run_probe_pod(kube: Kube, name: str) -> str:
    kube.apply(partition_pod(name))
    wait_for(f"{name} Succeeded", lambda: phase(kube, name) == "Succeeded", 240)
    uuid = granted_uuid(kube, name)
    assert uuid, f"{name} has no grant annotation"
    assert f"mig_uuid={uuid}" in kube.logs(name), kube.logs(name)
    return str(uuid)


def test_kubelet_restart_plugin_registers_again(kube: Kube, cluster_sim: SimNode) -> None:
    before = kube.ready_plugin_pod()
    assert before is not None
    cluster("restart-kubelet")
    wait_for(
        "the partition family advertised again",
        lambda: int(kube.allocatable().get(FAMILY, "0")) > 0,
        180,
    )
    run_probe_pod(kube, "after-kubelet-restart")
    kube.delete_pod("after-kubelet-restart")
    wait_for("no instance left", lambda: not cluster_sim.live_uuids(), 90)


def test_plugin_killed_and_its_pod_deleted_no_leak_no_double_grant(
    kube: Kube, cluster_sim: SimNode
) -> None:
    # A pod bound before the kubelet has the plugin registered again can be refused at admission
    # (UnexpectedAdmissionError, phase Failed), which is Kubernetes' behaviour, not the plugin's.
    wait_for(
        "the partition family advertised",
        lambda: int(kube.allocatable().get(FAMILY, "0")) > 0,
        180,
    )
    kube.apply(partition_pod("held", command=["sh", "-c", "dcu-probe && sleep 3600"]))
    wait_for("held Running", lambda: phase(kube, "held") == "Running", 180)
    held_uuid = wait_for("held's grant", lambda: granted_uuid(kube, "held"), 30)
    kube.apply(partition_pod("gone-meanwhile", command=["sh", "-c", "sleep 3600"]))
    wait_for("gone-meanwhile Running", lambda: phase(kube, "gone-meanwhile") == "Running", 180)
    gone_uuid = wait_for("gone-meanwhile's grant", lambda: granted_uuid(kube, "gone-meanwhile"), 30)

    pids = plugin_pids()
    assert pids, "no device-plugin process found on the host"
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    old = kube.ready_plugin_pod() or {"metadata": {"name": ""}}
    kube.delete_pod("gone-meanwhile", wait=False)
    kube.run(
        "delete",
        "pods",
        "-n",
        "hygon-dcu-system",
        "-l",
        "app.kubernetes.io/name=hygon-dcu-device-plugin",
        "--wait=false",
    )
    wait_for(
        "a new Ready plugin pod",
        lambda: (
            (pod := kube.ready_plugin_pod()) is not None
            and pod["metadata"]["name"] != old["metadata"]["name"]
        ),
        240,
    )
    wait_for(
        "the deleted pod's instance reclaimed",
        lambda: gone_uuid not in cluster_sim.live_uuids(),
        120,
    )
    assert held_uuid in cluster_sim.live_uuids(), "a running pod's partition was lost"

    served = [run_probe_pod(kube, f"after-plugin-kill-{i}") for i in range(2)]
    assert len({held_uuid, *served}) == 3, "a partition was granted twice"
    for i in range(2):
        kube.delete_pod(f"after-plugin-kill-{i}")
    kube.delete_pod("held")
    wait_for("no instance left", lambda: not cluster_sim.live_uuids(), 120)
