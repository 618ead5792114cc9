"""Reclaim for logical slices: destroy a slice once its pod is done, and every slice no grant
names (docs/dev/logical-slices.md, "Reclaim").

The same rules as partitions (``reclaimer.py``), for vdevs. When a pod is done is decided by
the partition reclaimer's own rule (``Reclaimer.pod_done``). Every decision is taken under the
node lock, which the slice Allocate holds from its create until its grant is written, so a
create under way is never mistaken for an orphan, and a vdev id is never reused between the
reading and the destroy. A grant's vdev is destroyed only when the live vdev is the one it
records (``SliceGrant.matches``: card, size, compute-unit mask); a reused id is another
pod's. A vdev whose conf cannot be read is not destroyed for a grant (its mask cannot be
checked), and a busy one (a process holds its conf) is retried on the next pass. Orphans are
collected only while the grants store is trusted and every grant in it reads. Order of a
reclaim: destroy, remove the attribution mark, remove the grant; a crash between steps leaves
a grant whose vdev is gone, dropped on the next pass.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ansible_collections.hygon.dcu.plugins.module_utils.dmi import (
    DmiError,
    DmiUnusable,
    VdevBusy,
    VdevGone,
)
from ansible_collections.hygon.dcu.plugins.module_utils.node import Checkpoint
from ansible_collections.hygon.dcu.plugins.module_utils.vdevs import Vdev, VdevError, Vdevs

from hygon_dcu_plugin.deviceplugin.conditions import Conditions
from hygon_dcu_plugin.deviceplugin.events import WARNING, PodEvents
from hygon_dcu_plugin.deviceplugin.grants import GrantStore
from hygon_dcu_plugin.deviceplugin.locks import Locks
from hygon_dcu_plugin.deviceplugin.metrics import Metrics
from hygon_dcu_plugin.deviceplugin.slice_grants import SliceGrant
from hygon_dcu_plugin.deviceplugin.slice_marks import MarkError, Marks
from hygon_dcu_plugin.kube import Pod, PodRef

log = logging.getLogger(__name__)

PodDone = Callable[[SliceGrant], tuple[str | None, Pod | None]]


@dataclass
class SlicePassReport:
    destroyed: list[str] = field(default_factory=list)  # "vdev <N> on card ..." labels
    in_use: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)  # grants whose vdev is gone or another's
    lost: list[str] = field(default_factory=list)  # live pods' grants whose vdev is gone
    orphans: list[str] = field(default_factory=list)
    undecided: dict[str, str] = field(default_factory=dict)  # grant label -> why kept
    # Why nothing was collected this pass (the message shown); None when collection ran.
    orphan_collection_skipped: str | None = None
    errors: list[str] = field(default_factory=list)


class SliceReclaimer:
    def __init__(
        self,
        vdevs: Vdevs,
        store: GrantStore,
        *,
        pod_done: PodDone,
        locks: Locks,
        metrics: Metrics,
        events: PodEvents,
        host_root: str = "/",
        checkpoint: Checkpoint | None = None,
    ) -> None:
        self.vdevs = vdevs
        self.store = store
        self.pod_done = pod_done
        self.locks = locks
        self.metrics = metrics
        self.events = events
        self.marks = Marks(host_root)
        self.checkpoint = checkpoint
        self.last_report: SlicePassReport | None = None
        self.stops = Conditions(log, "slice reclaim held back")
        self._lost_reported: set[tuple[str, int]] = set()

    def _step(self, name: str) -> None:
        if self.checkpoint is not None:
            self.checkpoint(name)

    def _count(self, action: str, n: int = 1) -> None:
        if n:
            self.metrics.reclaim_actions.labels(action).inc(n)

    def _read(self) -> list[Vdev]:
        return self.vdevs.read().vdevs

    # one pass ----------------------------------------------------------------------------
    def run_pass(self) -> SlicePassReport:
        report = SlicePassReport()
        try:
            loaded = self.store.load()
            seen = _Seen(self._read)
            for grant in loaded.slices:
                self._reclaim_if_done(grant, report, seen)
            if loaded.problem is not None:
                report.orphan_collection_skipped = "skipped: " + loaded.problem.explain()
            elif loaded.unreadable:
                shown = ", ".join(f"{path} ({why})" for path, why in loaded.unreadable)
                report.orphan_collection_skipped = (
                    f"skipped: unreadable grants {shown}; fix or remove them (an unreadable "
                    "grant may own a live slice)"
                )
            else:
                self._collect_orphans(report)
        except (DmiError, VdevError) as exc:
            report.orphan_collection_skipped = f"skipped: the slices cannot be read ({exc})"
        finally:
            current = dict(report.undecided)
            if report.orphan_collection_skipped is not None:
                current["orphans"] = report.orphan_collection_skipped
            self.stops.settle(current)
            self.last_report = report
        return report

    def _reclaim_if_done(self, grant: SliceGrant, report: SlicePassReport, seen: _Seen) -> None:
        why, pod = self.pod_done(grant)
        if why is None:
            if pod is not None and not pod.deleting:
                self._check_live(grant, pod, report, seen)
            return
        with self.locks.node():
            live = next((v for v in self._read() if v.id == grant.vdev_id), None)
            if live is not None and grant.matches(live):
                try:
                    self.vdevs.destroy(grant.vdev_id)
                except VdevBusy:
                    self._busy(grant, why, pod, report)
                    return
                except VdevGone:
                    pass  # gone since the reading: nothing of ours left to destroy
                else:
                    report.destroyed.append(grant.label)
                    self._count("slice_destroyed")
                    log.info(
                        "slice reclaimed",
                        extra={"vdev": grant.vdev_id, "pod": grant.pod_key, "why": why},
                    )
                self._step("vdev_destroyed")
            elif live is not None and live.conf is None and _same_size(grant, live):
                report.undecided[grant.label] = (
                    f"{live.conf_problem}, so it cannot be checked that the live vdev "
                    f"{live.id} is the one granted to {grant.pod_key} ({why}); it is kept "
                    "until the file reads as the driver wrote it"
                )
                return
            else:
                report.stale.append(grant.label)
                self._count("stale_grant")
                log.warning(
                    "slice grant names no live vdev of its own; dropping it",
                    extra={"vdev": grant.vdev_id, "pod": grant.pod_key},
                )
            try:
                self.marks.remove(grant.mark_name)
            except MarkError as exc:
                report.errors.append(f"{grant.label}: {exc}")
                return  # keep the grant: the mark's removal is retried with it
            self._step("mark_removed")
            self.store.remove(grant)

    def _busy(self, grant: SliceGrant, why: str, pod: Pod | None, report: SlicePassReport) -> None:
        report.in_use.append(grant.label)
        self._count("in_use_retry")
        if pod is not None and pod.deleting and not pod.terminal:
            return  # its containers may still be stopping: not stuck (yet)
        self.events.emit(
            PodRef(grant.namespace, grant.pod_name, grant.pod_uid),
            WARNING,
            "SliceReclaimStuck",
            f"{why}, but {grant.label} is still held open by a process (DEVICE_BUSY); the "
            f"plugin retries on every pass. Find the process holding {grant.conf_path} on "
            "this node and stop it",
        )

    def _check_live(
        self, grant: SliceGrant, pod: Pod, report: SlicePassReport, seen: _Seen
    ) -> None:
        """A running pod's slice must still exist; said once per grant."""
        key = (grant.pod_uid, grant.vdev_id)
        if key in self._lost_reported:
            return
        if self._present(grant, seen.vdevs()):
            return
        # Read outside the lock: confirm under it, where an Allocate's rollback (which
        # destroys its vdev before it drops the grant this pass may have loaded) is done.
        with self.locks.node():
            if grant not in self.store.load().slices or self._present(grant, self._read()):
                return
        report.lost.append(grant.label)
        self._lost_reported.add(key)
        self.events.emit(
            pod.ref,
            WARNING,
            "SliceLost",
            f"{grant.label} granted to container {grant.containers[0]} no longer exists (the "
            "node rebooted or it was destroyed by hand); the container has no device. Delete "
            "the pod so it is scheduled again",
        )

    @staticmethod
    def _present(grant: SliceGrant, vdevs: Sequence[Vdev]) -> bool:
        """The grant's vdev is live (or its conf is unreadable, so it cannot be told)."""
        live = next((v for v in vdevs if v.id == grant.vdev_id), None)
        return live is not None and (grant.matches(live) or live.conf is None)

    def _collect_orphans(self, report: SlicePassReport) -> None:
        with self.locks.node():
            # Re-read under the lock the slice Allocate holds until its grant is written.
            loaded = self.store.load()
            if loaded.problem is not None or loaded.unreadable:
                report.orphan_collection_skipped = "skipped: the grants changed under the pass"
                return
            claimed = {g.vdev_id for g in loaded.slices}
            for vdev in self._read():
                if vdev.id in claimed:
                    continue  # a claim holds its id whatever the sizes say
                label = f"vdev {vdev.id} on card {vdev.card}"
                try:
                    self.vdevs.destroy(vdev.id)
                except VdevBusy:
                    report.in_use.append(label)
                    self._count("in_use_retry")
                    continue
                except VdevGone:
                    continue
                report.orphans.append(label)
                self._count("slice_orphan_destroyed")
                log.warning("collected a slice no grant owns", extra={"vdev": label})

    # the store's settlement --------------------------------------------------------------
    def without_grant(self, grants: Sequence[SliceGrant]) -> list[str]:
        """Live vdevs no grant names (by id), as a message names them. Raises DmiError or
        VdevError when they cannot be read; a node without the library and without a conf
        file has none (the driver writes a conf for every vdev)."""
        named = {g.vdev_id for g in grants}
        try:
            live = self._read()
        except DmiUnusable:
            if self.vdevs.conf_paths():
                raise
            return []
        return [f"vdev {v.id} on card {v.card}" for v in live if v.id not in named]


class _Seen:
    """The node's slices read at most once a pass, for the lost-slice checks of running pods
    (a reclaim reads them again under the node lock: it acts on what it reads)."""

    def __init__(self, read: Callable[[], list[Vdev]]) -> None:
        self._read = read
        self._vdevs: list[Vdev] | None = None

    def vdevs(self) -> list[Vdev]:
        if self._vdevs is None:
            self._vdevs = self._read()
        return self._vdevs


def _same_size(grant: SliceGrant, vdev: Vdev) -> bool:
    """What the library says matches the grant (the conf, which holds the mask, is unread)."""
    return (vdev.card, vdev.compute_units, vdev.memory_mib) == (
        grant.card_index,
        grant.compute_units,
        grant.memory_mib,
    )
