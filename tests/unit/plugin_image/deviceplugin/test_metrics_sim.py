"""Metrics an operator reads on a simulated node: attribution, capacity, counters from start."""

from __future__ import annotations

from plugin_harness import Harness


def test_partition_attribution_and_capacity_follow_a_grant(harness: Harness) -> None:
    text = harness.runtime.metrics.render()
    # Present from the start, before anything happened.
    assert 'hygon_dcu_allocations_total{profile="2g.15gb"} 0.0' in text
    assert 'hygon_dcu_allocation_failures_total{reason="no_capacity"} 0.0' in text
    assert 'hygon_dcu_reclaim_actions_total{action="orphan_destroyed"} 0.0' in text
    assert 'hygon_dcu_free_partitions{resource="hygon.com/dcu.partitioned.mig-8g.63gb"} 8.0' in text
    assert 'hygon_dcu_advertised_devices{resource="hygon.com/dcu.partitioned"} 32.0' in text
    harness.admit("train")
    (grant,) = harness.runtime.store.load()
    metrics = harness.runtime.metrics
    holder = {"namespace": "default", "pod": "train", "container": "main", "profile": "2g.15gb"}
    labels = {"uuid": grant.uuid, **holder, "card": grant.card_pci}
    assert metrics.sample("hygon_dcu_partition_info", **labels) == 1
    # One 2-slice partition on a 4-slice card.
    assert metrics.sample("hygon_dcu_card_occupancy_ratio", card=grant.card_pci) == 0.25
    text = metrics.render()
    assert 'hygon_dcu_free_partitions{resource="hygon.com/dcu.partitioned.mig-8g.63gb"} 7.0' in text
    assert (
        'hygon_dcu_free_partitions{resource="hygon.com/dcu.partitioned.mig-2g.15gb"} 31.0' in text
    )
    harness.finish("train")
    harness.reclaimer.run_pass()
    assert "hygon_dcu_partition_info{" not in harness.runtime.metrics.render()
