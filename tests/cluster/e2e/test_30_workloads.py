"""Real pods on a partition node: what the container sees, reclaim, refusals.

Starts from whatever the molecule scenario left and enables partitioning itself (idempotent).
Leaves: partition mode on, no workload pod, no instance.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from e2e_support import (
    WORKLOAD_NAMESPACE,
    Kube,
    Playbooks,
    SimNode,
    granted_uuid,
    partition_pod,
    phase,
    refusal_without_profile,
    wait_for,
)
from hygon_dcu_plugin.vocabulary import FAMILY, WHOLE_CARD, annotation_key


@pytest.fixture(scope="module", autouse=True)
def partition_mode(kube: Kube, playbooks: Playbooks, workload_namespace: str) -> None:
    playbooks.run("hygon.dcu.enable_mig", "-e", f"target={kube.node}")
    wait_for(
        "the partition resources on the node",
        lambda: (
            int(kube.allocatable().get(FAMILY, "0")) > 0
            and kube.allocatable().get(WHOLE_CARD, "0") == "0"
        ),
        180,
    )


def probe_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("device ")]


def test_container_sees_exactly_its_partition(kube: Kube, cluster_sim: SimNode) -> None:
    kube.apply(partition_pod("probe-2g", profile="2g.15gb"))
    wait_for("probe-2g Succeeded", lambda: phase(kube, "probe-2g") == "Succeeded", 180)
    lines = probe_lines(kube.logs("probe-2g"))
    assert len(lines) == 1, lines
    assert "kind=partition" in lines[0]
    assert "cu_count=20 memory_mib=16380" in lines[0], lines[0]
    uuid = granted_uuid(kube, "probe-2g")
    assert uuid and f"mig_uuid={uuid}" in lines[0], (uuid, lines[0])


def test_completed_pod_instance_destroyed(kube: Kube, cluster_sim: SimNode) -> None:
    uuid = granted_uuid(kube, "probe-2g")
    assert uuid
    wait_for(
        "the completed pod's instance destroyed", lambda: uuid not in cluster_sim.live_uuids(), 60
    )
    kube.delete_pod("probe-2g")


def test_two_containers_get_two_partitions(kube: Kube, cluster_sim: SimNode) -> None:
    pod = partition_pod("probe-pair", profile="4g.31gb")
    second = dict(pod["spec"]["containers"][0])
    second["name"] = "second"
    second["resources"] = {"limits": {FAMILY: "1", f"{FAMILY}.mig-2g.15gb": "1"}}
    pod["spec"]["containers"].append(second)
    kube.apply(pod)
    wait_for("probe-pair Succeeded", lambda: phase(kube, "probe-pair") == "Succeeded", 180)
    first_lines = probe_lines(
        kube.run("logs", "-n", WORKLOAD_NAMESPACE, "probe-pair", "-c", "work").stdout
    )
    second_lines = probe_lines(
        kube.run("logs", "-n", WORKLOAD_NAMESPACE, "probe-pair", "-c", "second").stdout
    )
    assert len(first_lines) == 1 and "cu_count=40 memory_mib=32760" in first_lines[0], first_lines
    assert len(second_lines) == 1 and "cu_count=20 memory_mib=16380" in second_lines[0], (
        second_lines
    )
    kube.delete_pod("probe-pair")
    wait_for("no instance left", lambda: not cluster_sim.live_uuids(), 60)


def test_a_63_character_container_name_gets_its_partition(kube: Kube) -> None:
    container = "c" * 63  # the longest legal container name
    kube.apply(partition_pod("long-name", container=container))
    wait_for("long-name Succeeded", lambda: phase(kube, "long-name") == "Succeeded", 180)
    lines = probe_lines(kube.logs("long-name"))
    assert len(lines) == 1 and "kind=partition" in lines[0], lines
    uuid = granted_uuid(kube, "long-name")
    assert uuid and f"mig_uuid={uuid}" in lines[0], (uuid, lines[0])
    pod = kube.pod("long-name")
    assert pod is not None
    # The grant's annotation key stays within Kubernetes' limits for this container's name.
    assert uuid in pod["metadata"]["annotations"][annotation_key(container)]
    kube.delete_pod("long-name")


def test_deleted_pod_instance_destroyed(kube: Kube, cluster_sim: SimNode) -> None:
    kube.apply(partition_pod("sleeper", command=["sh", "-c", "dcu-probe && sleep 3600"]))
    wait_for("sleeper Running", lambda: phase(kube, "sleeper") == "Running", 180)
    uuid = wait_for("sleeper's grant annotation", lambda: granted_uuid(kube, "sleeper"), 30)
    assert uuid in cluster_sim.live_uuids()
    kube.delete_pod("sleeper", wait=False)
    wait_for(
        "the deleted pod's instance destroyed", lambda: uuid not in cluster_sim.live_uuids(), 90
    )


def test_request_without_profile_refused_at_creation_with_the_fix(kube: Kube) -> None:
    refusal = refusal_without_profile(kube, "no-profile")
    assert f"{FAMILY}.mig-" in refusal, refusal


def reclaim_delay(kube: Kube, cluster_sim: SimNode, name: str, uuid: str, event: str) -> float:
    """Seconds between the event seen through the API and the instance gone from the driver
    (0 when it was already gone at the first poll that saw the event). An instance gone
    before the event happened fails: that would be a reclaim for the wrong reason."""

    def happened(pod: dict[str, Any] | None) -> bool:
        if event == "phase":
            return pod is not None and pod["status"].get("phase") in ("Succeeded", "Failed")
        return pod is None or bool(pod["metadata"].get("deletionTimestamp"))

    seen_at = None
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if seen_at is None and happened(kube.pod(name)):
            seen_at = time.monotonic()
        if uuid not in cluster_sim.live_uuids():
            if seen_at is None and not happened(kube.pod(name)):
                pytest.fail(f"{name}'s instance {uuid} was destroyed before its {event}")
            return 0.0 if seen_at is None else time.monotonic() - seen_at
        time.sleep(0.05)
    pytest.fail(f"{name}'s instance {uuid} still exists 120 s later")


def test_pod_completing_a_second_after_its_grant_reclaimed_within_a_second(
    kube: Kube, cluster_sim: SimNode, capsys: pytest.CaptureFixture[str]
) -> None:
    kube.apply(partition_pod("short-complete", command=["sh", "-c", "dcu-probe && sleep 1"]))
    uuid = wait_for("short-complete's grant", lambda: granted_uuid(kube, "short-complete"), 120)
    completed = reclaim_delay(kube, cluster_sim, "short-complete", uuid, "phase")
    kube.delete_pod("short-complete")
    with capsys.disabled():
        print(f"\nreclaim after completion: {completed:.2f} s after the phase change was seen")
    assert completed <= 1.0, f"completed pod reclaimed {completed:.2f} s after its phase change"


def test_pod_deleted_a_second_after_its_grant_reclaimed_within_a_second(
    kube: Kube, cluster_sim: SimNode, capsys: pytest.CaptureFixture[str]
) -> None:
    kube.apply(partition_pod("short-delete", command=["sh", "-c", "dcu-probe && sleep 3600"]))
    uuid = wait_for("short-delete's grant", lambda: granted_uuid(kube, "short-delete"), 120)
    time.sleep(1)
    assert uuid in cluster_sim.live_uuids(), "the partition went before the pod was deleted"
    kube.delete_pod("short-delete", wait=False)
    deleted = reclaim_delay(kube, cluster_sim, "short-delete", uuid, "deletion")
    with capsys.disabled():
        print(f"\nreclaim after deletion: {deleted:.2f} s after the deletion was seen")
    assert deleted <= 1.0, f"deleted pod reclaimed {deleted:.2f} s after its deletion"
