"""The running plugin: wiring at start (mode, resource set, allocator, reclaimer, servers),
refreshing the device lists the kubelet sees, and the threads (gRPC servers, reclaimer, pod
watch, geometry publisher). What the lists hold is decided elsewhere: ``whole_cards`` (mode
off), ``held`` and ``advertise.partition_plan`` (mode on); what the geometry Lease holds in
``geometry`` (docs/dev/extender.md).

The mode is read once at start: a running plugin does not notice a mode change (the driver
does not tell it), which is why the node state machine restarts it after every switch.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable

from ansible_collections.hygon.dcu.plugins.module_utils.hydmi import HydmiError
from ansible_collections.hygon.dcu.plugins.module_utils.node import Checkpoint, ModeSource, Node
from ansible_collections.hygon.dcu.plugins.module_utils.vdevs import Vdevs

from hygon_dcu_plugin.config import Settings, kube_name_problem
from hygon_dcu_plugin.deviceplugin.advertise import (
    Device,
    free_capacity,
    healthy_count,
    partition_plan,
    slice_plan,
)
from hygon_dcu_plugin.deviceplugin.allocator import Allocator, offered_views
from hygon_dcu_plugin.deviceplugin.board import DeviceBoard
from hygon_dcu_plugin.deviceplugin.events import PodEvents
from hygon_dcu_plugin.deviceplugin.grants import GrantStore
from hygon_dcu_plugin.deviceplugin.held import held_slice_tokens, held_tokens
from hygon_dcu_plugin.deviceplugin.locks import Locks
from hygon_dcu_plugin.deviceplugin.metrics import LabelKey, Metrics
from hygon_dcu_plugin.deviceplugin.node_labeler import NodeLabeler
from hygon_dcu_plugin.deviceplugin.podresources import PodLister, PodResourcesError
from hygon_dcu_plugin.deviceplugin.publisher import GeometryPublisher
from hygon_dcu_plugin.deviceplugin.reclaimer import Reclaimer
from hygon_dcu_plugin.deviceplugin.service import PluginServers
from hygon_dcu_plugin.deviceplugin.slice_allocator import SliceAllocator, SlicesUnreadable
from hygon_dcu_plugin.deviceplugin.slice_reclaimer import SlicePassReport, SliceReclaimer
from hygon_dcu_plugin.deviceplugin.slice_view import (
    SliceView,
    slice_occupancy,
    slice_room,
    sliced_geometry,
)
from hygon_dcu_plugin.deviceplugin.whole_cards import plan_whole_cards
from hygon_dcu_plugin.geometry import Geometry, GeoSliceCard, of_cards
from hygon_dcu_plugin.kube import KubeApi
from hygon_dcu_plugin.vocabulary import FAMILY, SLICED, WHOLE_CARD, profile_resource

log = logging.getLogger(__name__)


class Runtime:
    def __init__(
        self,
        settings: Settings,
        node: Node,
        kube: KubeApi,
        lister: PodLister,
        checkpoint: Checkpoint | None = None,
    ) -> None:
        self.settings = settings
        self.node = node
        self.kube = kube
        self.lister = lister
        self.metrics = Metrics()
        self.board = DeviceBoard()
        self.store = GrantStore(settings.grants_dir)
        self.store.remove_temporaries()
        self.locks = Locks(settings.lock_dir)
        self._refresh_lock = threading.Lock()
        # Refresh tickets: every call takes one; a refresh that reads the node after a ticket
        # was taken covers it, so callers queued behind it need not recompute (see refresh).
        self._tickets = threading.Lock()
        self._requested = 0
        self._covered = 0
        self.library_usable = False
        self.partitioned = self._read_mode()
        self.metrics.set_mode(self.partitioned)  # read once: the plugin serves this mode
        self.publisher = self._publisher()  # before anything can call refresh
        self.events = PodEvents(kube)
        # Logical slices: served with the mode off only (the driver refuses them with it on).
        self.vdevs = Vdevs(settings.host_root)
        # The node's slices as the last plan read them (the metrics); None when unreadable.
        self._slice_view: SliceView | None = None
        self.slices = (
            None
            if self.partitioned
            else SliceAllocator(
                node,
                self.vdevs,
                self.store,
                kube,
                lister,
                locks=self.locks,
                metrics=self.metrics,
                events=self.events,
                host_root=settings.host_root,
                answer_root=settings.answer_root,
                node_name=settings.node_name,
                policy=settings.policy,
                checkpoint=checkpoint,
            )
        )
        self.allocator = Allocator(
            node,
            self.store,
            kube,
            lister,
            locks=self.locks,
            metrics=self.metrics,
            host_root=settings.host_root,
            answer_root=settings.answer_root,
            node_name=settings.node_name,
            policy=settings.policy,
            on_change=self.refresh,
            checkpoint=checkpoint,
            advertised=self._advertised,
            events=self.events,
            slices=self.slices,
        )
        self.reclaimer = Reclaimer(
            node,
            self.store,
            kube,
            locks=self.locks,
            metrics=self.metrics,
            grace_seconds=settings.grace_seconds,
            on_change=self.refresh,
            checkpoint=checkpoint,
            events=self.events,
            delete_pods_with_lost_partitions=settings.delete_pods_with_lost_partitions,
        )
        self.slice_reclaimer = SliceReclaimer(
            self.vdevs,
            self.store,
            pod_done=self.reclaimer.pod_done,
            locks=self.locks,
            metrics=self.metrics,
            events=self.events,
            host_root=settings.host_root,
            checkpoint=checkpoint,
        )
        if self.slices is not None:
            self.reclaimer.slices_without_grant = self.slice_reclaimer.without_grant
        # Created (or marked) only when no live partition can lack its grant; else it stays
        # as found, and the reclaimer's passes say why (docs/dev/runtime.md).
        self.reclaimer.settle_store()
        self.resources = self._resources()
        self.servers = PluginServers(
            settings.device_plugin_dir,
            self.resources,
            self.board,
            self.allocator.allocate,
            on_registered=self._registered,
        )
        self.registered = False
        self.stop_event = threading.Event()
        self._threads: list[threading.Thread] = []

    def _read_mode(self) -> bool:
        state = self.node.mode()
        if state.source is not ModeSource.LIBRARY:
            log.error(
                "management library unusable; serving no partitions", extra={"error": state.error}
            )
            return False
        self.library_usable = True
        log.info("partition mode read at start", extra={"mode": bool(state.current)})
        return bool(state.current)

    def _resources(self) -> list[str]:
        resources = [WHOLE_CARD, FAMILY, SLICED]
        if self.partitioned:
            try:
                names = sorted({p.name for c in self.node.cards() for p in c.profiles})
            except HydmiError as exc:
                log.error("cannot discover profiles", extra={"error": str(exc)})
                names = []
            resources += [profile_resource(n) for n in names]
            self.metrics.known_profiles(names)
        return resources

    def _publisher(self) -> GeometryPublisher | None:
        namespace, node = self.settings.geometry_namespace, self.settings.node_name
        if not namespace or not node:
            log.warning(
                "no geometry Lease published: the scheduler extender cannot place partitions "
                "on this node",
                extra={"missing": "geometry_namespace" if node else "node_name"},
            )
            return None
        problem = kube_name_problem(node, subdomain=True)
        if problem:
            log.error(
                "no geometry Lease published: the node name cannot name a Lease; the scheduler "
                "extender cannot place partitions on this node",
                extra={"node": node[:80], "error": problem},
            )
            return None
        holder = socket.gethostname()  # the pod's name in a pod
        seconds = self.settings.geometry_lease_seconds
        return GeometryPublisher(
            self.geometry,
            lambda text: self.kube.put_geometry_lease(namespace, node, text, holder, seconds),
            renew_seconds=self.settings.geometry_renew_seconds,
        )

    def geometry(self) -> Geometry:
        """What the geometry Lease holds now (the publisher numbers it). Raises when the node
        cannot be read, and then nothing is published."""
        if not self.partitioned:
            if not self.library_usable:
                raise RuntimeError("the management library was unusable at start")
            # Mode off: no card offers partitions; the cards offered for slices.
            return Geometry(0, (), self._sliced_geometry())
        owners = [
            (g.card_pci, g.placement_start, g.placement_size, g.pod_uid) for g in self.store.load()
        ]
        return of_cards(self.node.cards(), owners, 0)

    def _sliced_geometry(self) -> tuple[GeoSliceCard, ...]:
        """Raises when the slices cannot be read (nothing is published then), except on a
        node without the slice library and without a slice conf file: it has none."""
        if self.slices is None:
            return ()
        try:
            view = self.slices.view(self.lister.list())
        except SlicesUnreadable:
            if self.vdevs.library.load_error is not None and not self.vdevs.conf_paths():
                return ()
            raise
        return sliced_geometry(view, self.store.load().slices)

    def _advertised(self, resource: str) -> set[str]:
        devices, _version = self.board.get(resource)
        return {device.id for device in devices}

    def _registered(self, ok: bool) -> None:
        self.registered = ok
        self.metrics.registered.set(1.0 if ok else 0.0)

    # counts ----------------------------------------------------------------------------
    def plan(self) -> dict[str, list[Device]]:
        if self.slices is not None:
            plan = self._plan_mode_off(self.slices)
        elif not self.partitioned:
            plan = plan_whole_cards(self.node, self.settings.host_root)
        else:
            cards = self.node.cards()
            in_use, unlisted = held_tokens(self.store, self.lister)
            plan = partition_plan(offered_views(cards), in_use, unlisted)
        for resource in self.resources:
            plan.setdefault(resource, [])
        return {r: d for r, d in plan.items() if r in self.resources}

    def _plan_mode_off(self, slices: SliceAllocator) -> dict[str, list[Device]]:
        """Whole cards and slices: a card holding a slice is not offered whole, a card held
        whole takes no slice (``slice_view``)."""
        try:
            listed = self.lister.list()
        except PodResourcesError as exc:
            log.warning(
                "PodResources List failed; counting held slices from grants only",
                extra={"error": str(exc)},
            )
            listed = []
        in_use, unlisted = held_slice_tokens(self.store.load().slices, listed)
        try:
            view = slices.view(listed)
        except SlicesUnreadable as exc:
            # Nothing new is offered on a node whose slices cannot be read; held ones stay.
            log.error("cannot read the node's slices", extra={"error": str(exc)})
            self._slice_view = None
            plan = plan_whole_cards(self.node, self.settings.host_root)
            plan[SLICED] = slice_plan(0, in_use, 0)
            return plan
        self._slice_view = view
        plan = plan_whole_cards(self.node, self.settings.host_root, view.sliced(), view.held_whole)
        plan[SLICED] = slice_plan(view.pool(), in_use, view.free_slots() + unlisted)
        return plan

    def refresh(self) -> None:
        """Recompute and publish the device lists; on return they reflect every change made
        before the call. Calls that queue up while one runs share the next computation: it
        starts after all of them asked, so each of their changes is in what it publishes.
        The geometry publisher is woken too (every Allocate and reclaim pass ends here)."""
        if self.publisher is not None:
            self.publisher.notify()
        with self._tickets:
            self._requested += 1
            ticket = self._requested
        with self._refresh_lock:
            if self._covered >= ticket:
                return
            with self._tickets:
                covers = self._requested
            try:
                plan = self.plan()
                self.board.publish(plan)
                self.metrics.advertised.set_all(
                    {(("resource", r),): float(healthy_count(d)) for r, d in plan.items()}
                )
                self._update_node_gauges()
            except Exception:
                # Not covered: the next caller computes again rather than trusting this one.
                log.exception("refreshing the device lists failed")
                return
            self._covered = covers

    def _update_node_gauges(self) -> None:
        """Live instances and free capacity from the driver; partition attribution from the
        grants (bounded by the partitions a node can hold)."""
        info: dict[LabelKey, float] = {}
        loaded = self.store.load()
        for grant in loaded:
            key: LabelKey = (
                ("uuid", grant.uuid),
                ("namespace", grant.namespace),
                ("pod", grant.pod_name),
                ("container", ",".join(grant.containers)),
                ("profile", grant.profile),
                ("card", grant.card_pci),
            )
            info[key] = 1.0
        self.metrics.partition_info.set_all(info)
        self.metrics.slice_info.set_all(
            {
                (
                    ("vdev", str(grant.vdev_id)),
                    ("namespace", grant.namespace),
                    ("pod", grant.pod_name),
                    ("container", grant.containers[0]),
                    ("card", grant.card_pci),
                    ("compute_units", str(grant.compute_units)),
                    ("memory_mib", str(grant.memory_mib)),
                ): 1.0
                for grant in loaded.slices
            }
        )
        view = None if self.partitioned else self._slice_view
        self.metrics.slice_card_free.set_all(
            {
                (("card", pci), ("resource", resource)): float(value)
                for pci, room in (slice_room(view) if view else {}).items()
                for resource, value in room.items()
            }
        )
        if not self.partitioned:
            self.metrics.card_occupancy.set_all(
                {
                    (("card", pci),): share
                    for pci, share in (slice_occupancy(view) if view else {}).items()
                }
            )
            self.metrics.live_instances.set_all({})
            self.metrics.free.set_all({})
            return
        values: dict[LabelKey, float] = {}
        instances = []
        cards = self.node.cards()
        for card in cards:
            if card.healthy:
                instances.extend(self.node.instances(card.index))
        for instance in instances:
            name = instance.profile.name if instance.profile else "unknown"
            by_profile: LabelKey = (("profile", name),)
            values[by_profile] = values.get(by_profile, 0.0) + 1
        self.metrics.live_instances.set_all(values)
        self.metrics.card_occupancy.set_all(
            {
                (("card", card.pci),): len(card.occupied) / card.slice_count
                for card in cards
                if card.healthy and card.pci and card.slice_count > 0
            }
        )
        free = free_capacity(offered_views(cards))
        self.metrics.free.set_all({(("resource", r),): float(n) for r, n in free.items()})

    # threads ---------------------------------------------------------------------------
    def _thread(self, name: str, target: Callable[[], None]) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def start(self) -> None:
        self.refresh()
        if self.publisher is not None:
            self.publisher.start()
        self._thread("grpc", lambda: self.servers.run(self.stop_event))
        if self.partitioned or self.slices is not None:
            one_pass = None if self.partitioned else self.reclaim_slices
            self._thread(
                "reclaim",
                lambda: self.reclaimer.run(self.stop_event, self.settings.resync_seconds, one_pass),
            )
            if self.settings.node_name:
                self._thread(
                    "pod-watch",
                    lambda: self.kube.watch_pods(
                        self.settings.node_name or "", self.reclaimer.pod_event, self.stop_event
                    ),
                )
            else:
                log.warning("no node name: reclaiming on the periodic resync only")
        if self.settings.node_labels:
            if self.settings.node_name:
                labeler = NodeLabeler(self.node, self.kube, self.settings.node_name)
                self._thread(
                    "node-labels",
                    lambda: labeler.run(self.stop_event, self.settings.resync_seconds),
                )
            else:
                log.warning("no node name: the node's labels are not kept")

    def reclaim_slices(self) -> SlicePassReport:
        """One reclaim pass with the mode off: the store settled, the slices reclaimed, and
        the counts caught up with the kubelet (as the partition pass ends)."""
        try:
            self.reclaimer.settle_store()
            return self.slice_reclaimer.run_pass()
        finally:
            self.refresh()

    def alive(self) -> bool:
        publishing = self.publisher is None or self.publisher.alive()
        return publishing and all(t.is_alive() for t in self._threads)

    def stop(self) -> None:
        self.stop_event.set()
        self.reclaimer.wake.set()
        if self.publisher is not None:
            self.publisher.stop()
        for thread in self._threads:
            thread.join(timeout=5)
