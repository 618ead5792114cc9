"""Reclaim: destroy partitions whose pods are done, and everything nobody owns.

Runs on every pod event and on a periodic resync. A grant is reclaimed at once when its pod
has reached a terminal phase, its deletion has started, the watch saw it deleted, or its name
now has another uid. A pod in its termination grace may still run: the driver refuses to
destroy an instance a process holds (IN_USE), so a workload still using its partition keeps it
and the next pass (the pod's next status change) retries; that wait is expected and reported
only once the pod has stopped. The grace period protects only a grant whose pod the API server
does not show (yet). Destroy is uuid-guarded (a reused id is someone else's instance and is
never destroyed). Poison directories are swept out of ci/.

Orphan collection fails closed (docs/dev/runtime.md): an instance is collected only when the
driver state and every grant agree nobody owns it, after re-reading the grants under the
card lock (Allocate writes its grant under that lock). Nothing is collected while a grant
is unreadable, nor on a card whose registry entries are unreadable or odd, nor at a card + GPU
instance any grant claims (whatever the uuid), nor while a live compute instance has no
readable conf file. Each stop is logged once, with the fix.

The plugin's own state fails closed too. Nothing is collected, and Allocate refuses, while
the grants store is missing, not a directory, a link, or lacks its mark; the reclaimer alone
creates or marks it, and only when no live partition can lack its grant (``settle_store``).
A grant is decided on (lost, reclaimed, dropped as stale) only on a card the node layer calls
healthy at the grant's PCI address; a grant is dropped as stale only when the library says its
GPU instance is gone, or the uuid differs on a card whose registry reads cleanly.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from ansible_collections.hygon.dcu.plugins.module_utils.cards import Card
from ansible_collections.hygon.dcu.plugins.module_utils.dmi import DmiError
from ansible_collections.hygon.dcu.plugins.module_utils.hydmi import HydmiError, InstanceInUse
from ansible_collections.hygon.dcu.plugins.module_utils.node import (
    Checkpoint,
    Instance,
    InstanceNotFound,
    Node,
    UuidMismatch,
)
from ansible_collections.hygon.dcu.plugins.module_utils.registry import Finding, conf_path
from ansible_collections.hygon.dcu.plugins.module_utils.vdevs import VdevError

from hygon_dcu_plugin.deviceplugin.conditions import Conditions
from hygon_dcu_plugin.deviceplugin.events import WARNING, PodEvents
from hygon_dcu_plugin.deviceplugin.grants import (
    STARTABLE,
    Grant,
    GrantStore,
    StoreFault,
    StoreProblem,
)
from hygon_dcu_plugin.deviceplugin.locks import Locks
from hygon_dcu_plugin.deviceplugin.lost import LostGrants, grant_lost
from hygon_dcu_plugin.deviceplugin.metrics import Metrics
from hygon_dcu_plugin.deviceplugin.slice_grants import SliceGrant
from hygon_dcu_plugin.kube import KubeApi, KubeApiError, Pod, PodEvent, PodRef
from hygon_dcu_plugin.shown import listing

log = logging.getLogger(__name__)


# Uids of pods the watch saw deleted, kept for the passes that follow (bounded).
DELETED_UIDS_KEPT = 4096


@dataclass
class PassReport:
    destroyed: list[str] = field(default_factory=list)  # uuids
    in_use: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)  # grants whose instance is gone or reused
    lost: list[str] = field(default_factory=list)  # live pods' grants whose instance is gone
    orphans: list[str] = field(default_factory=list)  # "pci gi<id> <uuid>"
    swept: list[str] = field(default_factory=list)
    unreadable: list[tuple[str, str]] = field(default_factory=list)
    # Why orphan collection was skipped this pass (the message shown); None when it ran.
    orphan_collection_skipped: str | None = None
    blocked: dict[str, str] = field(default_factory=dict)  # card PCI -> why nothing collected
    undecided: dict[str, str] = field(default_factory=dict)  # card PCI -> why grants left alone
    errors: list[str] = field(default_factory=list)


class _Cards:
    """The node's cards for one pass, enumerated at most once (on the first grant that needs
    it; a teardown of N grants would otherwise cost N enumerations), and each card's live
    instances, read once per pass for the lost-grant check.

    Only a healthy card counts for a grant: the node layer checks a card's registry dev<N>
    against the library, so an unhealthy card's address or index may name another card."""

    def __init__(self, node: Node) -> None:
        self._node = node
        self._cards: list[Card] | None = None
        self._live: dict[int, list[Instance]] = {}

    def _all(self) -> list[Card]:
        if self._cards is None:
            self._cards = self._node.cards()
        return self._cards

    def of(self, pci: str) -> int | None:
        """The index of the healthy card at ``pci``, or None."""
        return next((c.index for c in self._all() if c.healthy and c.pci == pci), None)

    def undecidable(self, pci: str) -> str | None:
        """Why nothing may be decided about a grant on ``pci`` this pass, or None. A card no
        healthy card has the address of is gone only when every card is healthy and keyed."""
        cards = self._all()
        if self.of(pci) is not None:
            return None
        named = next((c for c in cards if c.pci == pci), None)
        if named is not None:
            return f"card {named.index} ({pci}) is unhealthy: {named.error}"
        unsure = next((c for c in cards if not c.healthy or not c.pci), None)
        if unsure is None:
            return None
        what = (
            f"is unhealthy: {unsure.error}"
            if not unsure.healthy
            else f"has no address (its registry dev{unsure.index} is missing or unreadable)"
        )
        return f"no healthy card has address {pci}, and card {unsure.index} {what}"

    def live(self, index: int) -> list[Instance]:
        if index not in self._live:
            self._live[index] = self._node.instances(index)
        return self._live[index]


