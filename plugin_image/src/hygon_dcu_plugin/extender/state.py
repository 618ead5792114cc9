"""What the extender knows (docs/dev/extender.md): each node's geometry from its Lease, and the
reservation table (what bind reserved and the node has not carved yet). Thread-safe.

One background thread refreshes both every ``refresh_seconds``: it lists the geometry Leases
and the reserved pods, and releases a reserved span (or logical slice) only when
- the Lease's owners show that pod carved it there (the geometry counts it from then on; a
  slice is carved when the card lists a live slice of that size for that pod);
- the pod is gone, finished, or bound to another node (only for entries made before the list
  was asked for, so a bind in flight is never released under it).
Never for its age: the allocator carves exactly the reservation whenever the kubelet admits
the pod, so a span freed before that would be given to two pods. A reservation not carved
``reservation_seconds`` after it was made is reported once (a log line and a Warning Event on
the pod) and kept.
A listed pod outside the table is taken into it by the rebuild's rule below (a reservation
the table lost track of); the others, and the pods just released, lose RESERVED_LABEL (the
annotation stays: the allocator reads it) unless a bind may be writing them, so the
reserved-pod list holds live reservations, not every partition pod ever bound.
Before its first refresh it rebuilds the table from the reserved pods' annotations: each pod
bound to the node its reservation names and not finished, whatever the reservation's age. So
a restarted extender keeps counting what it reserved; until that worked, ``ready`` is false
and the verbs refuse to decide.

A Lease's staleness is the extender's own observation, judged when a node is read: it is
current while the extender saw its renewTime or resourceVersion change within its
leaseDurationSeconds (at most MAX_LEASE_SECONDS), by the extender's monotonic clock, so a
writer's clock running ahead or a huge duration cannot keep a node whose plugin is gone
schedulable. Until it has seen a change (first sight, as after a restart), renewTime +
duration must also be ahead of the extender's wall clock: the writer's clock may withhold
trust, never extend it. A new extender thus trusts a Lease for at most one duration from
first sight, and not at all when its renewTime is already older than that.

Each Lease is decoded once per content (``_GeometryCache``), outside the state's lock, and
only its geometry is kept, not its text: a filter never decodes, and a refresh decodes only
the Leases whose geometry changed since the last one (a renewal keeps the geometry object).
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum

from hygon_dcu_plugin.config import BOUNDS
from hygon_dcu_plugin.extender.decide import NodeState
from hygon_dcu_plugin.extender.kube import (
    ExtenderApi,
    KubeApiError,
    LeaseInfo,
    PodChanged,
    PodInfo,
    PodRef,
)
from hygon_dcu_plugin.geometry import MAX_TEXT, Geometry, GeometryError, decode
from hygon_dcu_plugin.reservation import Reservation, ReservationError, Reserved, ReservedSlice
from hygon_dcu_plugin.reservation import decode as decode_reservation
from hygon_dcu_plugin.vocabulary import GEOMETRY_ANNOTATION, RESERVATION_ANNOTATION

log = logging.getLogger(__name__)

DEFAULT_REFRESH_SECONDS = 2.0
DEFAULT_RESERVATION_SECONDS = 300.0
# /healthz fails when the last good Lease list is older than this many refresh periods.
HEALTHY_PERIODS = 3
OVERDUE_REASON = "ReservationNotCarved"
NO_GEOMETRY = "no geometry published"
STALE = "geometry stale"
# The longest leaseDurationSeconds the device plugin can be configured to write
# (geometry_lease_seconds): a longer one in a Lease is taken as this.
MAX_LEASE_SECONDS = int(BOUNDS["geometry_lease_seconds"][1])


@dataclass(frozen=True)
class PodReservation:
    """One pod's reservation in the table: per container, the card and placement reserved
    (``containers``, partitions) or the card and size (``slices``, logical slices)."""

    pod: PodRef
    node: str
    containers: Mapping[str, Reserved]
    made_at: float  # seconds since the epoch (the annotation's "at")
    added: float  # time.monotonic() when it entered the table
    reported: bool = False  # its Warning for not being carved in time was given
    slices: Mapping[str, ReservedSlice] = field(default_factory=dict)


@dataclass(frozen=True)
class _Node:
    lease: LeaseInfo  # without its text: the geometry is what is kept
    geometry: Geometry | None
    error: str  # why the geometry could not be read ("" when it could)


class ReleasedWhy(StrEnum):
    """Why a reservation left the table: the ``why`` label of reservations_released_total."""

    CARVED = "carved"
    POD_GONE = "pod-gone"
    POD_FINISHED = "pod-finished"
    BOUND_ELSEWHERE = "bound-elsewhere"


@dataclass(frozen=True)
class Released:
    reservation: PodReservation
    why: ReleasedWhy


@dataclass(frozen=True)
class Sighting:
    """What the extender last saw of a node's Lease, and when by its own monotonic clock."""

    renewed: float | None
    version: str
    at: float  # when the Lease was first seen, or last seen with a new renewTime or version
    changed: bool  # a change was seen, not only the first sight

    @classmethod
    def first(cls, lease: LeaseInfo, seen_at: float) -> Sighting:
        return cls(lease.renewed, lease.version, seen_at, False)

    def then(self, lease: LeaseInfo, seen_at: float) -> Sighting:
        """The sighting after the Lease was read again at ``seen_at``."""
        if (lease.renewed, lease.version) == (self.renewed, self.version):
            return self
        return Sighting(lease.renewed, lease.version, seen_at, True)


