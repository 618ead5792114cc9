"""Allocate for ``hygon.com/dcu.sliced``: create one logical slice (vdev) for the container
being admitted (docs/dev/logical-slices.md, "Device plugin").

Called under the node lock, which also serialises every create and destroy of a vdev on the
node: a create answers no id, so the new vdev is the one live after it and not before, and
only one writer may be at work. In order: identify the container (as for partitions), read its
slice request, read the node's slices, choose a card (the scheduler extender's reservation
when the pod has one, created exactly as written or refused; else ``slice_placement``), create
the vdev,
write its grant (before answering), write the vendor exporter's attribution mark, annotate the
pod, answer with the card's devices and the vdev's conf. Any failure after the create destroys
the vdev again and removes what was written for it.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Collection, Sequence

from ansible_collections.hygon.dcu.plugins.module_utils.dmi import DmiError
from ansible_collections.hygon.dcu.plugins.module_utils.node import Checkpoint, Node
from ansible_collections.hygon.dcu.plugins.module_utils.vdevs import Vdev, VdevError, Vdevs

from hygon_dcu_plugin.deviceplugin.api import deviceplugin_v1beta1_pb2 as pb
from hygon_dcu_plugin.deviceplugin.events import NORMAL, WARNING, PodEvents
from hygon_dcu_plugin.deviceplugin.grants import GrantError, GrantStore
from hygon_dcu_plugin.deviceplugin.identify import Target, identify_admitted
from hygon_dcu_plugin.deviceplugin.locks import Locks
from hygon_dcu_plugin.deviceplugin.metrics import Metrics
from hygon_dcu_plugin.deviceplugin.pod_reservation import (
    bad_reservation,
    pod_reservation,
    reservation_taken,
)
from hygon_dcu_plugin.deviceplugin.podresources import ListedPod, PodLister
from hygon_dcu_plugin.deviceplugin.refused import RequestRefused
from hygon_dcu_plugin.deviceplugin.response import slice_response
from hygon_dcu_plugin.deviceplugin.slice_grants import SliceGrant
from hygon_dcu_plugin.deviceplugin.slice_marks import MarkError, Marks, mark_name
from hygon_dcu_plugin.deviceplugin.slice_view import SliceView, held_whole, keyed_cards
from hygon_dcu_plugin.host import hygon_pci_addresses
from hygon_dcu_plugin.kube import KubeApi
from hygon_dcu_plugin.refusal import AllocateRefusal
from hygon_dcu_plugin.request import RefusedRequest, SliceRequest, parse_container
from hygon_dcu_plugin.reservation import Reservation
from hygon_dcu_plugin.shown import shorten, show_names
from hygon_dcu_plugin.slice_placement import SliceCard, choose_slice_card, room_text
from hygon_dcu_plugin.vocabulary import PACK, SLICED, annotation_key

log = logging.getLogger(__name__)

SLICE_METRIC_LABEL = "slice"  # the profile label of hygon_dcu_allocations_total for slices


class SlicesUnreadable(Exception):
    """The node's slices cannot be read, so nothing may be decided from them."""


def _too_large(cards: Sequence[SliceCard], request: SliceRequest) -> bool:
    """No offered card could hold the request even empty."""
    empty = [SliceCard(c.index, c.compute_units, c.memory_mib, (), c.max_slices) for c in cards]
    return choose_slice_card(empty, request) is None


