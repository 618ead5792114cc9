"""A reservation outlives ``reservation_seconds`` while its pod is bound and not admitted yet
(docs/dev/extender.md "Release of a reservation").

The extender is deployed with a 10 s reservation time. The kubelet is frozen (SIGSTOP), so a pod
bound to the node is not admitted; the plugin keeps running and renewing its geometry Lease, so
the extender keeps the node schedulable. A first pod is bound and held back past the reservation
time, then a second one is bound: it must get other slices. Once the kubelet runs again (SIGCONT)
both are admitted and each runs on the partition carved exactly at its reservation. Before the
fix the first reservation lapsed, the second pod was given the same slice, and the one admitted
second failed at Allocate (``reservation_taken``).

Why SIGSTOP and not ``cluster.sh kill-kubelet`` / ``start-kubelet``: a new 1.20 kubelet restores
the plugin's resources from its checkpoint with no healthy device until the plugin registers
again (devicemanager ``readCheckpoint``), and admits pods bound meanwhile at once; a pod admitted
before that registration fails (``requested number of devices unavailable``), whatever the
extender did. A frozen kubelet keeps its registration. The freeze lasts about 25 s, under the
node controller's 40 s grace, so the node never turns NotReady (the pods tolerate it anyway).

The pods exist before the freeze (the admission webhook's endpoints are on this node) and wait
for a node label that this test sets, one pod at a time.

Starts from any earlier module's state; enables partitioning itself. Leaves: partition mode on,
the plugin Ready, the extender and the second scheduler deployed with the role's defaults, no
pod and no instance, the node without the gate labels.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e_support import (
    Kube,
    Playbooks,
    SimNode,
    delete_labelled_pods,
    deploy_extender,
    extender_ready,
    granted_uuid,
    partition_pod,
    phase,
    published,
    required_env,
    reserved,
    wait_for,
)
from hygon_dcu_plugin import reservation
from hygon_dcu_plugin.vocabulary import (
    FAMILY,
    PROFILE_PREFIX,
    SCHEDULER_NAME,
)

RESERVATION_SECONDS = 10
REFRESH_SECONDS = 2  # the extender's default, which the role keeps
LABEL = "e2e-reservation-held"  # on the pods; the Node's gate label of a pod is gate(name)
FIRST, SECOND = "held-first", "held-second"


@pytest.fixture(scope="module", autouse=True)
def short_reservations(
    kube: Kube, playbooks: Playbooks, cluster_sim: SimNode, workload_namespace: str
) -> Iterator[None]:
    playbooks.run("hygon.dcu.enable_mig", "-e", f"target={kube.node}")
    deploy_extender(
        playbooks, kube, hygon_dcu_device_plugin_extender_reservation_seconds=RESERVATION_SECONDS
    )
    wait_for("the extender and the second scheduler Ready", lambda: extender_ready(kube), 240)
    wait_for(
        "the node's geometry Lease with both cards",
        lambda: (g := published(kube, kube.node)) is not None and len(g.cards) == 2,
        120,
    )
    wait_for("no instance left from earlier modules", lambda: not cluster_sim.live_uuids(), 120)
    yield
    kube.run("label", "node", kube.node, *(f"{gate(n)}-" for n in (FIRST, SECOND)), check=False)
    delete_labelled_pods(kube, LABEL)
    deploy_extender(playbooks, kube)
    wait_for("the extender Ready with its defaults", lambda: extender_ready(kube), 240)
    wait_for("no instance left", lambda: not cluster_sim.live_uuids(), 120)


def kubelet_pid() -> int:
    """The tier's kubelet (cluster.sh keeps its pid under the work dir)."""
    pid_file = Path(required_env("HYGON_DCU_CLUSTER_WORK")) / "run" / "kubelet.pid"
    pid = int(pid_file.read_text().strip())
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    assert cmdline[0].endswith(b"kubelet"), f"pid {pid} from {pid_file} is {cmdline[:1]}"
    return pid


def gate(name: str) -> str:
    """The Node label a gated pod waits for. One label per pod, never taken away while the pod
    lives: the kubelet checks the nodeSelector again at admission (after Allocate), and a pod
    whose label is gone by then fails there (NodeAffinity)."""
    return f"{LABEL}-{name}"


