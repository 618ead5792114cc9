"""The extender's long-lived state kept out of the cyclic collector's full pauses
(serving/gc_pauses.py): frozen after each refresh, which is safe only because the extender
makes no garbage cycles (counted here over real verbs, refreshes and the Kubernetes client
against the fake API server), and bounded even if it did (the periodic sweep)."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest
from hygon_dcu_plugin.serving.gc_pauses import FullPauses
from webhook_support import Authority

from .fake_cluster import FakeCluster
from .support import Geometries, occupy, profile_limits, serving, size_limits, text

T0 = 1_800_000_000.0


@pytest.fixture
def collector() -> Iterator[None]:
    """The collector as the test found it afterwards: enabled, nothing frozen."""
    yield
    gc.unfreeze()
    gc.enable()


class _Cycle:
    def __init__(self) -> None:
        self.me = self


def test_a_frozen_cycle_is_kept_until_the_sweep_collects_it(collector: None) -> None:
    now = [0.0]
    pauses = FullPauses(sweep_seconds=3600, monotonic=lambda: now[0])
    cycle = _Cycle()
    gone = weakref.ref(cycle)
    del cycle
    pauses.after_refresh()  # frozen: a full collection no longer sees it
    assert gc.get_freeze_count() > 0
    gc.collect()
    assert gone() is not None
    now[0] = 3599.0
    pauses.after_refresh()
    gc.collect()
    assert gone() is not None
    now[0] = 3600.0
    pauses.after_refresh()  # the sweep: handed back, collected, the rest frozen again
    assert gone() is None
    assert gc.get_freeze_count() > 0


def test_frozen_objects_are_still_freed_when_dropped(collector: None) -> None:
    pauses = FullPauses()
    held = [{"node": n} for n in range(1000)]
    gone = weakref.ref(_Holder(held))  # an object with no cycle: reference counting frees it
    pauses.after_refresh()
    assert gone() is None


class _Holder:
    def __init__(self, items: list[dict[str, int]]) -> None:
        self.items = items


def test_the_extender_makes_no_garbage_cycles(
    tmp_path: Path,
    authority: Authority,
    cluster: FakeCluster,
    geometries: Geometries,
    collector: None,
) -> None:
    card = geometries.empty("c3000-bw", cards=2)
    for n in range(6):
        cluster.put_lease(f"node-{n}", text(occupy(card, n % 2, 0, 2 * (n % 3))), renewed=T0)
    with serving(tmp_path, authority, cluster) as running:
        pods = [
            cluster.add_pod(
                f"p{n}", {"main": profile_limits("2g.15gb") if n % 2 else size_limits(15000)}
            )
            for n in range(8)
        ]
        nodes = [f"node-{n}" for n in range(6)]
        gc.collect()
        gc.disable()
        for pod in pods:
            running.state.refresh()
            passed = running.filter(pod, nodes)["nodenames"]
            scores = running.prioritize(pod, passed)
            running.bind(pod, max(scores, key=lambda node: scores[node]))
        running.state.refresh()
        found = gc.collect()
    assert found == 0, f"{found} objects in garbage cycles"
