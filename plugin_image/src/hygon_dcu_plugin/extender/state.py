"""What the extender knows (docs/dev/extender.md): each node's geometry from its Lease, and the
reservation table (what bind reserved and the node has not carved yet). Thread-safe.

One background thread refreshes both every ``refresh_seconds``: it lists the geometry Leases
and the reserved pods, and releases a reserved span when
- the Lease's owners show that pod carved it there (the geometry counts it from then on);
- the pod is gone, finished, or bound to another node (only for entries made before the list
  was asked for, so a bind in flight is never released under it);
- it is older than ``reservation_seconds`` and not carved: logged, with a Warning Event on the
  pod saying the reservation lapsed.
A released pod loses RESERVED_LABEL (its annotation stays: the allocator reads it), and so
does a labelled pod no bind can be writing, so the reserved-pod list holds live reservations,
not every partition pod ever bound.
Before its first refresh it rebuilds the table from the reserved pods' annotations (bound,
not finished, not yet lapsed), so a restarted extender keeps counting what it reserved; until
that worked, ``ready`` is false and the verbs refuse to decide.

A Lease's staleness is judged when a node is read, not when it was listed: renewTime +
leaseDurationSeconds in the past means the plugin stopped renewing it (down, or not Ready).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace

from ..geometry import Geometry, GeometryError, decode
from ..reservation import Reservation, ReservationError, Reserved
from ..reservation import decode as decode_reservation
from ..vocabulary import GEOMETRY_ANNOTATION, RESERVATION_ANNOTATION
from .decide import NodeState
from .kube import ExtenderApi, KubeApiError, LeaseInfo, PodChanged, PodInfo, PodRef

log = logging.getLogger(__name__)

DEFAULT_REFRESH_SECONDS = 2.0
DEFAULT_RESERVATION_SECONDS = 300.0
# /healthz fails when the last good Lease list is older than this many refresh periods.
HEALTHY_PERIODS = 3
LAPSED_REASON = "ReservationLapsed"
NO_GEOMETRY = "no geometry published"


@dataclass(frozen=True)
class Held:
    """One pod's reservation in the table: per container, the card and placement reserved."""

    pod: PodRef
    node: str
    containers: Mapping[str, Reserved]
    made_at: float  # seconds since the epoch (the annotation's "at")
    added: float  # time.monotonic() when it entered the table


@dataclass(frozen=True)
class _Node:
    lease: LeaseInfo
    geometry: Geometry | None
    error: str  # why the geometry could not be read ("" when it could)


@dataclass(frozen=True)
class Released:
    held: Held
    why: str  # carved, pod-gone, pod-finished, bound-elsewhere, lapsed


def lease_view(lease: LeaseInfo, now: float) -> tuple[Geometry | None, str]:
    """The geometry of a Lease as it may be used at ``now``, or None and why not."""
    why = _stale(lease, now)
    return (None, why) if why else _decoded(lease)


def _stale(lease: LeaseInfo, now: float) -> str:
    """Why the Lease cannot be trusted at ``now`` for its age, or ""."""
    if lease.renewed is None or lease.duration is None:
        return "geometry Lease has no renewTime or leaseDurationSeconds"
    if lease.renewed + lease.duration < now:
        ago = max(0, int(now - lease.renewed))
        return f"geometry stale: renewed {ago} s ago, plugin down or not Ready?"
    return ""


def _decoded(lease: LeaseInfo) -> tuple[Geometry | None, str]:
    if lease.text is None:
        return None, f"{NO_GEOMETRY} (the Lease has no {GEOMETRY_ANNOTATION} annotation)"
    try:
        return decode(lease.text), ""
    except GeometryError as error:
        return None, f"geometry unreadable: {error}"


def _carved(geometry: Geometry, reserved: Reserved, uid: str) -> bool:
    card = geometry.card(reserved.card)
    return card is not None and any(
        (o.start, o.size, o.pod_uid) == (reserved.start, reserved.size, uid) for o in card.owners
    )


def _spans_text(held: Held) -> str:
    return ", ".join(
        f"{r.profile} at card {r.card} slices {r.start}:{r.size} (container {name})"
        for name, r in sorted(held.containers.items())
    )