def lease_view(
    lease: LeaseInfo,
    sighting: Sighting,
    now: float,
    seen_now: float,
    read: Callable[[LeaseInfo], tuple[Geometry | None, str]] | None = None,
) -> tuple[Geometry | None, str]:
    """The geometry of a Lease as it may be used at ``now`` (wall clock; ``seen_now`` on the
    sighting's monotonic clock), or None and why not. ``read`` decodes the Lease (default:
    ``_decoded``, every time)."""
    why = _stale(lease, sighting, now, seen_now)
    return (None, why) if why else (read or _decoded)(lease)


def _stale(lease: LeaseInfo, sighting: Sighting, now: float, seen_now: float) -> str:
    """Why the Lease cannot be trusted for its age, or "" (the module docstring's rule)."""
    if lease.renewed is None or lease.duration is None:
        return "geometry Lease has no renewTime or leaseDurationSeconds"
    trusted = min(lease.duration, MAX_LEASE_SECONDS)
    if not sighting.changed and lease.renewed + trusted < now:
        ago = max(0, int(now - lease.renewed))
        return f"{STALE}: renewed {ago} s ago, plugin down or not Ready?"
    silent = seen_now - sighting.at
    if silent > trusted:
        return f"{STALE}: no renewal seen for {int(silent)} s, plugin down or not Ready?"
    return ""


def _decoded(lease: LeaseInfo) -> tuple[Geometry | None, str]:
    if lease.text is None:
        return None, f"{NO_GEOMETRY} (the Lease has no {GEOMETRY_ANNOTATION} annotation)"
    try:
        return decode(lease.text), ""
    except GeometryError as error:
        return None, f"geometry unreadable: {error}"