class Reclaimer:
    def __init__(
        self,
        node: Node,
        store: GrantStore,
        kube: KubeApi,
        *,
        locks: Locks,
        metrics: Metrics,
        grace_seconds: float = 30.0,
        on_change: Callable[[], None] = lambda: None,
        checkpoint: Checkpoint | None = None,
        events: PodEvents | None = None,
        delete_pods_with_lost_partitions: bool = False,
        slices_without_grant: Callable[[list[SliceGrant]], list[str]] | None = None,
    ) -> None:
        self.node = node
        # Live slices no slice grant names (None: the node serves no slices); raises when
        # they cannot be read.
        self.slices_without_grant = slices_without_grant
        self.store = store
        self.kube = kube
        self.events = events if events is not None else PodEvents(kube)
        self.lost = LostGrants(
            kube,
            self.events,
            metrics,
            delete_pods=delete_pods_with_lost_partitions,
            count=self._count,
        )
        self.locks = locks
        self.metrics = metrics
        self.grace_seconds = grace_seconds
        self.on_change = on_change
        self.checkpoint = checkpoint
        self.wake = threading.Event()
        self.passes = 0
        self.last_report: PassReport | None = None
        self.stops = Conditions(log, "orphan collection stopped")
        self.undecided = Conditions(log, "grants left undecided")
        self._deleted: OrderedDict[str, None] = OrderedDict()
        self._deleted_lock = threading.Lock()

    def pod_event(self, event: PodEvent) -> None:
        """A pod watch event: remember a deletion (so the grace no longer applies to its
        grants) and wake the loop."""
        if event.kind == "DELETED" and event.uid:
            with self._deleted_lock:
                self._deleted[event.uid] = None
                self._deleted.move_to_end(event.uid)
                while len(self._deleted) > DELETED_UIDS_KEPT:
                    self._deleted.popitem(last=False)
        self.wake.set()

    def _seen_deleted(self, uid: str) -> bool:
        with self._deleted_lock:
            return uid in self._deleted

    def _step(self, name: str) -> None:
        if self.checkpoint is not None:
            self.checkpoint(name)

    def _count(self, action: str, n: int = 1) -> None:
        if n:
            self.metrics.reclaim_actions.labels(action).inc(n)

    # one pass ----------------------------------------------------------------------------
    def run_pass(self) -> PassReport:
        report = PassReport()
        try:
            self._sweep(report)
            store_stop = self.settle_store()
            grants = self.store.load()
            if store_stop is None and grants.problem is not None:
                store_stop = grants.problem.explain()
            report.unreadable = grants.unreadable
            self._count("corrupt_grant", len(grants.unreadable))
            cards = _Cards(self.node)
            self.lost.begin_pass()
            for grant in grants:
                self._reclaim_if_done(grant, report, cards)
            self.lost.end_pass()
            if store_stop is not None:
                report.orphan_collection_skipped = "skipped: " + store_stop
            elif grants.unreadable:
                report.orphan_collection_skipped = _unreadable_grants(grants.unreadable)
            else:
                self._collect_orphans(report)
            self._settle_stops(report)
        finally:
            self.passes += 1
            self.last_report = report
            # Every pass, not only after a change: the kubelet lists token assignments only
            # after Allocate returns, and this is where the counts catch up with it.
            self.on_change()
        return report

    def _settle_stops(self, report: PassReport) -> None:
        current = {f"card {pci}": why for pci, why in report.blocked.items()}
        if report.orphan_collection_skipped is not None:
            current["grants"] = report.orphan_collection_skipped
        self.stops.settle(current)
        self.metrics.orphan_collection_stopped.set_all(
            {(("card", pci),): 1.0 for pci in report.blocked}
        )
        self.undecided.settle({f"card {pci}": why for pci, why in report.undecided.items()})

    # the grants store ----------------------------------------------------------------------
    def settle_store(self) -> str | None:
        """Create a missing grants store, or mark an unmarked one, when no live partition can
        lack its grant: none is live (a first start, a reboot) or each is named by uuid by a
        grant in it. Otherwise (and for a link or a file there) the store stays as it is and
        the returned line says why, what is held back and the fix."""
        problem = self.store.check()
        if problem is None or problem.fault not in STARTABLE:
            return None if problem is None else problem.explain()
        with self.locks.node():  # no Allocate between counting the partitions and the mark
            problem = self.store.check()
            if problem is None or problem.fault not in STARTABLE:
                return None if problem is None else problem.explain()
            unnamed = self._partitions_without_grant(problem)
            if unnamed is not None:
                return problem.explain(unnamed)
            why = (
                "no partition was live"
                if problem.fault is StoreFault.MISSING
                else "its grants named every live partition"
            )
            try:
                if problem.fault is StoreFault.MISSING:
                    self.store.create(why)
                else:
                    self.store.mark(why)
            except OSError as exc:
                return problem.explain(f"marking it failed ({exc})")
        log.info(
            "grants store created"
            if problem.fault is StoreFault.MISSING
            else "grants store marked",
            extra={"dir": self.store.directory, "why": why},
        )
        return None

    def _partitions_without_grant(self, problem: StoreProblem) -> str | None:
        """Which live partitions the store names no grant for (by card, GPU instance and
        uuid), or why they cannot be counted; None when there is none."""
        grants = self.store.load().grants if problem.fault is StoreFault.UNMARKED else []
        unnamed: list[str] = []
        try:
            for card in self.node.cards():
                if not card.healthy:
                    return (
                        f"card {card.index} is unhealthy ({card.error}), so its partitions "
                        "cannot be counted"
                    )
                for instance in self.node.instances(card.index):
                    if not any(
                        g.owns(instance.pci or "", instance.gpu_instance_id, instance.uuid)
                        for g in grants
                    ):
                        where = instance.pci or f"card {card.index}"
                        unnamed.append(f"{where} gi{instance.gpu_instance_id}")
            if self.slices_without_grant is not None:
                slices = self.store.load().slices if problem.fault is StoreFault.UNMARKED else []
                unnamed += self.slices_without_grant(slices)
        except (HydmiError, DmiError, VdevError) as exc:
            return f"the cards cannot be read ({exc})"
        if not unnamed:
            return None
        return (
            f"{len(unnamed)} live partition(s) or slice(s) have no grant in it "
            f"({listing(unnamed[:3], len(unnamed))})"
        )

    def _sweep(self, report: PassReport) -> None:
        result = self.node.sweep_poison()
        report.swept = list(result.swept)
        self._count("poison_swept", len(result.swept))
        for kept in result.kept:
            report.errors.append(f"poison not swept: {kept.path}: {kept.detail}")

    def pod_done(self, grant: Grant | SliceGrant) -> tuple[str | None, Pod | None]:
        """Why the grant's partition (or slice) can go (None to keep it), and its pod if it
        lives."""
        try:
            pod = self.kube.get_pod(grant.namespace, grant.pod_name)
        except KubeApiError as exc:
            log.warning(
                "cannot read pod; keeping its partition this pass",
                extra={"pod": grant.pod_key, "error": str(exc)},
            )
            return None, None
        if pod is not None and pod.uid != grant.pod_uid:
            return "pod replaced by another of the same name", None
        if pod is not None and pod.terminal:
            return f"pod {pod.phase}", pod
        if pod is not None:
            return ("pod deletion started", pod) if pod.deleting else (None, pod)
        if self._seen_deleted(grant.pod_uid):
            return "pod deleted", None
        if time.time() - grant.created_at < self.grace_seconds:
            return None, None  # not visible yet, or deleted: the next passes tell
        return "pod deleted", None

    def _check_grant(
        self, grant: Grant, pod: Pod, index: int, report: PassReport, cards: _Cards
    ) -> None:
        """A live pod's partition must still exist; a card that cannot tell decides nothing."""
        if pod.deleting:
            return
        try:
            live = cards.live(index)
        except HydmiError as exc:
            log.warning(
                "cannot list the card's instances; lost-grant check skipped",
                extra={"card": grant.card_pci, "error": str(exc)},
            )
            return
        if not grant_lost(grant, live):
            return
        # Confirm under the card lock: an Allocate that failed after its create removes the
        # instance and then its grant while holding it; that is a rollback, not a loss.
        with self.locks.card(grant.card_pci):
            if grant not in self.store.load().grants:
                return
            if not grant_lost(grant, self.node.instances(index)):
                return
        report.lost.append(grant.uuid)
        self.lost.found(grant, pod)

    def _reclaim_if_done(self, grant: Grant, report: PassReport, cards: _Cards) -> None:
        why, pod = self.pod_done(grant)
        if why is None and pod is None:
            return
        undecidable = cards.undecidable(grant.card_pci)
        if undecidable is not None:
            report.undecided.setdefault(
                grant.card_pci,
                f"{undecidable}. Its grants are neither checked for loss nor reclaimed (nothing "
                "is destroyed or deleted) until a healthy card has this address: fix what the "
                "error names; a registry dev<N> that is missing, unreadable or names another "
                "card is restored as the driver wrote it (the PCI address of library card N)",
            )
            return
        index = cards.of(grant.card_pci)
        if why is None:
            if pod is not None and index is not None:
                self._check_grant(grant, pod, index, report, cards)
            return
        with self.locks.card(grant.card_pci):
            try:
                if index is None:
                    raise InstanceNotFound(f"no card at {grant.card_pci}")
                self.node.destroy(
                    index,
                    grant.gpu_instance_id,
                    expected_uuid=grant.uuid,
                    checkpoint=self.checkpoint,
                )
            except InstanceInUse:
                report.in_use.append(grant.uuid)
                self._count("in_use_retry")
                log.info(
                    "partition still in use; retrying next pass",
                    extra={"uuid": grant.uuid, "pod": grant.pod_key},
                )
                if pod is not None and pod.deleting and not pod.terminal:
                    return  # its containers may still be stopping: not stuck (yet)
                self.events.emit(
                    PodRef(grant.namespace, grant.pod_name, grant.pod_uid),
                    WARNING,
                    "PartitionReclaimStuck",
                    f"{why}, but partition {grant.uuid} is still held open by a process "
                    "(IN_USE); the plugin retries on every pass. Find the process holding "
                    "/dev/kfd or the render node on this node and stop it",
                )
                return
            except (InstanceNotFound, UuidMismatch) as exc:
                # The instance it names is gone (reboot, manual destroy) or the id now belongs
                # to another instance: nothing of ours to destroy, never touch the other one.
                # A uuid read from a registry with findings on the card proves nothing: keep
                # the grant, so the instance is destroyed once it reads cleanly.
                if isinstance(exc, UuidMismatch) and index is not None:
                    findings = self.node.registry().findings_for_card(index)
                    if findings:
                        first = findings[0]
                        report.undecided.setdefault(
                            grant.card_pci,
                            f"{first.path}: {first.kind}: {first.detail}. The grant of a "
                            "finished pod on this card is kept, since its instance's uuid "
                            "cannot be checked, until the registry reads cleanly: restore the "
                            "file the driver wrote",
                        )
                        return
                report.stale.append(grant.uuid)
                self._count("stale_grant")
                log.warning(
                    "grant names no live instance; dropping it",
                    extra={"uuid": grant.uuid, "pod": grant.pod_key, "detail": str(exc)},
                )
            else:
                report.destroyed.append(grant.uuid)
                self._count("destroyed")
                log.info(
                    "partition reclaimed",
                    extra={"uuid": grant.uuid, "pod": grant.pod_key, "why": why},
                )
            self._step("instance_destroyed")
            self.store.remove(grant)

    def _collect_orphans(self, report: PassReport) -> None:
        for card in self.node.cards():
            if not card.pci or not card.healthy:
                continue
            try:
                self._collect_on(card.index, card.pci, report)
            except HydmiError as exc:
                # One card failing its queries must not stop collection on the others.
                report.errors.append(f"card {card.pci}: {exc}")
            if report.orphan_collection_skipped is not None:
                return

    def _collect_on(self, card_index: int, card_pci: str, report: PassReport) -> None:
        if not self.node.instances(card_index):
            return
        self._step("orphans_listed")
        with self.locks.card(card_pci):
            # Re-read under the lock Allocate holds until its grant is written: a claim made
            # since the listing above is seen here.
            grants = self.store.load()
            if grants.problem is not None:
                report.orphan_collection_skipped = "skipped: " + grants.problem.explain()
                return
            if grants.unreadable:
                report.orphan_collection_skipped = _unreadable_grants(grants.unreadable)
                report.unreadable = grants.unreadable
                return
            live = self.node.instances(card_index)
            why = _why_collection_stops(live, self.node.registry().findings_for_card(card_index))
            if why is not None:
                report.blocked[card_pci] = why
                return
            for instance in live:
                claimed = any(
                    r.gpu_instance_id == instance.gpu_instance_id
                    and card_index_or_pci_match(r, card_index, card_pci)
                    for r in grants
                )
                if not claimed:
                    # A claim at this GPU instance holds whatever the uuids say: its end is
                    # the grant's reclaim, never an orphan collection.
                    self._destroy_orphan(card_index, card_pci, instance, report)

    def _destroy_orphan(
        self, card_index: int, card_pci: str, instance: Instance, report: PassReport
    ) -> None:
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
            return
        except (InstanceNotFound, UuidMismatch) as exc:
            report.errors.append(f"orphan {label}: {exc}")
            return
        report.orphans.append(label)
        self._count("orphan_destroyed")
        log.warning("collected an instance no grant owns", extra={"instance": label})

    # the loop ----------------------------------------------------------------------------
    def run(
        self,
        stop: threading.Event,
        resync_seconds: float,
        one_pass: Callable[[], object] | None = None,
    ) -> None:
        """Pass after pass, woken by pod events: ``run_pass`` by default, or ``one_pass``
        (the slices' reclaim on a node with the mode off)."""
        step = self.run_pass if one_pass is None else one_pass
        while not stop.is_set():
            try:
                step()
            except Exception:
                log.exception("reclaim pass failed; retrying at the next resync")
            self.wake.wait(resync_seconds)
            self.wake.clear()


