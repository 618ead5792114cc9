"""The device plugin's metrics (docs/observability.md has the reference table)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from hygon_dcu_plugin.exposition import LabelKey, Snapshot, program_registry, render
from hygon_dcu_plugin.refusal import AllocateRefusal

__all__ = ["FAILURE_REASONS", "MODES", "RECLAIM_ACTIONS", "LabelKey", "Metrics"]

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
# The partition mode as hygon_dcu_mig_mode names it: "on" (partitions) or "off" (whole cards
# and logical slices).
MODES = ("on", "off")


class Metrics:
    def __init__(self) -> None:
        self.registry = registry = program_registry("device-plugin")
        self.allocations = Counter(
            "hygon_dcu_allocations_total",
            "Partitions granted by Allocate, by profile.",
            ["profile"],
            registry=registry,
        )
        self.allocation_failures = Counter(
            "hygon_dcu_allocation_failures_total",
            "Allocate calls refused or failed, by reason.",
            ["reason"],
            registry=registry,
        )
        self.reclaim_actions = Counter(
            "hygon_dcu_reclaim_actions_total",
            "Reclaimer actions: " + ", ".join(RECLAIM_ACTIONS) + ".",
            ["action"],
            registry=registry,
        )
        self.allocate_seconds = Histogram(
            "hygon_dcu_allocate_duration_seconds",
            "Allocate latency.",
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=registry,
        )
        self.registered = Gauge(
            "hygon_dcu_kubelet_registered",
            "1 while registered with the kubelet.",
            registry=registry,
        )
        self.mode = Snapshot(
            "hygon_dcu_mig_mode",
            "1 for the node's partition mode (on: partitions; off: whole cards and logical "
            "slices), 0 for the other.",
            registry,
            ["mode"],
        )
        self.card_occupancy = Snapshot(
            "hygon_dcu_card_occupancy_ratio",
            "Share of each offered card in use: with the mode on the slices live partitions "
            "cover, with it off the compute units logical slices take (1 when held whole).",
            registry,
            ["card"],
        )
        self.live_instances = Snapshot(
            "hygon_dcu_live_instances",
            "Live partitions on the node, by profile.",
            registry,
            ["profile"],
        )
        self.orphan_collection_stopped = Snapshot(
            "hygon_dcu_orphan_collection_stopped",
            "1 for each card where orphan collection is stopped (see the plugin's log).",
            registry,
            ["card"],
        )
        self.lost_partitions = Snapshot(
            "hygon_dcu_lost_partitions",
            "Partitions granted to a live pod that no longer exist, by namespace and pod.",
            registry,
            ["namespace", "pod"],
        )
        self.partition_info = Snapshot(
            "hygon_dcu_partition_info",
            "1 per granted partition: uuid -> namespace, pod, container, profile, card.",
            registry,
            ["uuid", "namespace", "pod", "container", "profile", "card"],
        )
        self.slice_info = Snapshot(
            "hygon_dcu_slice_info",
            "1 per granted logical slice: vdev -> namespace, pod, container, card, compute "
            "units, memory in MiB.",
            registry,
            ["vdev", "namespace", "pod", "container", "card", "compute_units", "memory_mib"],
        )
        self.slice_card_free = Snapshot(
            "hygon_dcu_slice_card_free",
            "What each card still has for new logical slices (mode off), by card and resource: "
            "compute_units, memory_mib, slices (free slots); 0 on a card held whole.",
            registry,
            ["card", "resource"],
        )
        self.advertised = Snapshot(
            "hygon_dcu_advertised_devices",
            "Healthy devices advertised to the kubelet, by resource.",
            registry,
            ["resource"],
        )
        self.free = Snapshot(
            "hygon_dcu_free_partitions",
            "Partitions that can still be carved, by resource (family and each profile).",
            registry,
            ["resource"],
        )
        for action in RECLAIM_ACTIONS:
            self.reclaim_actions.labels(action)
        for reason in FAILURE_REASONS:
            self.allocation_failures.labels(reason)

    def known_profiles(self, names: list[str]) -> None:
        """Start the per-profile counters at 0 once the node's profiles are known."""
        for name in names:
            self.allocations.labels(name)

    def set_mode(self, partitioned: bool) -> None:
        on = "on" if partitioned else "off"
        self.mode.set_all({(("mode", m),): 1.0 if m == on else 0.0 for m in MODES})

    def sample(self, name: str, **labels: str) -> float:
        """One series' value as a scrape reads it; 0 when it does not exist."""
        return self.registry.get_sample_value(name, labels) or 0.0

    def render(self) -> str:
        return render(self.registry)
