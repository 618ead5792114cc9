"""Lost grants (a live pod whose partition is gone) and the Kubernetes Events an operator sees."""

from __future__ import annotations

from pathlib import Path

import pytest
import simnode
from fake_kube import FakeKube, limits_for
from hygon_dcu_plugin.deviceplugin.events import NORMAL, WARNING, PodEvents
from hygon_dcu_plugin.deviceplugin.refused import RequestRefused
from hygon_dcu_plugin.kube import PodEvent, PodRef
from hygon_dcu_plugin.vocabulary import FAMILY
from plugin_harness import Harness


def power_loss(harness: Harness) -> Path:
    """Instances gone; the kubelet restarts the container from its checkpoint and the runtime
    creates the missing conf file as a directory. Returns that directory."""
    (grant,) = harness.runtime.store.load()
    harness.sim.reboot()
    conf = Path(harness.node.host_path(grant.conf_path))
    conf.mkdir()
    return conf


def lost_events(harness: Harness, pod: str) -> list[tuple[str, str]]:
    assert harness.runtime.events.drain()
    return [
        (kind, text)
        for ref, kind, reason, text in harness.kube.kube_events
        if ref.name == pod and reason == "PartitionLost"
    ]


def test_a_running_pod_whose_partition_is_gone_gets_a_warning_and_a_metric(
    harness: Harness,
) -> None:
    harness.admit("a")
    harness.kube.set_phase("default", "a", "Running")
    (grant,) = harness.runtime.store.load()
    conf = power_loss(harness)
    report = harness.reclaimer.run_pass()
    assert report.lost == [grant.uuid]
    assert report.swept == [grant.conf_path] and not conf.exists()
    ((kind, text),) = lost_events(harness, "a")
    assert kind == WARNING
    assert grant.uuid in text and "delete the pod" in text.lower()
    metrics = harness.runtime.metrics
    assert metrics.sample("hygon_dcu_lost_partitions", namespace="default", pod="a") == 1
    # Default: nobody deletes the pod; the next passes do not repeat the event.
    for _pass in range(2):
        assert harness.reclaimer.run_pass().lost == [grant.uuid]
    assert harness.kube.deleted_by_plugin == []
    assert len(lost_events(harness, "a")) == 1
    assert "default/a" in harness.kube.pods


def test_opt_in_deletes_the_pod_and_the_stale_grant_is_then_dropped(
    bw_node: simnode.SimNode, short_tmp: Path
) -> None:
    harness = Harness(bw_node, short_tmp, delete_pods_with_lost_partitions=True)
    harness.admit("a")
    harness.admit("b")
    harness.kube.set_phase("default", "a", "Running")
    grants = {r.pod_name: r for r in harness.runtime.store.load()}
    harness.sim.reboot()
    # Both partitions went with the power; a pod admitted after the reboot (c) gets a fresh
    # partition at the same ids, and neither it nor its instance is touched.
    report = harness.reclaimer.run_pass()
    assert sorted(report.lost) == sorted(r.uuid for r in grants.values())
    assert sorted(p.name for p in harness.kube.deleted_by_plugin) == ["a", "b"]
    assert (
        harness.runtime.metrics.sample("hygon_dcu_reclaim_actions_total", action="lost_pod_deleted")
        == 2
    )
    for ref in harness.kube.deleted_by_plugin:
        harness.reclaimer.pod_event(PodEvent("DELETED", ref.namespace, ref.name, ref.uid))
    harness.admit("c")
    report = harness.reclaimer.run_pass()
    assert sorted(report.stale) == sorted(r.uuid for r in grants.values())
    assert [r.pod_name for r in harness.runtime.store.load()] == ["c"]
    assert len(harness.node.instances()) == 1


def test_an_unreadable_conf_is_not_a_lost_grant(bw_node: simnode.SimNode, short_tmp: Path) -> None:
    # Unsure is not lost: nothing is deleted while the instance may still be there.
    harness = Harness(bw_node, short_tmp, delete_pods_with_lost_partitions=True)
    harness.admit("a")
    (grant,) = harness.runtime.store.load()
    Path(harness.node.host_path(grant.conf_path)).write_text("garbage\n")
    for _pass in range(2):
        assert harness.reclaimer.run_pass().lost == []
    assert harness.kube.deleted_by_plugin == []
    assert len(harness.node.instances()) == 1


def test_granted_and_refused_allocations_are_events_with_the_fix(harness: Harness) -> None:
    harness.admit("ok")
    harness.kube.add_pod("default", "bad", {"main": limits_for("3g.23gb")})
    harness.kubelet.pods["default/bad"] = {"main": {}}
    with pytest.raises(RequestRefused):
        harness.allocator.allocate(FAMILY, [harness.free_token()])
    assert harness.runtime.events.drain()
    by_pod = {
        ref.name: (kind, reason, text) for ref, kind, reason, text in harness.kube.kube_events
    }
    assert by_pod["ok"][:2] == (NORMAL, "PartitionGranted") and "2g.15gb" in by_pod["ok"][2]
    assert by_pod["bad"][:2] == (WARNING, "PartitionRefused")
    assert "offered: 2g.15gb, 4g.31gb, 8g.63gb" in by_pod["bad"][2]


def test_an_api_server_refusing_events_breaks_neither_allocate_nor_reclaim(
    harness: Harness,
) -> None:
    harness.kube.fail_events = "HTTP 403 Forbidden"
    response = harness.admit("a")
    assert response.envs["DMI_MIG_VISIBLE_DEVICE"].startswith("MIG-")
    harness.finish("a")
    assert len(harness.reclaimer.run_pass().destroyed) == 1
    assert harness.runtime.events.drain()
    assert harness.kube.kube_events == []


def test_events_are_deduplicated_and_rate_limited() -> None:
    now = [0.0]
    kube = FakeKube()
    events = PodEvents(kube, repeat_seconds=600.0, per_minute=3, clock=lambda: now[0])
    pod = PodRef("ns", "p", "uid-1")
    for _pass in range(5):
        events.emit(pod, WARNING, "PartitionLost", "x")
    now[0] = 601.0
    events.emit(pod, WARNING, "PartitionLost", "x")  # the repeat window passed
    for i in range(5):
        events.emit(PodRef("ns", f"q{i}", f"uid-q{i}"), NORMAL, "PartitionGranted", "y" * 5000)
    assert events.drain()
    assert [reason for _pod, _kind, reason, _text in kube.kube_events] == [
        "PartitionLost",
        "PartitionLost",
        "PartitionGranted",
        "PartitionGranted",
    ]
    assert all(len(text) <= 1024 for *_rest, text in kube.kube_events)
    assert events.dropped == 3