class SliceAllocator:
    def __init__(
        self,
        node: Node,
        vdevs: Vdevs,
        store: GrantStore,
        kube: KubeApi,
        lister: PodLister,
        *,
        locks: Locks,
        metrics: Metrics,
        events: PodEvents,
        host_root: str = "/",
        answer_root: str = "/",
        node_name: str | None = None,
        policy: str = PACK,
        checkpoint: Checkpoint | None = None,
    ) -> None:
        self.node = node
        self.vdevs = vdevs
        self.store = store
        self.kube = kube
        self.lister = lister
        self.locks = locks
        self.metrics = metrics
        self.events = events
        self.host_root = host_root
        self.answer_root = answer_root
        self.node_name = node_name
        self.policy = policy
        self.checkpoint = checkpoint
        self.marks = Marks(host_root)

    def _step(self, name: str) -> None:
        if self.checkpoint is not None:
            self.checkpoint(name)

    # what the node holds -----------------------------------------------------------------
    def view(self, listed: Sequence[ListedPod]) -> SliceView:
        """The node's slices now; SlicesUnreadable when the library or the driver's conf
        files cannot be trusted."""
        try:
            keys = keyed_cards(self.node.cards(), hygon_pci_addresses(self.host_root))
            sizes = {card.index: card for card in self.vdevs.cards()}
            reading = self.vdevs.read()
            per_card = self.vdevs.per_card()
        except (DmiError, VdevError) as exc:
            raise SlicesUnreadable(str(exc)) from exc
        return SliceView(keys, sizes, reading.vdevs, per_card, held_whole(listed))

    def slices_on(self, pcis: Collection[str]) -> list[str]:
        """The live slices on these cards, as a message names them; the caller holds the node
        lock. No library and no conf file means no slice (a driver without the feature)."""
        try:
            view = self.view([])
        except SlicesUnreadable as exc:
            if not self.vdevs.library.load_error or self.vdevs.conf_paths():
                return [f"the node's slices cannot be read ({exc})"]
            return []
        return [
            f"vdev {v.id} ({view.keys[v.card]})"
            for v in view.vdevs
            if view.keys.get(v.card) in pcis
        ]

    # entry point (under the node lock) ---------------------------------------------------
    def allocate(self, device_ids: Sequence[str]) -> pb.ContainerAllocateResponse:
        if len(device_ids) != 1:
            raise RequestRefused(
                AllocateRefusal.TOO_MANY,
                f"{SLICED}: {len(device_ids)} slices requested for one container; a container "
                f"sees exactly one slice, so set {SLICED}: 1 and use one container per slice",
            )
        loaded = self.store.load()
        if loaded.problem is not None:
            raise RequestRefused(
                AllocateRefusal.GRANTS_STORE,
                f"no slice created: the grants store is not usable: {loaded.problem.explain()}",
            )
        target, listed = identify_admitted(
            SLICED,
            device_ids,
            loaded.slices,
            lister=self.lister,
            kube=self.kube,
            node_name=self.node_name,
        )
        try:
            if target.reuse is not None:
                return self._answer_again(target.reuse)
            return self._create(target, self._request(target), device_ids, listed)
        except RequestRefused as refused:
            self.events.emit(
                target.pod.ref,
                WARNING,
                "SliceRefused",
                f"container {target.container.name}: {refused}",
            )
            raise

    def _request(self, target: Target[SliceGrant]) -> SliceRequest:
        request = parse_container(target.container.name, target.container.limits)
        if isinstance(request, SliceRequest):
            return request
        if isinstance(request, RefusedRequest):
            raise RequestRefused.for_request(request.reason, request.message())
        raise RequestRefused(
            AllocateRefusal.BAD_REQUEST,
            f'container "{shorten(target.container.name)}" requests no slice',
        )

    def _choose(
        self, target: Target[SliceGrant], request: SliceRequest, listed: Sequence[ListedPod]
    ) -> tuple[SliceCard, int, int, str]:
        try:
            view = self.view(listed)
        except SlicesUnreadable as exc:
            raise RequestRefused(
                AllocateRefusal.SLICES_UNREADABLE,
                f"no slice created: the node's slices cannot be read ({exc}); the plugin acts "
                "on no partial view. Check the driver (hy-smi virtual -show-vdevice-info)",
            ) from exc
        cards = view.offered()
        reservation = pod_reservation(target.pod.annotations, self.node_name)
        if reservation is not None:
            return self._at_reservation(target, request, reservation, cards, view.keys)
        choice = choose_slice_card(cards, request, self.policy)
        if choice is not None:
            card, cus, mib = choice
            return card, cus, mib, view.keys[card.index]
        if cards and _too_large(cards, request):
            largest = max(cards, key=lambda c: (c.memory_mib, c.compute_units))
            raise RequestRefused(
                AllocateRefusal.SLICE_TOO_LARGE,
                f"no card of this node can hold a slice of {request.describe()}; the largest "
                f"has {largest.memory_mib} MiB and {largest.compute_units} compute units. "
                "Request a smaller slice",
            )
        raise RequestRefused(
            AllocateRefusal.NO_CAPACITY,
            f"no card has room for a slice of {request.describe()}: {room_text(cards)}. Wait "
            "for slices to be released or request a smaller one",
        )

    def _at_reservation(
        self,
        target: Target[SliceGrant],
        request: SliceRequest,
        reservation: Reservation,
        cards: Sequence[SliceCard],
        keys: dict[int, str],
    ) -> tuple[SliceCard, int, int, str]:
        """The card and size the extender reserved for the container, created as written or
        refused: another card would break its count of what the node still holds."""
        name = target.container.name
        entry = reservation.slices.get(name)
        if entry is None:
            raise bad_reservation(
                f"it has no slice entry for container {shorten(name)!r} (it reserves "
                f"containers: {show_names(reservation.names())})"
            )
        asked_cus = request.compute_units
        if entry.memory_mib != request.memory_mib or asked_cus not in (None, entry.compute_units):
            raise bad_reservation(
                f"it reserves a slice of {entry.memory_mib} MiB and {entry.compute_units} "
                f"compute units for container {shorten(name)!r}, which requests "
                f"{request.describe()}"
            )
        where = (
            f"the slice of {entry.compute_units} compute units and {entry.memory_mib} MiB "
            f"reserved on card {entry.card} for container {shorten(name)!r}"
        )
        card = next((c for c in cards if keys.get(c.index) == entry.card), None)
        if card is None:
            raise reservation_taken(
                f"{where} cannot be created: this node offers no card with that address for "
                "slices (absent, unkeyed or held whole)",
                "slice",
            )
        if not card.fits(entry.compute_units, entry.memory_mib):
            raise reservation_taken(f"{where} cannot be created: {room_text([card])}", "slice")
        return card, entry.compute_units, entry.memory_mib, entry.card

    def _create(
        self,
        target: Target[SliceGrant],
        request: SliceRequest,
        device_ids: Sequence[str],
        listed: Sequence[ListedPod],
    ) -> pb.ContainerAllocateResponse:
        card, cus, mib, pci = self._choose(target, request, listed)
        pod, container = target.pod, target.container
        try:
            vdev = self.vdevs.create(card.index, cus, mib)
        except (DmiError, VdevError) as exc:
            # A VdevError leaves what was made alone: it cannot be told to be ours. The next
            # reclaim pass collects a vdev no grant names.
            raise RequestRefused(
                AllocateRefusal.SLICES_UNREADABLE,
                f"creating a slice of {cus} compute units and {mib} MiB on card {card.index} "
                f"failed: {exc}",
            ) from exc
        self._step("vdev_created")
        grant: SliceGrant | None = None
        mark = ""
        try:
            if vdev.conf is None:
                raise RuntimeError(f"the new vdev {vdev.id} cannot be given: {vdev.conf_problem}")
            if vdev.conf.pci != pci:
                raise RuntimeError(
                    f"the driver wrote PciBusId {vdev.conf.pci} for vdev {vdev.id} on card "
                    f"{card.index}, whose device key is {pci}"
                )
            mark = mark_name(pod.uid, container.name, card.index, vdev.id)
            grant = SliceGrant(
                vdev_id=vdev.id,
                card_pci=pci,
                card_index=card.index,
                compute_units=vdev.compute_units,
                memory_mib=vdev.memory_mib,
                cu_mask=hex(vdev.conf.cu_mask),
                conf_path=vdev.conf_path,
                mark_name=mark,
                namespace=pod.namespace,
                pod_name=pod.name,
                pod_uid=pod.uid,
                containers=(container.name,),
                device_ids=tuple(device_ids),
                created_at=time.time(),
            )
            self.store.write(grant)
            self._step("slice_grant_written")
            self.marks.write(mark)
            self._step("mark_written")
            self._annotate(grant)
            self._step("slice_annotated")
            response = self._response(grant)
        except BaseException as exc:
            self._roll_back(vdev, grant, mark, exc)
            if isinstance(exc, GrantError | MarkError):
                raise RequestRefused(
                    AllocateRefusal.GRANTS_STORE, f"no slice given: {exc}"
                ) from exc
            raise
        self.metrics.allocations.labels(SLICE_METRIC_LABEL).inc()
        self.events.emit(
            pod.ref,
            NORMAL,
            "SliceGranted",
            f"container {container.name}: slice {grant.label}, {grant.compute_units} compute "
            f"units, {grant.memory_mib} MiB",
        )
        log.info(
            "slice granted",
            extra={
                "pod": pod.key,
                "container": container.name,
                "card": pci,
                "vdev": vdev.id,
                "compute_units": vdev.compute_units,
                "memory_mib": vdev.memory_mib,
            },
        )
        return response

    def _roll_back(
        self, vdev: Vdev, grant: SliceGrant | None, mark: str, cause: BaseException
    ) -> None:
        log.error(
            "slice allocation failed after create; destroying the vdev again",
            extra={"vdev": vdev.id, "card": vdev.card, "error": str(cause)},
        )
        try:
            # We made it moments ago under the node lock, so it is ours.
            self.vdevs.destroy(vdev.id)
        except DmiError as exc:
            # Keep the grant and the mark: the reclaimer destroys it once the pod is gone.
            cause.add_note(f"rollback failed, left for the reclaimer: {exc}")
            return
        try:
            self.marks.remove(mark)
            if grant is not None:
                self.store.remove(grant)
        except (MarkError, GrantError, OSError) as exc:
            # The grant now names no live vdev: the reclaimer drops it with its mark.
            cause.add_note(f"cleanup after the rollback failed, left for the reclaimer: {exc}")

    def _annotate(self, grant: SliceGrant) -> None:
        container = grant.containers[0]
        value = json.dumps(
            {
                "card": grant.card_pci,
                "container": container,
                "slice": grant.vdev_id,
                "compute_units": grant.compute_units,
                "memory_mib": grant.memory_mib,
            },
            sort_keys=True,
        )
        self.kube.annotate_pod(
            grant.namespace, grant.pod_name, grant.pod_uid, {annotation_key(container): value}
        )

    def _answer_again(self, grant: SliceGrant) -> pb.ContainerAllocateResponse:
        """A retried call for the same container: the same vdev, never another."""
        try:
            live = self.vdevs.read().vdevs
        except (DmiError, VdevError) as exc:
            raise RequestRefused(
                AllocateRefusal.SLICES_UNREADABLE,
                f"the slices cannot be read to answer again for {grant.label}: {exc}",
            ) from exc
        if not any(grant.matches(v) for v in live):
            raise RequestRefused(
                AllocateRefusal.STALE_GRANT,
                f"the slice granted to pod {grant.pod_key} ({grant.label}) no longer exists "
                "(the node rebooted or it was destroyed); delete the pod so it is scheduled "
                "again",
            )
        return self._response(grant)

    def _response(self, grant: SliceGrant) -> pb.ContainerAllocateResponse:
        return slice_response(
            self.host_root, self.answer_root, grant.card_pci, grant.conf_path, grant.vdev_id
        )