class _GeometryCache:
    """Each node's Lease decoded once per content, for the refresh and for bind's fresh reads
    alike: a new resourceVersion whose text is the one decoded before (a renewal) keeps that
    geometry object, so what is remembered of it (``place_memo``) stays valid. Only a digest of
    the text is kept. Thread-safe; the decode itself runs outside the lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # node -> (resourceVersion, digest of the text, geometry, error)
        self._by_node: dict[str, tuple[str, bytes, Geometry | None, str]] = {}

    def __call__(self, lease: LeaseInfo) -> tuple[Geometry | None, str]:
        with self._lock:
            known = self._by_node.get(lease.name)
        if known is not None and lease.version and known[0] == lease.version:
            return known[2], known[3]
        digest = _digest(lease.text)
        if known is not None and digest and known[1] == digest:
            geometry, error = known[2], known[3]
        else:
            geometry, error = _decoded(lease)
            if error:
                log.warning("geometry_unreadable", extra={"node": lease.name, "why": error})
        if lease.version:  # without one nothing tells a rewrite: decoded each time
            with self._lock:
                self._by_node[lease.name] = (lease.version, digest, geometry, error)
        return geometry, error

    def keep(self, names: set[str]) -> None:
        """Forget the nodes whose Lease is no longer listed."""
        with self._lock:
            self._by_node = {n: v for n, v in self._by_node.items() if n in names}


def _digest(text: object) -> bytes:
    """A digest of the geometry text; b"" (never matched) when it is not text or longer than
    any geometry, which the decoder then refuses at once."""
    if not isinstance(text, str) or len(text) > MAX_TEXT:
        return b""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def _carved(geometry: Geometry, reserved: Reserved, uid: str) -> bool:
    card = geometry.card(reserved.card)
    return card is not None and any(
        (o.start, o.size, o.pod_uid) == (reserved.start, reserved.size, uid) for o in card.owners
    )


def _slices_left(
    geometry: Geometry, slices: Mapping[str, ReservedSlice], uid: str
) -> dict[str, ReservedSlice]:
    """The reserved slices the geometry does not show created for the pod: a live slice of the
    pod on the card, of the reserved size, counts for one container (in name order)."""
    live: dict[tuple[str, int, int], int] = {}
    for card in geometry.sliced:
        for item in card.live:
            if item.pod_uid == uid:
                key = (card.pci, item.compute_units, item.memory_mib)
                live[key] = live.get(key, 0) + 1
    left = {}
    for name, reserved in sorted(slices.items()):
        key = (reserved.card, reserved.compute_units, reserved.memory_mib)
        if live.get(key, 0) > 0:
            live[key] -= 1
        else:
            left[name] = reserved
    return left


def _made_at(pod: PodInfo) -> float | None:
    """When the pod's reservation was made, or None when it has none that can be read."""
    try:
        return decode_reservation(pod.annotations.get(RESERVATION_ANNOTATION)).made_at
    except ReservationError:
        return None


def _spans_text(entry: PodReservation) -> str:
    return ", ".join(
        [
            *(
                f"{r.profile} at card {r.card} slices {r.start}:{r.size} (container {name})"
                for name, r in sorted(entry.containers.items())
            ),
            *(
                f"a logical slice of {r.compute_units} compute units and {r.memory_mib} MiB at "
                f"card {r.card} (container {name})"
                for name, r in sorted(entry.slices.items())
            ),
        ]
    )


# node -> card pci -> pairs of figures reserved there
_PerCard = dict[str, dict[str, tuple[tuple[int, int], ...]]]


def _frozen(per_node: dict[str, dict[str, list[tuple[int, int]]]]) -> _PerCard:
    return {
        node: {card: tuple(items) for card, items in cards.items() if items}
        for node, cards in per_node.items()
    }


