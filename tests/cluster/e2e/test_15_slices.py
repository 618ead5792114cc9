"""Logical slices on the real cluster, mode off (the state test_10 leaves): what the node
advertises, two pods sharing one card each seeing only its slice, the slices destroyed as the
pods complete, and a burst whose slice count fits but whose sizes do not. The pods are
scheduled by the extender's second scheduler: kube-scheduler counts the slice tokens, the
extender places each slice on a card with room (compute units, memory, slice count) and
reserves it, and the plugin creates exactly the reserved slice.

Leaves: the mode off, no slice pod, no vdev.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from e2e_support import (
    WORKLOAD_NAMESPACE,
    Kube,
    Playbooks,
    SimNode,
    deploy_extender,
    extender_ready,
    phase,
    reserved,
    slice_pod,
    wait_for,
)
from hygon_dcu_plugin.vocabulary import FAMILY, SLICED, WHOLE_CARD

CARDS = 2  # the cluster's simulated node (conftest.cluster_sim)
GIB = 1024


def probe_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("device ")]


@pytest.fixture(scope="module", autouse=True)
def mode_off(
    kube: Kube, cluster_sim: SimNode, playbooks: Playbooks, workload_namespace: str
) -> None:
    assert not cluster_sim.mode_on(), "test_10 leaves the node with the mode off"
    # Slice pods go through the extender's scheduler (see e2e_support.slice_pod); test_20's
    # deploy removes it again.
    deploy_extender(playbooks, kube)
    wait_for("the extender and the second scheduler Ready", lambda: extender_ready(kube), 240)
    wait_for(
        "whole cards and slices advertised",
        lambda: kube.allocatable().get(SLICED) == str(4 * CARDS),
        180,
    )


def test_the_node_advertises_whole_cards_and_four_slices_per_card(kube: Kube) -> None:
    allocatable = kube.allocatable()
    assert allocatable.get(WHOLE_CARD) == str(CARDS)
    assert allocatable.get(SLICED) == str(4 * CARDS)
    assert allocatable.get(FAMILY) == "0"


class VdevWatch:
    """When each vdev id was last seen live, polled from the simulated driver at 20 Hz."""

    def __init__(self, sim: SimNode) -> None:
        self.sim = sim
        self.last_seen: dict[int, float] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            now = time.monotonic()
            for vdev in self.sim.status().vdevs:
                self.last_seen[vdev.id] = now
            self.stop.wait(0.05)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)


def test_two_slices_share_one_card_and_go_with_their_pods(kube: Kube, cluster_sim: SimNode) -> None:
    watch = VdevWatch(cluster_sim)
    try:
        # Both run at once (the sleep), so both slices live together on one card.
        for name, mib in (("slice-16g", 16 * GIB), ("slice-24g", 24 * GIB)):
            kube.apply(slice_pod(name, mib, command=["sh", "-c", "dcu-probe && sleep 8"]))
        wait_for(
            "both slices live",
            lambda: len(cluster_sim.status().vdevs) == 2,
            180,
            interval=0.2,
        )
        live = cluster_sim.status().vdevs
        assert {v.card for v in live} == {0}, live  # binpack: one card
        assert sorted(v.mem_mib for v in live) == [16 * GIB, 24 * GIB]
        assert kube.allocatable().get(SLICED) == str(4 * CARDS)  # held + free
        seen_done: dict[str, float] = {}
        for name in ("slice-16g", "slice-24g"):
            wait_for(f"{name} Succeeded", lambda n=name: phase(kube, n) == "Succeeded", 120, 0.1)
            seen_done[name] = time.monotonic()
        wait_for("both vdevs destroyed", lambda: not cluster_sim.status().vdevs, 30, 0.1)
    finally:
        watch.close()
    by_memory = {v.mem_mib: v for v in live}
    for name, mib in (("slice-16g", 16 * GIB), ("slice-24g", 24 * GIB)):
        vdev = by_memory[mib]
        lines = probe_lines(kube.logs(name))
        assert len(lines) == 1, lines
        assert "kind=vdev" in lines[0], lines[0]
        assert f"cu_count={vdev.cu_count} memory_mib={mib} vdev_id={vdev.id} card=0" in lines[0]
        # Gone within a second of the pod being seen Succeeded through the API.
        lag = watch.last_seen[vdev.id] - seen_done[name]
        print(f"{name}: vdev {vdev.id} last seen {lag:+.2f}s after Succeeded was seen")
        assert lag < 1.0, lag
    for name in ("slice-16g", "slice-24g"):
        kube.delete_pod(name)
    # Card 0 is offered whole again once its slices are gone (the node status follows).
    wait_for(
        "both cards whole again",
        lambda: kube.allocatable().get(WHOLE_CARD) == str(CARDS),
        60,
    )


def test_a_burst_that_fits_by_count_but_not_by_size_leaves_no_pod_failed(
    kube: Kube, cluster_sim: SimNode
) -> None:
    """Four pods of 40 GiB: eight slice tokens, but each 65520 MiB card holds one. Without the
    extender's placement the kubelet would admit all four and the plugin refuse two at
    Allocate (pods Failed with UnexpectedAdmissionError); with it two run, one per card, and
    two stay Pending, saying why, until the first two are freed."""
    names = [f"burst-{i}" for i in range(4)]
    for name in names:
        kube.apply(slice_pod(name, 40 * GIB, command=["sh", "-c", "dcu-probe && sleep 5"]))
    seen: dict[str, set[str]] = {name: set() for name in names}

    def look() -> dict[str, dict[str, Any]]:
        items = kube.json("get", "pods", "-n", WORKLOAD_NAMESPACE)["items"]
        pods = {p["metadata"]["name"]: p for p in items if p["metadata"]["name"] in seen}
        for name, pod in pods.items():
            seen[name].add(pod.get("status", {}).get("phase", ""))
        return pods

    def succeeded(name: str) -> bool:
        status = look()[name].get("status", {})
        failed = f"{name} Failed: {status.get('reason')}: {status.get('message')}"
        assert status.get("phase") != "Failed", failed
        return bool(status.get("phase") == "Succeeded")

    def placed() -> list[str]:
        return sorted(n for n, p in look().items() if p["spec"].get("nodeName"))

    wait_for("two burst pods bound", lambda: len(placed()) == 2, 120, 0.2)
    first = placed()
    wait_for("two slices live", lambda: len(cluster_sim.status().vdevs) == 2, 60, 0.2)
    live = cluster_sim.status().vdevs
    assert sorted(v.card for v in live) == [0, 1], live  # one 40 GiB slice per card
    for name in first:
        entry = reserved(look()[name])
        assert entry is not None and entry.slices["work"].memory_mib == 40 * GIB, name
    waiting = [n for n in names if n not in first]
    for name in waiting:
        wait_for(
            f"{name} told why it waits",
            lambda n=name: "no card has room" in str(look()[n].get("status", {})),
            60,
            0.5,
        )
        assert not look()[name]["spec"].get("nodeName")
    for name in first:
        wait_for(f"{name} Succeeded", lambda n=name: succeeded(n), 120, 0.2)
    for name in first:
        kube.delete_pod(name)  # freed: the two waiting pods are scheduled now
    for name in waiting:
        wait_for(f"{name} Succeeded", lambda n=name: succeeded(n), 180, 0.5)
    look()
    failed = {name: phases for name, phases in seen.items() if "Failed" in phases}
    assert failed == {}, failed
    for name in waiting:
        kube.delete_pod(name)
    wait_for("no vdev left", lambda: not cluster_sim.status().vdevs, 30, 0.2)
    wait_for(
        "both cards whole again",
        lambda: kube.allocatable().get(WHOLE_CARD) == str(CARDS),
        60,
    )
