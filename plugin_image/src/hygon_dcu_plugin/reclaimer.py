"""Reclaim: destroy partitions whose pods are done, and everything nobody owns.

Runs on every pod event and on a periodic resync. A record is reclaimed when its pod is
confirmed gone (the API server says so, or the name now has another uid) or has reached a
terminal phase; records younger than the grace period are kept unless the pod is confirmed
gone (the API can lag the kubelet). Destroy is uuid-guarded (a reused id is someone else's
instance and is never destroyed); IN_USE is retried on the next pass. Poison directories are
swept out of ci/. Instances no record owns are collected only after re-reading the records
under the card lock (Allocate writes its record under that lock), and not at all while any
record is unreadable.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ansible_collections.hygon.dcu.plugins.module_utils.hydmi import HydmiError, InstanceInUse
from ansible_collections.hygon.dcu.plugins.module_utils.node import (
    InstanceNotFound,
    Node,
    UuidMismatch,
)

from .kube import KubeApi, KubeApiError
from .locks import Locks
from .metrics import Metrics
from .records import Record, RecordStore

log = logging.getLogger(__name__)

Checkpoint = Callable[[str], None]


@dataclass
class PassReport:
    destroyed: list[str] = field(default_factory=list)  # uuids
    in_use: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)  # records whose instance is gone or reused
    orphans: list[str] = field(default_factory=list)  # "pci gi<id> <uuid>"
    swept: list[str] = field(default_factory=list)
    unreadable: list[tuple[str, str]] = field(default_factory=list)
    orphan_collection: str = "done"  # or why it was skipped
    errors: list[str] = field(default_factory=list)


class _CardIndexes:
    """PCI address -> card index for one pass. The cards are enumerated at most once per pass
    (on the first record that needs it), even when none has an address (mode off): a teardown
    of N records would otherwise cost N enumerations (the benchmark measured it)."""

    def __init__(self, node: Node) -> None:
        self._node = node
        self._by_pci: dict[str, int] | None = None

    def of(self, pci: str) -> int | None:
        if self._by_pci is None:
            self._by_pci = {card.pci: card.index for card in self._node.cards() if card.pci}
        return self._by_pci.get(pci)


class Reclaimer:
    def __init__(
        self,
        node: Node,
        store: RecordStore,
        kube: KubeApi,
        *,
        locks: Locks,
        metrics: Metrics,
        grace_seconds: float = 30.0,
        on_change: Callable[[], None] = lambda: None,
        checkpoint: Checkpoint | None = None,
    ) -> None:
        self.node = node
        self.store = store
        self.kube = kube
        self.locks = locks
        self.metrics = metrics
        self.grace_seconds = grace_seconds
        self.on_change = on_change
        self.checkpoint = checkpoint
        self.wake = threading.Event()
        self.passes = 0
        self.last_report: PassReport | None = None

    def _step(self, name: str) -> None:
        if self.checkpoint is not None:
            self.checkpoint(name)

    def _count(self, action: str, n: int = 1) -> None:
        if n:
            self.metrics.reclaim_actions.inc(n, action=action)

    # one pass ----------------------------------------------------------------------------
    def run_pass(self) -> PassReport:
        report = PassReport()
        try:
            self._sweep(report)
            records = self.store.load()
            report.unreadable = records.unreadable
            self._count("corrupt_record", len(records.unreadable))
            card_indexes = _CardIndexes(self.node)
            for record in records:
                self._reclaim_if_done(record, report, card_indexes)
            if records.unreadable:
                report.orphan_collection = (
                    "skipped: unreadable records "
                    + ", ".join(f"{path} ({why})" for path, why in records.unreadable)
                    + "; fix or remove them (an unreadable record may own a live instance)"
                )
                log.error("orphan collection stopped", extra={"why": report.orphan_collection})
            else:
                self._collect_orphans(report)
        finally:
            self.passes += 1
            self.last_report = report
            # Every pass, not only after a change: the kubelet lists token assignments only
            # after Allocate returns, and this is where the counts catch up with it.
            self.on_change()
        return report

    def _sweep(self, report: PassReport) -> None:
        result = self.node.sweep_poison()
        report.swept = list(result.swept)
        self._count("poison_swept", len(result.swept))
        for kept in result.kept:
            report.errors.append(f"poison not swept: {kept.path}: {kept.detail}")

    def _pod_done(self, record: Record) -> str | None:
        """Why the record's partition can go, or None to keep it."""
        try:
            pod = self.kube.get_pod(record.namespace, record.pod_name)
        except KubeApiError as exc:
            log.warning(
                "cannot read pod; keeping its partition this pass",
                extra={"pod": record.pod_key, "error": str(exc)},
            )
            return None
        if pod is None or pod.uid != record.pod_uid:
            return "pod deleted"
        if not pod.terminal:
            return None
        if time.time() - record.created_at < self.grace_seconds:
            return None
        return f"pod {pod.phase}"

    def _reclaim_if_done(
        self, record: Record, report: PassReport, card_indexes: _CardIndexes
    ) -> None:
        why = self._pod_done(record)
        if why is None:
            return
        index = card_indexes.of(record.card_pci)
        with self.locks.card(record.card_pci):
            try:
                if index is None:
                    raise InstanceNotFound(f"no card at {record.card_pci}")
                self.node.destroy(
                    index,
                    record.gpu_instance_id,
                    expected_uuid=record.uuid,
                    checkpoint=self.checkpoint,
                )
            except InstanceInUse:
                report.in_use.append(record.uuid)
                self._count("in_use_retry")
                log.info(
                    "partition still in use; retrying next pass",
                    extra={"uuid": record.uuid, "pod": record.pod_key},
                )
                return
            except (InstanceNotFound, UuidMismatch) as exc:
                # The instance it names is gone (reboot, manual destroy) or the id now belongs
                # to another instance: nothing of ours to destroy, never touch the other one.
                report.stale.append(record.uuid)
                self._count("stale_record")
                log.warning(
                    "record names no live instance; dropping it",
                    extra={"uuid": record.uuid, "pod": record.pod_key, "detail": str(exc)},
                )
            else:
                report.destroyed.append(record.uuid)
                self._count("destroyed")
                log.info(
                    "partition reclaimed",
                    extra={"uuid": record.uuid, "pod": record.pod_key, "why": why},
                )
            self._step("instance_destroyed")
            self.store.remove(record)

    def _collect_orphans(self, report: PassReport) -> None:
        for card in self.node.cards():
            if not card.pci or not card.healthy:
                continue
            try:
                self._collect_on(card.index, card.pci, report)
            except HydmiError as exc:
                # One card failing its queries must not stop collection on the others.
                report.errors.append(f"card {card.pci}: {exc}")
            if report.orphan_collection != "done":
                return

    def _collect_on(self, card_index: int, card_pci: str, report: PassReport) -> None:
        if not self.node.instances(card_index):
            return
        self._step("orphans_listed")
        with self.locks.card(card_pci):
            # Re-read under the lock Allocate holds from create to record: a claim made
            # since the listing above is seen here.
            records = self.store.load()
            if records.unreadable:
                report.orphan_collection = "stopped: a record became unreadable mid-sweep"
                report.unreadable = records.unreadable
                return
            for instance in self.node.instances(card_index):
                if any(r.owns(card_pci, instance.gpu_instance_id, instance.uuid) for r in records):
                    continue
                label = f"{card_pci} gi{instance.gpu_instance_id} {instance.uuid}"
                try:
                    self.node.destroy(
                        card_index,
                        instance.gpu_instance_id,
                        expected_uuid=instance.uuid,
                        checkpoint=self.checkpoint,
                    )
                except InstanceInUse:
                    report.in_use.append(label)
                    self._count("in_use_retry")
                    continue
                except (InstanceNotFound, UuidMismatch) as exc:
                    report.errors.append(f"orphan {label}: {exc}")
                    continue
                report.orphans.append(label)
                self._count("orphan_destroyed")
                log.warning("collected an instance no record owns", extra={"instance": label})

    # the loop ----------------------------------------------------------------------------
    def run(self, stop: threading.Event, resync_seconds: float) -> None:
        while not stop.is_set():
            try:
                self.run_pass()
            except Exception:
                log.exception("reclaim pass failed; retrying at the next resync")
            self.wake.wait(resync_seconds)
            self.wake.clear()