class ExtenderState:
    def __init__(
        self,
        api: ExtenderApi,
        namespace: str,
        *,
        refresh_seconds: float = DEFAULT_REFRESH_SECONDS,
        reservation_seconds: float = DEFAULT_RESERVATION_SECONDS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.api = api
        self.namespace = namespace
        self.refresh_seconds = refresh_seconds
        self.reservation_seconds = reservation_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._nodes: dict[str, _Node] = {}
        self._held: dict[str, Held] = {}  # pod uid -> its reservation
        self._rebuilt = False
        self._listed_at: float | None = None  # monotonic, the last good Lease list
        self._list_error = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.on_release: Callable[[Released], None] | None = None

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
        with self._lock:
            reserved = self._spans(exclude_uid).get(name, {})
        geometry, why = lease_view(lease, self._clock())
        return NodeState(name, geometry, why, reserved)

    def node_states(self, names: Iterable[str], exclude_uid: str = "") -> list[NodeState]:
        """``node_state`` of each node, read at once (one pass over the table for all)."""
        now = self._clock()
        with self._lock:
            spans = self._spans(exclude_uid)
            entries = [(name, self._nodes.get(name)) for name in names]
        states = []
        for name, entry in entries:
            geometry: Geometry | None = None
            if entry is None:
                why = NO_GEOMETRY
            else:
                # Decoded once per change of the text; staleness judged now.
                why = _stale(entry.lease, now) or entry.error
                geometry = None if why else entry.geometry
            states.append(NodeState(name, geometry, why, spans.get(name, {})))
        return states

    def _spans(self, exclude_uid: str) -> dict[str, dict[str, tuple[tuple[int, int], ...]]]:
        """node -> card -> the spans reserved there (but those of ``exclude_uid``)."""
        spans: dict[str, dict[str, list[tuple[int, int]]]] = {}
        for uid, held in self._held.items():
            if uid == exclude_uid:
                continue
            cards = spans.setdefault(held.node, {})
            for reserved in held.containers.values():
                cards.setdefault(reserved.card, []).append((reserved.start, reserved.size))
        return {
            node: {card: tuple(items) for card, items in cards.items()}
            for node, cards in spans.items()
        }

    def held(self, uid: str) -> Held | None:
        with self._lock:
            return self._held.get(uid)

    def counts(self) -> tuple[int, int]:
        """(reservations held, nodes whose geometry is stale) for the metrics."""
        now = self._clock()
        with self._lock:
            held = len(self._held)
            leases = [n.lease for n in self._nodes.values()]
        stale = sum(
            1
            for lease in leases
            if lease.renewed is not None
            and lease.duration is not None
            and lease.renewed + lease.duration < now
        )
        return held, stale

    # writers (bind) ------------------------------------------------------------------------
    def hold(self, pod: PodRef, reservation: Reservation) -> Held:
        """Enter the pod's reservation (replacing an older one of the same pod)."""
        held = Held(pod, reservation.node, reservation.containers, reservation.made_at, 0.0)
        with self._lock:
            held = replace(held, added=time.monotonic())
            self._held[pod.uid] = held
        return held

    def forget(self, held: Held) -> bool:
        """Remove exactly this entry (not a newer one of the same pod)."""
        with self._lock:
            if self._held.get(held.pod.uid) is held:
                del self._held[held.pod.uid]
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
        now = self._clock()
        table: dict[str, Held] = {}
        for pod in pods:
            held = self._from_annotation(pod, now, started)
            if held is not None:
                table[pod.ref.uid] = held
        with self._lock:
            # Binds are refused until rebuilt, so nothing else is in the table yet.
            self._held = {**table, **self._held}
            self._rebuilt = True
        log.info("reservations_rebuilt", extra={"reservations": len(table), "pods": len(pods)})
        return True

    def _from_annotation(self, pod: PodInfo, now: float, started: float) -> Held | None:
        text = pod.annotations.get(RESERVATION_ANNOTATION)
        # Unbound: its bind failed or never finished (no bind is in flight at start).
        if text is None or pod.terminal or not pod.node_name:
            return None
        try:
            reservation = decode_reservation(text)
        except ReservationError as error:
            log.warning("reservation_unreadable", extra={"pod": pod.ref.name, "error": str(error)})
            return None
        if (
            reservation.node != pod.node_name
            or now - reservation.made_at > self.reservation_seconds
        ):
            return None
        return Held(pod.ref, reservation.node, reservation.containers, reservation.made_at, started)

    def refresh(self) -> list[Released]:
        """One round: list Leases and reserved pods, release what the rules say. A failed list
        keeps what was known (staleness ages it) and skips the rules that need it."""
        started = time.monotonic()
        leases: list[LeaseInfo] | None
        pods: list[PodInfo] | None
        try:
            leases = self.api.list_geometry_leases(self.namespace)
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
            released = self._release(started, pods)
            unlabel = self._unlabel(released, pods or [])
        for item in released:
            self._announce(item)
        for pod in unlabel:
            self._drop_label(pod)
        return released

    def _unlabel(self, released: list[Released], pods: list[PodInfo]) -> list[PodInfo]:
        """The listed pods whose RESERVED_LABEL is no longer needed: those just released (but
        gone), and leftovers not in the table that no bind can be writing (finished, or a
        reservation that lapsed or cannot be read). Dropping the label keeps the reserved-pod
        list to the pods with live reservations."""
        done = {item.held.pod.uid for item in released}
        now = self._clock()
        chosen = []
        for pod in pods:
            if pod.ref.uid in self._held:
                continue
            if pod.ref.uid in done or pod.terminal:
                chosen.append(pod)
                continue
            try:
                made_at = decode_reservation(pod.annotations.get(RESERVATION_ANNOTATION)).made_at
            except ReservationError:
                made_at = 0.0
            if now - made_at > self.reservation_seconds:
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

    def _read(self, leases: Iterable[LeaseInfo]) -> dict[str, _Node]:
        nodes: dict[str, _Node] = {}
        for lease in leases:
            known = self._nodes.get(lease.name)
            if known is not None and known.lease.text == lease.text:
                nodes[lease.name] = replace(known, lease=lease)  # same text: same geometry
                continue
            geometry, error = _decoded(lease)
            if error:
                log.warning("geometry_unreadable", extra={"node": lease.name, "why": error})
            nodes[lease.name] = _Node(lease, geometry, error)
        return nodes

    def _release(self, started: float, pods: list[PodInfo] | None) -> list[Released]:
        now = self._clock()
        listed = {pod.ref.uid: pod for pod in pods} if pods is not None else None
        released: list[Released] = []
        for uid, entry in list(self._held.items()):
            held = entry
            node = self._nodes.get(held.node)
            geometry = node.geometry if node is not None else None
            if geometry is not None:
                left = {
                    name: reserved
                    for name, reserved in held.containers.items()
                    if not _carved(geometry, reserved, uid)
                }
                if not left:
                    released.append(Released(held, "carved"))
                    del self._held[uid]
                    continue
                if len(left) != len(held.containers):
                    held = replace(held, containers=left)
                    self._held[uid] = held
            why = ""
            if listed is not None and held.added < started:
                pod = listed.get(uid)
                if pod is None:
                    why = "pod-gone"
                elif pod.terminal:
                    why = "pod-finished"
                elif pod.node_name and pod.node_name != held.node:
                    why = "bound-elsewhere"
            if not why and now - held.made_at > self.reservation_seconds:
                why = "lapsed"
            if why:
                released.append(Released(held, why))
                del self._held[uid]
        return released

    def _announce(self, item: Released) -> None:
        held = item.held
        extra = {
            "namespace": held.pod.namespace,
            "pod": held.pod.name,
            "uid": held.pod.uid,
            "node": held.node,
            "why": item.why,
        }
        if item.why != "lapsed":
            log.info("reservation_released", extra=extra)
        else:
            message = (
                f"the reservation of {_spans_text(held)} on node {held.node} lapsed: not carved "
                f"within {self.reservation_seconds:g} s, so the extender no longer keeps those "
                "slices for this pod"
            )
            log.warning("reservation_lapsed", extra={**extra, "detail": message})
            try:
                self.api.create_event(held.pod, "Warning", LAPSED_REASON, message)
            except KubeApiError as error:
                log.warning("event_failed", extra={**extra, "error": str(error)})
        if self.on_release is not None:
            self.on_release(item)
