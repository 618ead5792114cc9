"""Which container an Allocate serves (pure)."""

from __future__ import annotations

import pytest
from hygon_dcu_plugin.deviceplugin.grants import Grant
from hygon_dcu_plugin.deviceplugin.identify import Target, identify
from hygon_dcu_plugin.deviceplugin.podresources import ListedContainer, ListedPod
from hygon_dcu_plugin.deviceplugin.refused import RequestRefused
from hygon_dcu_plugin.kube import ContainerSpec, Pod
from hygon_dcu_plugin.vocabulary import FAMILY

LIMITS = {FAMILY: "1", FAMILY + ".mig-2g.15gb": "1"}


def pod(
    name: str,
    created: float,
    phase: str = "Pending",
    deleting: bool = False,
    containers: tuple[str, ...] = ("main",),
    init: tuple[str, ...] = (),
    limits: dict[str, str] | None = None,
) -> Pod:
    limits = LIMITS if limits is None else limits
    return Pod(
        "ns",
        name,
        f"uid-{name}",
        phase,
        created,
        deleting,
        tuple(ContainerSpec(c, limits) for c in containers),
        tuple(ContainerSpec(c, limits) for c in init),
    )


def listed(name: str, devices: dict[str, list[str]] | None = None) -> ListedPod:
    devices = devices or {}
    return ListedPod(
        "ns",
        name,
        tuple(
            ListedContainer(c, {FAMILY: tuple(ids)} if ids else {})
            for c, ids in (devices.items() if devices else [("main", [])])
        ),
    )


def rec(p: Pod, container: str, token: str) -> Grant:
    return Grant(
        "u" + token,
        "pci",
        0,
        3,
        0,
        "2g.15gb",
        0,
        1,
        "/c",
        p.namespace,
        p.name,
        p.uid,
        (container,),
        (token,),
        0.0,
    )


def run(
    pods: list[Pod],
    entries: list[ListedPod],
    grants: tuple[Grant, ...] | list[Grant] = (),
    device: str = "partition-000",
) -> Target[Grant]:
    table = {p.name: p for p in pods}
    return identify(FAMILY, [device], entries, lambda ns, n: table.get(n), list(grants))


def test_a_rejected_pod_still_listed_and_reading_pending_loses_to_the_newer_pod() -> None:
    stale, fresh = pod("stale", 100.0), pod("fresh", 200.0)
    for order in ([listed("stale"), listed("fresh")], [listed("fresh"), listed("stale")]):
        target = run([stale, fresh], order)
        assert target.pod.name == "fresh"


def test_terminal_terminating_and_unrelated_pods_are_skipped() -> None:
    pods = [
        pod("done", 300.0, phase="Failed"),
        pod("going", 301.0, deleting=True),
        pod("other", 302.0, limits={"cpu": "1"}),
        pod("real", 10.0),
    ]
    target = run(pods, [listed(p.name) for p in pods])
    assert target.pod.name == "real"


def test_a_pod_deleted_from_the_api_is_skipped() -> None:
    target = run([pod("real", 1.0)], [listed("ghost"), listed("real")])
    assert target.pod.name == "real"


def test_multi_container_pods_go_in_spec_order() -> None:
    duo = pod("duo", 1.0, containers=("a", "b"))
    first = run([duo], [listed("duo", {"a": [], "b": []})])
    assert first.container.name == "a"
    second = run(
        [duo],
        [listed("duo", {"a": ["partition-000"], "b": []})],
        [rec(duo, "a", "partition-000")],
        device="partition-001",
    )
    assert second.container.name == "b" and second.reuse is None


def test_init_container_first_then_the_app_container_reuses_its_partition() -> None:
    p = pod("prep", 1.0, init=("setup",))
    first = run([p], [listed("prep")])
    assert first.container.name == "setup" and first.reuse is None
    r = rec(p, "setup", "partition-000")
    second = run([p], [listed("prep")], [r])
    assert second.container.name == "main" and second.reuse == r


def test_a_retry_for_the_same_container_reuses_its_grant() -> None:
    p = pod("solo", 1.0)
    r = rec(p, "main", "partition-004")
    target = run([p], [listed("solo")], [r], device="partition-004")
    assert target.reuse == r and target.container.name == "main"


def test_a_token_reused_from_a_finished_pod_is_not_its_partition() -> None:
    old, new = pod("old", 1.0, phase="Succeeded"), pod("new", 2.0)
    target = run([old, new], [listed("old"), listed("new")], [rec(old, "main", "partition-000")])
    assert target.pod.name == "new" and target.reuse is None


def test_nobody_waiting_is_refused() -> None:
    with pytest.raises(RequestRefused, match="no container waiting"):
        run([pod("a", 1.0)], [listed("a", {"main": ["partition-009"]})])