def gated_pod(name: str) -> dict[str, Any]:
    """A pod of the second scheduler asking one 2g.15gb partition on the real node, waiting
    for the Node's label gate(name). Its probe checks the partition it got, then it sleeps."""
    pod: dict[str, Any] = partition_pod(
        name, command=["/bin/sh", "-c", "dcu-probe && exec sleep 600"]
    )
    spec = pod["spec"]
    spec["schedulerName"] = SCHEDULER_NAME
    spec["nodeSelector"] = {"hygon.com/dcu.present": "true", gate(name): "true"}
    # Tolerated should the frozen kubelet outlast the node controller's grace.
    spec["tolerations"] = [
        {"key": "node.kubernetes.io/unreachable", "operator": "Exists"},
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists"},
    ]
    spec["containers"][0]["resources"] = {"limits": {FAMILY: "1", PROFILE_PREFIX + "2g.15gb": "1"}}
    pod["metadata"]["labels"] = {LABEL: "true"}
    return pod


def open_gate(kube: Kube, name: str) -> tuple[str, reservation.Reservation]:
    """Label the node for the pod; the pod's node and reservation once it is bound."""
    kube.run("label", "node", kube.node, f"{gate(name)}=true", "--overwrite")

    def bound() -> tuple[str, reservation.Reservation] | None:
        pod = kube.pod(name)
        if pod is None or not pod["spec"].get("nodeName"):
            return None
        held = reserved(pod)
        assert held is not None, f"{name} bound without a reservation: {pod['metadata']}"
        return pod["spec"]["nodeName"], held

    found: tuple[str, reservation.Reservation] = wait_for(f"{name} bound", bound, 90)
    return found


def slices(held: reservation.Reservation) -> set[tuple[str, int]]:
    return {
        (entry.card, s)
        for entry in held.containers.values()
        for s in range(entry.start, entry.start + entry.size)
    }


def test_a_bound_pod_held_from_admission_keeps_its_slice_past_the_reservation_time(
    kube: Kube, cluster_sim: SimNode
) -> None:
    for name in (FIRST, SECOND):
        kube.apply(gated_pod(name))
    assert not (kube.pod(FIRST) or {}).get("spec", {}).get("nodeName")
    pid = kubelet_pid()
    os.kill(pid, signal.SIGSTOP)
    frozen = True
    try:
        node, first = open_gate(kube, FIRST)
        assert node == kube.node
        # Past the reservation time by three refreshes: the old extender had released it.
        time.sleep(
            max(0.0, first.made_at + RESERVATION_SECONDS + 3 * REFRESH_SECONDS - time.time())
        )
        assert phase(kube, FIRST) == "Pending"
        assert not cluster_sim.live_uuids(), "the frozen kubelet admitted a pod"
        node, second = open_gate(kube, SECOND)
        assert node == kube.node
        assert not slices(first) & slices(second), (first, second)
        os.kill(pid, signal.SIGCONT)
        frozen = False
    finally:
        if frozen:
            os.kill(pid, signal.SIGCONT)

    def both_running() -> bool:
        phases = {name: phase(kube, name) for name in (FIRST, SECOND)}
        assert "Failed" not in phases.values(), {n: kube.pod(n) for n in phases}
        return set(phases.values()) == {"Running"}

    wait_for("both pods Running once the kubelet runs again", both_running, 240)
    uuids = {
        name: wait_for(f"{name}'s grant", lambda n=name: granted_uuid(kube, n), 30)
        for name in (FIRST, SECOND)
    }
    assert len(set(uuids.values())) == 2, uuids
    assert set(uuids.values()) <= cluster_sim.live_uuids()
    # Each was carved exactly where the extender reserved it.
    uids = {name: (kube.pod(name) or {})["metadata"]["uid"] for name in (FIRST, SECOND)}

    def carved_as_reserved() -> bool:
        shape = published(kube, kube.node)
        owners = {
            (card.pci, o.start, o.size, o.pod_uid)
            for card in (shape.cards if shape else ())
            for o in card.owners
        }
        wanted = {
            (entry.card, entry.start, entry.size, uids[name])
            for name, held in ((FIRST, first), (SECOND, second))
            for entry in held.containers.values()
        }
        return wanted <= owners

    wait_for(
        "the geometry Lease showing each pod carved at its reservation", carved_as_reserved, 60
    )
    # The diagnostic for the reservation held past its time: one Warning Event.
    warnings = [e for e in kube.events_for(FIRST) if e.get("reason") == "ReservationNotCarved"]
    assert len(warnings) == 1, warnings
    assert warnings[0]["type"] == "Warning"
    assert kube.node in warnings[0]["message"]