def card_index_or_pci_match(grant: Grant, card_index: int, card_pci: str) -> bool:
    """A grant names its card by both; either one matching counts as a claim (fail closed
    when the registry's dev<N> map changed under it)."""
    return grant.card_pci == card_pci or grant.card_index == card_index


def _unreadable_grants(unreadable: list[tuple[str, str]]) -> str:
    return (
        "skipped: unreadable grants "
        + ", ".join(f"{path} ({why})" for path, why in unreadable)
        + "; fix or remove them (an unreadable grant may own a live instance)"
    )


def _why_collection_stops(live: list[Instance], registry_problems: list[Finding]) -> str | None:
    """Why nothing may be collected on a card, or None. An unreadable or odd registry entry
    may be the only trace of a live partition's owner; so may a missing conf file."""
    if registry_problems:
        first = registry_problems[0]
        more = f" (and {len(registry_problems) - 1} more)" if len(registry_problems) > 1 else ""
        return (
            f"{first.path}: {first.kind}: {first.detail}{more}. Nothing is collected on this "
            "card until the driver's registry reads cleanly: restore the file the driver "
            "wrote, or, if no pod uses that partition, remove the entry and destroy the "
            "instance with hy-smi"
        )
    for instance in live:
        if instance.compute_instance_id is not None and instance.uuid is None:
            ids = (instance.card_index, instance.gpu_instance_id, instance.compute_instance_id)
            return (
                f"{conf_path(*ids)}: missing for a live compute instance, so nobody can tell "
                "whose it is. If no pod uses it, destroy it with hy-smi (a pod that does has "
                "lost its device: delete the pod)"
            )
    return None