class ExtenderState:
    def __init__(
        self,
        api: ExtenderApi,
        namespace: str,
        *,
        refresh_seconds: float = DEFAULT_REFRESH_SECONDS,
        reservation_seconds: float = DEFAULT_RESERVATION_SECONDS,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api = api
        self.namespace = namespace
        self.refresh_seconds = refresh_seconds
        # Not a lifetime: after this long a reservation not carved is reported, and kept.
        self.reservation_seconds = reservation_seconds
        self._clock = clock
        self._monotonic = monotonic  # when Leases were seen to change
        self._lock = threading.Lock()
        self._nodes: dict[str, _Node] = {}
        self._geometries = _GeometryCache()
        self._sightings: dict[str, Sighting] = {}  # node -> its Lease as last seen
        self._table: dict[str, PodReservation] = {}  # pod uid -> its reservation
        self._rebuilt = False
        self._listed_at: float | None = None  # monotonic, the last good Lease list
        self._list_error = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.on_release: Callable[[Released], None] | None = None
        # Called by the refresh thread after each round (main: serving.gc_pauses).
        self.after_refresh: Callable[[], None] = lambda: None

    # readers -----------------------------------------------------------------------------
    @property
    def ready(self) -> bool:
        with self._lock:
            return self._rebuilt and self._listed_at is not None

    def health(self) -> tuple[bool, str]:
        """(healthy, why not): a Lease list succeeded within the last HEALTHY_PERIODS."""
        with self._lock:
            listed_at, error, rebuilt = self._listed_at, self._list_error, self._rebuilt
        if not rebuilt:
            return False, f"the reservation table is not rebuilt yet: {error or 'starting'}"
        if listed_at is None:
            return False, f"no geometry Lease list has succeeded yet: {error or 'starting'}"
        age = time.monotonic() - listed_at
        if age > HEALTHY_PERIODS * self.refresh_seconds:
            return False, f"the last good geometry Lease list was {age:.0f} s ago: {error}"
        return True, ""

    def node_state(
        self, name: str, exclude_uid: str = "", lease: LeaseInfo | None = None
    ) -> NodeState:
        """The node as ``place`` sees it now, counting every reservation on it but that of
        ``exclude_uid`` (the pod being placed). ``lease``, when given, is a fresher read of
        the node's Lease than the last list."""
        if lease is None:
            return self.node_states([name], exclude_uid)[0]
        now, seen_now = self._clock(), self._monotonic()
        with self._lock:
            spans, slices = self._spans(exclude_uid)
            sighting = self._sight(lease, seen_now)
        geometry, why = lease_view(lease, sighting, now, seen_now, self._geometries)
        return NodeState(name, geometry, why, spans.get(name, {}), slices.get(name, {}))

    def node_states(self, names: Iterable[str], exclude_uid: str = "") -> list[NodeState]:
        """``node_state`` of each node, read at once (one pass over the table for all)."""
        now, seen_now = self._clock(), self._monotonic()
        with self._lock:
            spans, slices = self._spans(exclude_uid)
            entries = [(name, self._nodes.get(name), self._sightings.get(name)) for name in names]
        states = []
        for name, entry, sighting in entries:
            geometry: Geometry | None = None
            if entry is None:
                why = NO_GEOMETRY
            else:
                # Decoded once per version of the Lease; staleness judged now.
                seen = sighting or Sighting.first(entry.lease, seen_now)
                why = _stale(entry.lease, seen, now, seen_now) or entry.error
                geometry = None if why else entry.geometry
            states.append(NodeState(name, geometry, why, spans.get(name, {}), slices.get(name, {})))
        return states

    def _sight(self, lease: LeaseInfo, seen_now: float) -> Sighting:
        """Record a read of the Lease (under the lock); its sighting now."""
        known = self._sightings.get(lease.name)
        sighting = Sighting.first(lease, seen_now) if known is None else known.then(lease, seen_now)
        self._sightings[lease.name] = sighting
        return sighting

    def _spans(self, exclude_uid: str) -> tuple[_PerCard, _PerCard]:
        """node -> card -> the partition spans (start, size) reserved there, and node -> card
        -> the logical slices (compute units, MiB) reserved there; but those of
        ``exclude_uid``."""
        spans: dict[str, dict[str, list[tuple[int, int]]]] = {}
        slices: dict[str, dict[str, list[tuple[int, int]]]] = {}
        for uid, entry in self._table.items():
            if uid == exclude_uid:
                continue
            cards = spans.setdefault(entry.node, {})
            for reserved in entry.containers.values():
                cards.setdefault(reserved.card, []).append((reserved.start, reserved.size))
            sliced = slices.setdefault(entry.node, {})
            for item in entry.slices.values():
                sliced.setdefault(item.card, []).append((item.compute_units, item.memory_mib))
        return _frozen(spans), _frozen(slices)

    def reservation_of(self, uid: str) -> PodReservation | None:
        with self._lock:
            return self._table.get(uid)

    def counts(self) -> tuple[int, int]:
        """(reservations held, nodes whose geometry is stale) for the metrics."""
        now, seen_now = self._clock(), self._monotonic()
        with self._lock:
            count = len(self._table)
            leases = [(n.lease, self._sightings.get(name)) for name, n in self._nodes.items()]
        stale = sum(
            1
            for lease, sighting in leases
            if _stale(lease, sighting or Sighting.first(lease, seen_now), now, seen_now).startswith(
                STALE
            )
        )
        return count, stale

    # writers (bind) ------------------------------------------------------------------------
    def hold(self, pod: PodRef, reservation: Reservation) -> PodReservation:
        """Enter the pod's reservation (replacing an older one of the same pod)."""
        entry = PodReservation(
            pod,
            reservation.node,
            reservation.containers,
            reservation.made_at,
            0.0,
            slices=reservation.slices,
        )
        with self._lock:
            entry = replace(entry, added=time.monotonic())
            self._table[pod.uid] = entry
        return entry

    def forget(self, entry: PodReservation) -> bool:
        """Remove exactly this entry (not a newer one of the same pod)."""
        with self._lock:
            if self._table.get(entry.pod.uid) is entry:
                del self._table[entry.pod.uid]
                return True
            return False

    # the refresh thread -------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="extender-state", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                if not self._rebuilt:
                    self.rebuild()
                if self._rebuilt:
                    self.refresh()
                    self.after_refresh()
            except Exception:  # a bug: keep refreshing, /healthz tells when lists stop working
                log.error("refresh_failed", exc_info=True)
            self._stop.wait(self.refresh_seconds)

    def rebuild(self) -> bool:
        """Fill the table from the reserved pods' annotations; False when they cannot be
        listed (retried on the next period)."""
        started = time.monotonic()
        try:
            pods = self.api.list_reserved_pods()
        except KubeApiError as error:
            with self._lock:
                self._list_error = str(error)
            log.warning("rebuild_failed", extra={"error": str(error)})
            return False
        table: dict[str, PodReservation] = {}
        for pod in pods:
            entry = self._from_annotation(pod, started)
            if entry is not None:
                table[pod.ref.uid] = entry
        with self._lock:
            # Binds are refused until rebuilt, so nothing else is in the table yet.
            self._table = {**table, **self._table}
            self._rebuilt = True
        log.info("reservations_rebuilt", extra={"reservations": len(table), "pods": len(pods)})
        return True

    def _from_annotation(self, pod: PodInfo, started: float) -> PodReservation | None:
        """The pod's reservation as the table holds it: while the pod is bound to the node it
        names and not finished, whatever its age (the allocator carves it whenever the pod
        is admitted). None for any other pod."""
        text = pod.annotations.get(RESERVATION_ANNOTATION)
        # Unbound: its bind failed or never finished (no bind is in flight at start).
        if text is None or pod.terminal or not pod.node_name:
            return None
        try:
            reservation = decode_reservation(text)
        except ReservationError as error:
            log.warning("reservation_unreadable", extra={"pod": pod.ref.name, "error": str(error)})
            return None
        if reservation.node != pod.node_name:
            return None
        return PodReservation(
            pod.ref,
            reservation.node,
            reservation.containers,
            reservation.made_at,
            started,
            slices=reservation.slices,
        )

    def refresh(self) -> list[Released]:
        """One round: list Leases and reserved pods, release what the rules say. A failed list
        keeps what was known (staleness ages it) and skips the rules that need it."""
        started = time.monotonic()
        leases: list[_Node] | None
        pods: list[PodInfo] | None
        try:
            leases = self._list_leases()
        except KubeApiError as error:
            leases = None
            log.warning("lease_list_failed", extra={"error": str(error)})
            with self._lock:
                self._list_error = str(error)
        try:
            pods = self.api.list_reserved_pods()
        except KubeApiError as error:
            pods = None
            log.warning("reserved_pod_list_failed", extra={"error": str(error)})
        with self._lock:
            if leases is not None:
                self._nodes = self._read(leases)
                self._listed_at = started
                self._list_error = ""
            released, overdue = self._release(started, pods)
            unlabel = self._adopt_or_unlabel(released, pods or [], started)
        for item in released:
            self._announce(item)
        for entry, age in overdue:
            self._report_overdue(entry, age)
        for pod in unlabel:
            self._drop_label(pod)
        return released

    def _adopt_or_unlabel(
        self, released: list[Released], pods: list[PodInfo], started: float
    ) -> list[PodInfo]:
        """Under the lock, for the listed pods outside the table: take in those the rebuild
        would and the geometry does not show carved (a reservation the table lost, e.g. by a
        Binding that landed after its outcome was reported unknown); return those whose
        RESERVED_LABEL is no longer needed. Those are the pods just released, and those no
        bind can be writing: finished, bound (a bind writes before it binds), or unbound with
        a reservation written over ``reservation_seconds`` ago or unreadable. Dropping the
        label keeps the reserved-pod list to the pods with live reservations."""
        done = {item.reservation.pod.uid for item in released}
        now = self._clock()
        chosen = []
        for pod in pods:
            if pod.ref.uid in self._table:
                continue
            if pod.ref.uid not in done:
                entry = self._from_annotation(pod, started)
                if entry is not None and self._uncarved(entry):
                    self._table[pod.ref.uid] = entry
                    log.info("reservation_adopted", extra=self._fields(entry))
                    continue
            made_at = _made_at(pod)
            if (
                pod.ref.uid in done
                or pod.terminal
                or pod.node_name
                or made_at is None
                or now - made_at > self.reservation_seconds
            ):
                chosen.append(pod)
        return chosen

    def _drop_label(self, pod: PodInfo) -> None:
        # Only the version listed: a bind that wrote the pod since then keeps its label.
        try:
            self.api.unlabel_pod(pod)
        except PodChanged:
            log.debug("unlabel_skipped", extra={"pod": pod.ref.name, "why": "pod changed"})
        except KubeApiError as error:
            log.warning("unlabel_failed", extra={"pod": pod.ref.name, "error": str(error)})

    def _list_leases(self) -> list[_Node]:
        """The listed Leases decoded (outside the lock: filters never wait for a decode),
        each kept without its text."""
        nodes = [
            _Node(replace(lease, text=None), *self._geometries(lease))
            for lease in self.api.list_geometry_leases(self.namespace)
        ]
        self._geometries.keep({node.lease.name for node in nodes})
        return nodes

    def _read(self, listed: list[_Node]) -> dict[str, _Node]:
        seen_now = self._monotonic()
        # A Lease no longer listed is seen anew if it comes back.
        self._sightings = {node.lease.name: self._sight(node.lease, seen_now) for node in listed}
        return {node.lease.name: node for node in listed}

    def _uncarved(self, entry: PodReservation) -> PodReservation | None:
        """The entry cut down to the containers the node's geometry does not show carved (or
        created, for slices) for its pod; None when they all are."""
        node = self._nodes.get(entry.node)
        geometry = node.geometry if node is not None else None
        if geometry is None:
            return entry
        left = {
            name: reserved
            for name, reserved in entry.containers.items()
            if not _carved(geometry, reserved, entry.pod.uid)
        }
        slices_left = _slices_left(geometry, entry.slices, entry.pod.uid)
        if not left and not slices_left:
            return None
        if len(left) == len(entry.containers) and len(slices_left) == len(entry.slices):
            return entry
        return replace(entry, containers=left, slices=slices_left)

    def _release(
        self, started: float, pods: list[PodInfo] | None
    ) -> tuple[list[Released], list[tuple[PodReservation, int]]]:
        """Under the lock: the entries released, and those to report as not carved in time
        (with their age in seconds)."""
        now = self._clock()
        listed = {pod.ref.uid: pod for pod in pods} if pods is not None else None
        released: list[Released] = []
        overdue: list[tuple[PodReservation, int]] = []
        for uid, current in list(self._table.items()):
            entry = self._uncarved(current)
            if entry is None:
                released.append(Released(current, ReleasedWhy.CARVED))
                del self._table[uid]
                continue
            if entry is not current:
                self._table[uid] = entry
            why: ReleasedWhy | None = None
            if listed is not None and entry.added < started:
                pod = listed.get(uid)
                if pod is None:
                    why = ReleasedWhy.POD_GONE
                elif pod.terminal:
                    why = ReleasedWhy.POD_FINISHED
                elif pod.node_name and pod.node_name != entry.node:
                    why = ReleasedWhy.BOUND_ELSEWHERE
            if why:
                released.append(Released(entry, why))
                del self._table[uid]
            elif not entry.reported and now - entry.made_at > self.reservation_seconds:
                entry = replace(entry, reported=True)
                self._table[uid] = entry
                overdue.append((entry, int(now - entry.made_at)))
        return released, overdue

    @staticmethod
    def _fields(entry: PodReservation) -> dict[str, str]:
        return {
            "namespace": entry.pod.namespace,
            "pod": entry.pod.name,
            "uid": entry.pod.uid,
            "node": entry.node,
        }

    def _announce(self, item: Released) -> None:
        log.info("reservation_released", extra={**self._fields(item.reservation), "why": item.why})
        if self.on_release is not None:
            self.on_release(item)

    def _report_overdue(self, entry: PodReservation, age: int) -> None:
        message = (
            f"the reservation of {_spans_text(entry)} on node {entry.node} is not carved {age} s "
            "after it was made; it is kept while the pod is bound and not finished, since the "
            "node's device plugin carves exactly it when the kubelet admits the pod. Is the "
            "kubelet or the device plugin of that node down? Deleting the pod frees it"
        )
        extra = self._fields(entry)
        log.warning("reservation_not_carved", extra={**extra, "detail": message})
        try:
            self.api.create_event(entry.pod, "Warning", OVERDUE_REASON, message)
        except KubeApiError as error:
            log.warning("event_failed", extra={**extra, "error": str(error)})
