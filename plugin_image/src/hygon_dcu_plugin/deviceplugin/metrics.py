"""The device plugin's metrics (every name is listed in docs/image.md)."""

from __future__ import annotations

from hygon_dcu_plugin.prometheus_text import Counter, Gauge, Histogram, LabelKey, Metric, render
from hygon_dcu_plugin.refusal import AllocateRefusal

__all__ = ["FAILURE_REASONS", "RECLAIM_ACTIONS", "LabelKey", "Metrics"]

RECLAIM_ACTIONS = (
    "destroyed",
    "in_use_retry",
    "stale_grant",
    "orphan_destroyed",
    "poison_swept",
    "corrupt_grant",
    "partition_lost",
    "lost_pod_deleted",
)
# Refusal reasons of Allocate, present from the start.
FAILURE_REASONS = tuple(refusal.value for refusal in AllocateRefusal)


class Metrics:
    def __init__(self) -> None:
        self.allocations = Counter(
            "hygon_dcu_allocations_total", "Partitions granted by Allocate, by profile."
        )
        self.allocation_failures = Counter(
            "hygon_dcu_allocation_failures_total", "Allocate calls refused or failed, by reason."
        )
        self.reclaim_actions = Counter(
            "hygon_dcu_reclaim_actions_total",
            "Reclaimer actions: " + ", ".join(RECLAIM_ACTIONS) + ".",
        )
        self.live_instances = Gauge(
            "hygon_dcu_live_instances", "Live partitions on the node, by profile."
        )
        self.allocate_seconds = Histogram(
            "hygon_dcu_allocate_duration_seconds",
            "Allocate latency.",
            (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
        )
        self.registered = Gauge(
            "hygon_dcu_kubelet_registered", "1 while registered with the kubelet."
        )
        self.orphan_collection_stopped = Gauge(
            "hygon_dcu_orphan_collection_stopped",
            "1 for each card where orphan collection is stopped (see the plugin's log).",
        )
        self.lost_partitions = Gauge(
            "hygon_dcu_lost_partitions",
            "Partitions granted to a live pod that no longer exist, by namespace and pod.",
        )
        self.partition_info = Gauge(
            "hygon_dcu_partition_info",
            "1 per granted partition: uuid -> namespace, pod, container, profile, card.",
        )
        self.slice_info = Gauge(
            "hygon_dcu_slice_info",
            "1 per granted logical slice: vdev -> namespace, pod, container, card, compute "
            "units, memory in MiB.",
        )
        self.slice_card_free = Gauge(
            "hygon_dcu_slice_card_free",
            "What each card still has for new logical slices (mode off), by card and resource: "
            "compute_units, memory_mib, slices (free slots); 0 on a card held whole.",
        )
        self.advertised = Gauge(
            "hygon_dcu_advertised_devices",
            "Healthy devices advertised to the kubelet, by resource.",
        )
        self.free = Gauge(
            "hygon_dcu_free_partitions",
            "Partitions that can still be carved, by resource (family and each profile).",
        )
        for action in RECLAIM_ACTIONS:
            self.reclaim_actions.zero(action=action)
        for reason in FAILURE_REASONS:
            self.allocation_failures.zero(reason=reason)

    def known_profiles(self, names: list[str]) -> None:
        """Start the per-profile counters at 0 once the node's profiles are known."""
        for name in names:
            self.allocations.zero(profile=name)

    def all(self) -> list[Metric]:
        return [
            self.allocations,
            self.allocation_failures,
            self.reclaim_actions,
            self.live_instances,
            self.allocate_seconds,
            self.registered,
            self.orphan_collection_stopped,
            self.lost_partitions,
            self.partition_info,
            self.slice_info,
            self.slice_card_free,
            self.advertised,
            self.free,
        ]

    def render(self) -> str:
        return render(self.all())
