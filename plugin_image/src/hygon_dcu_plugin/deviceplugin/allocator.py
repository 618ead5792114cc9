"""Allocate: carve one partition for the container being admitted.

Order of events, all under the node lock (identify-and-reserve is one step):
identify the container (PodResources List + the API server), read its request from its
limits (a profile, or a size), decide card, profile and placement from live driver state,
create GI + CI under the card's lock, write the partition grant (fsync) BEFORE answering,
annotate the pod, check the conf file is still there, answer. Any failure after the create
destroys the instance again.

Where the placement comes from (``_decide``): the scheduler extender's reservation on the pod
when there is one (``reservation.py``, docs/dev/extender.md), carved exactly as written or
refused, never moved; else the placement policy (``placement.choose``), for a size request
on the smallest covering profile that still has a free placement.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Sequence

from ansible_collections.hygon.dcu.plugins.module_utils.cards import Card, Profile
from ansible_collections.hygon.dcu.plugins.module_utils.hostpath import host_path
from ansible_collections.hygon.dcu.plugins.module_utils.hydmi import (
    INSUFFICIENT_RESOURCES,
    HydmiError,
)
from ansible_collections.hygon.dcu.plugins.module_utils.node import Checkpoint, Instance, Node
from ansible_collections.hygon.dcu.plugins.module_utils.registry import PCI_ADDRESS, card_of

from hygon_dcu_plugin.deviceplugin.advertise import free_capacity
from hygon_dcu_plugin.deviceplugin.api import deviceplugin_v1beta1_pb2 as pb
from hygon_dcu_plugin.deviceplugin.events import NORMAL, WARNING, PodEvents
from hygon_dcu_plugin.deviceplugin.grants import Grant, GrantError, GrantStore, StoreProblem
from hygon_dcu_plugin.deviceplugin.identify import Target, identify_admitted
from hygon_dcu_plugin.deviceplugin.locks import Locks
from hygon_dcu_plugin.deviceplugin.metrics import Metrics
from hygon_dcu_plugin.deviceplugin.pod_reservation import (
    bad_reservation,
    pod_reservation,
    reservation_taken,
)
from hygon_dcu_plugin.deviceplugin.podresources import PodLister
from hygon_dcu_plugin.deviceplugin.refused import RequestRefused
from hygon_dcu_plugin.deviceplugin.response import partition_response, whole_card_response
from hygon_dcu_plugin.deviceplugin.slice_allocator import SliceAllocator
from hygon_dcu_plugin.host import card_key
from hygon_dcu_plugin.kube import ContainerSpec, KubeApi
from hygon_dcu_plugin.placement import (
    PACK,
    CardView,
    Choice,
    choose,
    choose_size,
    size_candidates,
    slices_of,
)
from hygon_dcu_plugin.refusal import AllocateRefusal
from hygon_dcu_plugin.request import (
    PartitionRequest,
    ProfileRequest,
    RefusedRequest,
    SizeRequest,
    parse_container,
)
from hygon_dcu_plugin.reservation import Reserved
from hygon_dcu_plugin.shown import listing, shorten, show_names
from hygon_dcu_plugin.vocabulary import (
    FAMILY,
    PROFILE_PREFIX,
    SLICED,
    WHOLE_CARD,
    annotation_key,
)

log = logging.getLogger(__name__)


def request_for(container: ContainerSpec) -> PartitionRequest:
    """The partition the container's limits ask for (a profile, or a size), or RequestRefused
    with the request model's reason and message.

    The admission webhook refuses the same containers up front with the same model; reading
    again here keeps a pod created while the webhook was down from getting a half-right
    partition.
    """
    request = parse_container(container.name, container.limits)
    if isinstance(request, ProfileRequest | SizeRequest):
        return request
    if isinstance(request, RefusedRequest):
        raise RequestRefused.for_request(request.reason, request.message())
    # identify() serves only containers whose limits name the family, so this is a bug.
    raise RequestRefused(
        AllocateRefusal.BAD_REQUEST, f'container "{shorten(container.name)}" requests no partition'
    )


def offered_views(cards: Sequence[Card]) -> list[CardView[Profile]]:
    """Healthy cards with a device key (host.card_key; with the mode on, the registry's dev<N>
    only), as the placement policy sees them. A card without one is not offered, since its
    lock, its grants and the reclaimer all key on the address; card_key logs it.
    """
    return [
        CardView(c.index, pci, c.slice_count, c.profiles, c.occupied)
        for c in cards
        if c.healthy and (pci := card_key(c)) is not None
    ]


def describe_free(views: Sequence[CardView]) -> str:
    free = free_capacity(views)
    parts = [f"{r[len(PROFILE_PREFIX) :]}: {n}" for r, n in sorted(free.items()) if r != FAMILY]
    return f"{free.get(FAMILY, 0)} partitions ({', '.join(parts) or 'no profiles'})"


def _figures(profile: Profile) -> str:
    return f"{profile.memory_mib} MiB, {profile.cu_count} compute units"


def _by_profile(views: Sequence[CardView[Profile]], name: str, policy: str) -> Choice[Profile]:
    offered = sorted({p.name for v in views for p in v.profiles})
    if name not in offered:
        raise RequestRefused(
            AllocateRefusal.UNKNOWN_PROFILE,
            f"profile {name!r} is not offered on this node; offered: "
            f"{', '.join(offered) or 'none (is partition mode on?)'}",
        )
    choice = choose(views, name, policy)
    if choice is None:
        raise RequestRefused(
            AllocateRefusal.NO_CAPACITY,
            f"no free {name} partition on this node; free capacity: "
            f"{describe_free(views)}. Wait for partitions to be released or request a "
            "profile that still fits",
        )
    return choice


def _by_size(
    views: Sequence[CardView[Profile]], request: SizeRequest, policy: str
) -> Choice[Profile]:
    """The smallest covering profile that has a free placement (the extender's rule too,
    docs/dev/extender.md), placed by the policy among the cards where that profile covers."""
    names = size_candidates(views, request)
    if not names:
        offered = {p.name: p for v in views for p in v.profiles}
        shown = ", ".join(f"{n} ({_figures(p)})" for n, p in sorted(offered.items()))
        raise RequestRefused(
            AllocateRefusal.UNKNOWN_PROFILE,
            f"no profile on this node has at least {request.describe()}; offered: "
            f"{shown or 'none (is partition mode on?)'}. Request a smaller size",
        )
    choice = choose_size(views, request, policy)
    if choice is not None:
        return choice
    raise RequestRefused(
        AllocateRefusal.NO_CAPACITY,
        f"no free partition of at least {request.describe()} on this node (tried "
        f"{', '.join(names)}); free capacity: {describe_free(views)}. Wait for partitions to "
        "be released or request a size that still fits",
    )


def _store_refused(problem: StoreProblem | str) -> RequestRefused:
    """The grants store cannot be trusted: a partition granted now could end up in no store
    (or the wrong one) and be collected as an orphan while its pod runs."""
    why = problem.explain() if isinstance(problem, StoreProblem) else problem
    return RequestRefused(
        AllocateRefusal.GRANTS_STORE, f"no partition carved: the grants store is not usable: {why}"
    )


class Allocator:
    def __init__(
        self,
        node: Node,
        store: GrantStore,
        kube: KubeApi,
        lister: PodLister,
        *,
        locks: Locks,
        metrics: Metrics,
        host_root: str = "/",
        answer_root: str = "/",
        node_name: str | None = None,
        policy: str = PACK,
        on_change: Callable[[], None] = lambda: None,
        checkpoint: Checkpoint | None = None,
        advertised: Callable[[str], set[str]] = lambda resource: set(),
        events: PodEvents | None = None,
        slices: SliceAllocator | None = None,
    ) -> None:
        self.node = node
        self.slices = slices  # None: this node serves no slices (partition mode on)
        self.events = events if events is not None else PodEvents(kube)
        self.advertised = advertised  # resource -> device ids currently advertised
        self.store = store
        self.kube = kube
        self.lister = lister
        self.locks = locks
        self.metrics = metrics
        self.host_root = host_root
        self.answer_root = answer_root
        self.node_name = node_name
        self.policy = policy
        self.on_change = on_change
        self.checkpoint = checkpoint

    def _step(self, name: str) -> None:
        if self.checkpoint is not None:
            self.checkpoint(name)

    # entry point -----------------------------------------------------------------------
    def allocate(self, resource: str, device_ids: Sequence[str]) -> pb.ContainerAllocateResponse:
        started = time.monotonic()
        try:
            if resource == WHOLE_CARD:
                with self.locks.node():
                    return self._whole_card(device_ids)
            if resource == SLICED:
                if self.slices is None:
                    raise RequestRefused(
                        AllocateRefusal.BAD_REQUEST,
                        f"{SLICED}: this node serves no slices (partition mode is on)",
                    )
                with self.locks.node():
                    return self.slices.allocate(device_ids)
            if resource != FAMILY:
                # Profile resources only carry the count the scheduler needs; the partition
                # is carved by the family's Allocate.
                return pb.ContainerAllocateResponse()
            if len(device_ids) != 1:
                raise RequestRefused(
                    AllocateRefusal.TOO_MANY,
                    f"{FAMILY}: {len(device_ids)} partitions requested for one container; a "
                    f"container sees exactly one partition, so set {FAMILY}: 1 and use one "
                    "container per partition",
                )
            with self.locks.node():
                response = self._partition(device_ids)
            return response
        except RequestRefused as refused:
            self.metrics.allocation_failures.labels(refused.reason.value).inc()
            log.warning(
                "Allocate refused",
                extra={"resource": resource, "reason": refused.reason.value, "why": str(refused)},
            )
            raise
        except Exception as exc:
            self.metrics.allocation_failures.labels(type(exc).__name__).inc()
            raise
        finally:
            self.metrics.allocate_seconds.observe(time.monotonic() - started)
            self.on_change()

    # the family ------------------------------------------------------------------------
    def _partition(self, device_ids: Sequence[str]) -> pb.ContainerAllocateResponse:
        grants = self.store.load()
        if grants.problem is not None:
            raise _store_refused(grants.problem)
        if grants.unreadable:
            # Placement reads live driver state, so a bad grant cannot cause an overlap;
            # it only blocks orphan collection (see the reclaimer).
            log.error("unreadable partition grants", extra={"grants": grants.unreadable})
        target, _listed = identify_admitted(
            FAMILY,
            device_ids,
            grants.grants,
            lister=self.lister,
            kube=self.kube,
            node_name=self.node_name,
        )
        try:
            if target.reuse is not None:
                return self._answer_again(target, target.reuse, device_ids)
            request = request_for(target.container)
            return self._create(target, request, device_ids, grants.grants)
        except RequestRefused as refused:
            self.events.emit(
                target.pod.ref,
                WARNING,
                "PartitionRefused",
                f"container {target.container.name}: {refused}",
            )
            raise

    def _create(
        self,
        target: Target[Grant],
        request: PartitionRequest,
        device_ids: Sequence[str],
        grants: Sequence[Grant],
    ) -> pb.ContainerAllocateResponse:
        choice, reserved = self._decide(target, request, grants)
        profile_name = choice.profile.name
        pod, container = target.pod, target.container
        with self.locks.card(choice.card.pci):
            try:
                instance = self.node.create(
                    choice.card.index,
                    choice.profile,
                    choice.placement,
                    checkpoint=self.checkpoint,
                )
            except HydmiError as exc:
                self._explain_poison(choice.card.index, exc)
                raise
            written: Grant | None = None
            try:
                if instance.uuid is None or instance.conf_path is None:
                    raise RuntimeError(f"created instance has no uuid/conf file: {instance}")
                if not instance.pci:
                    raise RuntimeError(
                        f"the registry names no PCI address for card "
                        f"{instance.card_index} after the create"
                    )
                grant = Grant(
                    uuid=instance.uuid,
                    card_pci=instance.pci,
                    card_index=choice.card.index,
                    gpu_instance_id=instance.gpu_instance_id,
                    compute_instance_id=instance.compute_instance_id or 0,
                    profile=profile_name,
                    placement_start=instance.placement.start,
                    placement_size=instance.placement.size,
                    conf_path=instance.conf_path,
                    namespace=pod.namespace,
                    pod_name=pod.name,
                    pod_uid=pod.uid,
                    containers=(container.name,),
                    device_ids=tuple(device_ids),
                    created_at=time.time(),
                )
                self.store.write(grant)
                written = grant
                self._step("grant_written")
                self._annotate(grant, container.name)
                self._step("annotated")
                response = self._response(grant)
            except BaseException as exc:
                self._roll_back(instance, written, exc)
                if isinstance(exc, GrantError):
                    raise self._store_gone(exc) from exc
                raise
        self.metrics.allocations.labels(profile_name).inc()
        self.events.emit(
            pod.ref,
            NORMAL,
            "PartitionGranted",
            f"container {container.name}: partition {profile_name} on card {grant.card_pci} "
            f"(slices {grant.placement_start}:{grant.placement_size}, uuid {grant.uuid})"
            f"{', as the scheduler extender reserved it' if reserved else ''}",
        )
        log.info(
            "partition granted",
            extra={
                "pod": pod.key,
                "container": container.name,
                "profile": profile_name,
                "card": grant.card_pci,
                "placement": f"{grant.placement_start}:{grant.placement_size}",
                "uuid": grant.uuid,
                "reserved": reserved,
            },
        )
        return response

    # where the partition goes ----------------------------------------------------------
    def _decide(
        self, target: Target[Grant], request: PartitionRequest, grants: Sequence[Grant]
    ) -> tuple[Choice[Profile], bool]:
        """Card, profile and placement for the container, and whether a reservation said so.

        A reservation is carved as written or refused: moving it elsewhere would break the
        extender's count of what the node still holds (docs/dev/extender.md)."""
        cards = self.node.cards()
        views = offered_views(cards)
        reserved = self._reserved(target, request)
        if reserved is not None:
            choice = self._at_reservation(
                target, request, reserved, cards=cards, views=views, grants=grants
            )
            return choice, True
        if isinstance(request, ProfileRequest):
            return _by_profile(views, request.profile, self.policy), False
        return _by_size(views, request, self.policy), False

    def _reserved(self, target: Target[Grant], request: PartitionRequest) -> Reserved | None:
        """This container's entry of the pod's reservation, None without one, or refused
        with BAD_RESERVATION when it cannot be trusted."""
        container = target.container.name
        reservation = pod_reservation(target.pod.annotations, self.node_name)
        if reservation is None:
            return None
        entry = reservation.containers.get(container)
        if entry is None:
            raise bad_reservation(
                f"it has no partition entry for container {shorten(container)!r} (it reserves "
                f"containers: {show_names(reservation.names())})"
            )
        if isinstance(request, ProfileRequest) and entry.profile != request.profile:
            raise bad_reservation(
                f"it reserves profile {entry.profile} for container {shorten(container)!r}, "
                f"which requests {request.profile}"
            )
        return entry

    def _at_reservation(
        self,
        target: Target[Grant],
        request: PartitionRequest,
        reserved: Reserved,
        *,
        cards: Sequence[Card],
        views: Sequence[CardView[Profile]],
        grants: Sequence[Grant],
    ) -> Choice[Profile]:
        where = (
            f"the slices {reserved.start}:{reserved.size} ({reserved.profile}) reserved on "
            f"card {reserved.card} for container {shorten(target.container.name)!r}"
        )
        card = next((v for v in views if v.pci == reserved.card), None)
        if card is None:
            known = next((c for c in cards if c.pci == reserved.card), None)
            why = (
                "no card of this node has that address"
                if known is None
                else f"the card is not offered ({known.error or 'no device key'})"
            )
            raise reservation_taken(f"{where} cannot be carved: {why}")
        profile = card.profile(reserved.profile)
        if profile is None:
            offered = ", ".join(p.name for p in card.profiles) or "none"
            raise reservation_taken(
                f"{where} cannot be carved: the card offers no profile {reserved.profile} "
                f"(it offers: {offered})"
            )
        if isinstance(request, SizeRequest) and not request.covers(profile):
            raise bad_reservation(
                f"it reserves {profile.name} ({_figures(profile)}) for container "
                f"{shorten(target.container.name)!r}, which requests at least "
                f"{request.describe()}"
            )
        placement = next(
            (p for p in profile.placements if (p.start, p.size) == (reserved.start, reserved.size)),
            None,
        )
        if placement is None:
            legal = " ".join(f"{p.start}:{p.size}" for p in profile.placements) or "none"
            raise bad_reservation(
                f"{reserved.start}:{reserved.size} is not a placement of {profile.name} on card "
                f"{card.pci} (legal: {legal})"
            )
        overlap = card.occupied & slices_of(placement.start, placement.size)
        if overlap:
            raise reservation_taken(
                f"{where} are taken: slice{'s' if len(overlap) > 1 else ''} "
                f"{', '.join(map(str, sorted(overlap)))} "
                f"{self._holders(card, overlap, grants)}"
            )
        return Choice(card, profile, placement)

    def _holders(
        self, card: CardView[Profile], overlap: frozenset[int], grants: Sequence[Grant]
    ) -> str:
        """Who holds the overlapping slices, as a message says it."""
        try:
            live = self.node.instances(card.index)
        except HydmiError as exc:
            return f"(the card's instances cannot be read: {exc})"
        owners: list[str] = []
        for instance in live:
            span = slices_of(instance.placement.start, instance.placement.size)
            if not span & overlap:
                continue
            grant = next(
                (g for g in grants if g.owns(card.pci, instance.gpu_instance_id, instance.uuid)),
                None,
            )
            what = f"{instance.placement.start}:{instance.placement.size}"
            owners.append(
                f"the partition of pod {grant.pod_key} ({grant.profile} at {what})"
                if grant is not None
                else f"an instance at {what} that no grant of this plugin owns (carved by hand?)"
            )
        unique = sorted(set(owners))
        return "held by " + listing(unique[:3], len(unique)) if unique else "held"

    def _explain_poison(self, card_index: int, exc: HydmiError) -> None:
        """A directory on a ci/ name makes the driver refuse that id with a bare
        INSUFFICIENT_RESOURCES: name the directory and the fix instead."""
        if exc.code != INSUFFICIENT_RESOURCES:
            return
        poison = [f for f in self.node.registry().poison if card_of(f.path) == card_index]
        if not poison:
            return
        paths = ", ".join(self.node.host_path(f.path) for f in poison)
        raise RequestRefused(
            AllocateRefusal.POISONED_REGISTRY,
            f"the driver refused a partition on card {card_index} because {paths} "
            "is a directory where the driver writes an instance file (a container runtime "
            "creates one when the file it was to bind is missing; it blocks that instance id "
            "for good). The plugin removes empty ones on its next pass; look inside this one, "
            "then remove it (rmdir or rm -r) and create the pod again",
        ) from exc

    def _roll_back(self, instance: Instance, grant: Grant | None, cause: BaseException) -> None:
        log.error(
            "allocation failed after create; destroying the instance again",
            extra={
                "card": instance.card_index,
                "gpu_instance": instance.gpu_instance_id,
                "error": str(cause),
            },
        )
        try:
            # No uuid guard: we created it moments ago and still hold the card lock, and the
            # failure may be exactly that its conf file (the uuid's only home) went missing.
            self.node.destroy(instance.card_index, instance.gpu_instance_id)
        except Exception as exc:
            # Keep the grant then: the reclaimer destroys it once the pod is gone.
            cause.add_note(f"rollback failed, left for the reclaimer: {exc}")
            return
        if grant is not None:
            self.store.remove(grant)

    def _store_gone(self, exc: GrantError) -> RequestRefused:
        """The store went away between the check at the start and the write."""
        return _store_refused(self.store.check() or f"writing the grant failed: {exc}")

    def _annotate(self, grant: Grant, container: str) -> None:
        value = json.dumps(
            {
                "card": grant.card_pci,
                "container": container,
                "profile": grant.profile,
                "placement": f"{grant.placement_start}:{grant.placement_size}",
                "uuid": grant.uuid,
            },
            sort_keys=True,
        )
        self.kube.annotate_pod(
            grant.namespace,
            grant.pod_name,
            grant.pod_uid,
            {annotation_key(container): value},
        )

    def _answer_again(
        self, target: Target[Grant], grant: Grant, device_ids: Sequence[str]
    ) -> pb.ContainerAllocateResponse:
        """Same partition again: a retried call, or an app container given the device id of
        an init container of the same pod. Never resolved to a different instance."""
        index = next((c.index for c in self.node.cards() if c.pci == grant.card_pci), None)
        try:
            on_card = [] if index is None else self.node.instances(index)
        except HydmiError as exc:
            raise RequestRefused(
                AllocateRefusal.CARD_UNHEALTHY,
                f"the card {grant.card_pci} holding this container's partition fails queries "
                f"({exc}); delete the pod so it is scheduled again",
            ) from exc
        live = [
            i
            for i in on_card
            if i.gpu_instance_id == grant.gpu_instance_id and i.uuid == grant.uuid
        ]
        if not live:
            raise RequestRefused(
                AllocateRefusal.STALE_GRANT,
                f"the partition granted to pod {grant.pod_key} (uuid {grant.uuid}) no longer "
                "exists (the node rebooted or it was destroyed); delete the pod so it is "
                "scheduled again",
            )
        container = target.container.name
        if container not in grant.containers:
            updated = Grant(
                **{
                    **grant.__dict__,
                    "containers": (*grant.containers, container),
                    "device_ids": tuple(sorted({*grant.device_ids, *device_ids})),
                }
            )
            try:
                self.store.write(updated)
            except GrantError as exc:
                raise self._store_gone(exc) from exc
            self._annotate(updated, container)
            grant = updated
        return self._response(grant)

    def _response(self, grant: Grant) -> pb.ContainerAllocateResponse:
        return partition_response(
            self.host_root, self.answer_root, grant.card_pci, grant.conf_path, grant.uuid
        )

    # mode off ----------------------------------------------------------------------------
    def _whole_card(self, device_ids: Sequence[str]) -> pb.ContainerAllocateResponse:
        pcis = [self._card_pci(d) for d in device_ids]
        if not pcis:
            raise RequestRefused(
                AllocateRefusal.BAD_REQUEST, f"{WHOLE_CARD}: no device id in the request"
            )
        if self.slices is not None:
            # Under the node lock: no slice can be created on these cards until we answer.
            sliced = self.slices.slices_on(pcis)
            if sliced:
                raise RequestRefused(
                    AllocateRefusal.CARD_SLICED,
                    f"{WHOLE_CARD}: the card is shared by logical slices "
                    f"({', '.join(sliced[:4])}), so it cannot be given whole until they are "
                    "released; delete the pod so it is scheduled again",
                )
        return whole_card_response(self.host_root, self.answer_root, pcis)

    def _card_pci(self, device_id: str) -> str:
        """hygon.com/dcu ids are PCI addresses (see advertise.whole_card_plan); only ids
        this plugin advertised are accepted, and only then joined into a path."""
        if device_id not in self.advertised(WHOLE_CARD):
            raise RequestRefused(
                AllocateRefusal.BAD_REQUEST,
                f"{WHOLE_CARD}: device {device_id[:64]!r} was never advertised by this plugin",
            )
        if not PCI_ADDRESS.fullmatch(device_id) or not os.path.isdir(
            host_path(self.host_root, f"/sys/bus/pci/devices/{device_id}")
        ):
            raise RequestRefused(
                AllocateRefusal.BAD_REQUEST,
                f"{WHOLE_CARD}: device {device_id!r} is not a PCI address here",
            )
        return device_id
