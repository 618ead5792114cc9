"""The extender's three verbs: filter, prioritize and bind (docs/dev/extender.md).

A pod's partition and logical-slice requests are read the way the webhook and the allocators
read them: the pod rules the webhook denies with decide whether it can be served at all, and
what each app container asks for, in one reading (``pod_rules.read_pod``, over
``request.parse_container``). A pod that breaks a rule fails on every node with the webhook's
own message; containers without a partition or a slice are ignored. Partitions are placed by
``decide`` (through ``place_memo``), slices by ``slice_decide``; the rules forbid a pod to
hold both.

Bind serves only pods that name this extender's scheduler (``--scheduler-name``).

Filter and prioritize place the pod on each node's current view (``decide.place``), counting
every reservation but the pod's own; a node's outcome for a pod's shape is kept while the node
does not change (``place_memo``), so filter, prioritize and bind place a pod on a node once.

Bind, under the node's lock: read the pod (fresh resourceVersion), reuse its reservation if this
is a retried bind of the same node, else read the node's Lease, place, write the reservation on
the pod with that resourceVersion (a pod changed meanwhile is refused) and enter it in the
table; then, outside the node's lock, create the Binding. A Binding the API server refuses
removes the entry; one whose outcome is unknown (timeout, connection lost) keeps it, since the
pod may be bound: the state's release rules clean it up.

A pod is bound once, to the node its reservation names. Its binds run one at a time (its own
lock, held from the first read to the Binding's answer), so a retry the scheduler sends after
its httpTimeout, to whatever node, waits for the bind before it and then reads the pod that
one left: bound to that node (answered as bound), bound elsewhere (refused), or not bound.
After a Binding of unknown outcome, a bind of the pod to another node is refused for
BINDING_SETTLE_SECONDS, while the first Binding may still be applied.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from hygon_dcu_plugin.config import kube_name_problem
from hygon_dcu_plugin.extender.decide import (
    BINPACK,
    NODE_POLICIES,
    NodeState,
    NotPlaced,
    Placed,
    score,
)
from hygon_dcu_plugin.extender.kube import (
    BindingRefused,
    ExtenderApi,
    KubeApiError,
    PodChanged,
    PodInfo,
)
from hygon_dcu_plugin.extender.node_locks import NamedLocks
from hygon_dcu_plugin.extender.place_memo import PlaceMemo
from hygon_dcu_plugin.extender.slice_decide import place_slices
from hygon_dcu_plugin.extender.state import NO_GEOMETRY, ExtenderState, PodReservation
from hygon_dcu_plugin.extender.wire import (
    BindingArgs,
    ExtenderArgs,
    binding_result,
    filter_result,
    priority_list,
)
from hygon_dcu_plugin.pod_rules import read_pod
from hygon_dcu_plugin.request import PartitionRequest, SliceRequest
from hygon_dcu_plugin.reservation import (
    MAX_CONTAINERS,
    Reservation,
    ReservationError,
    Reserved,
    ReservedSlice,
)
from hygon_dcu_plugin.reservation import decode as decode_reservation
from hygon_dcu_plugin.reservation import encode as encode_reservation
from hygon_dcu_plugin.shown import shorten
from hygon_dcu_plugin.vocabulary import RESERVATION_ANNOTATION, SCHEDULER_NAME

log = logging.getLogger(__name__)

# A bind waits this long for the binds before it on the same node, and for the one of the
# same pod.
BIND_LOCK_SECONDS = 10.0
# How long the API server may still apply a Binding whose answer never came: its request
# timeout (kube-apiserver --request-timeout, 60 s by default).
BINDING_SETTLE_SECONDS = 60.0

Requests = list[tuple[str, PartitionRequest]]


@dataclass(frozen=True)
class Asked:
    """What the app containers of a pod ask of this extender: partitions or logical slices."""

    partitions: Requests
    slices: list[tuple[str, SliceRequest]]

    def __bool__(self) -> bool:
        return bool(self.partitions or self.slices)


class Verb(StrEnum):
    """The scheduler's calls, each POSTed to ``/<verb>``."""

    FILTER = "filter"
    PRIORITIZE = "prioritize"
    BIND = "bind"


class BindOutcome(StrEnum):
    """The ``outcome`` label of hygon_dcu_extender_binds_total."""

    BOUND = "bound"
    REUSED = "reused"  # a retried bind: the reservation made before was bound
    ALREADY_BOUND = "already-bound"
    NO_FIT = "no-fit"
    REFUSED_POD = "refused-pod"
    POD_CHANGED = "pod-changed"
    POD_GONE = "pod-gone"
    BINDING_REFUSED = "binding-refused"
    API_ERROR = "api-error"
    BUSY = "busy"
    NOT_READY = "not-ready"
    # An earlier Binding of the pod, to another node, has an unknown outcome.
    EARLIER_BIND = "earlier-bind"


@dataclass(frozen=True)
class BindAnswer:
    outcome: BindOutcome
    error: str = ""

    def result(self) -> dict[str, Any]:
        return binding_result(self.error)


def pod_requests(pod: Mapping[str, Any]) -> Asked | str:
    """The partition or slice request of each app container of the pod, or why it cannot be
    served."""
    reading = read_pod(pod)
    if reading.findings.total:
        return reading.findings.message()
    asked = Asked(list(reading.partitions), list(reading.slices))
    names = [name for name, _request in [*asked.partitions, *asked.slices]]
    for name in names:
        if kube_name_problem(name, subdomain=False):
            return f"container name {shorten(name)!r} is not a container name"
    if len(names) > MAX_CONTAINERS:
        return (
            f"the pod has {len(names)} partition or slice containers; at most "
            f"{MAX_CONTAINERS} can be reserved at once"
        )
    return asked


class Extender:
    def __init__(
        self,
        state: ExtenderState,
        api: ExtenderApi,
        *,
        policy: str = BINPACK,
        clock: Callable[[], float] = time.time,
        lock_seconds: float = BIND_LOCK_SECONDS,
        scheduler_name: str = SCHEDULER_NAME,
        settle_seconds: float = BINDING_SETTLE_SECONDS,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if policy not in NODE_POLICIES:
            raise ValueError(f"unknown node policy {policy!r}; use one of {NODE_POLICIES}")
        self.state = state
        self.api = api
        self.policy = policy
        self._clock = clock
        self._lock_seconds = lock_seconds
        self.scheduler_name = scheduler_name
        self.locks = NamedLocks()  # by node name
        self.pod_locks = NamedLocks()  # by pod uid
        self._settle_seconds = settle_seconds
        self._monotonic = monotonic
        self._unsettled_lock = threading.Lock()
        # pod uid -> (node, until): its last Binding's outcome is unknown until then
        self._unsettled: dict[str, tuple[str, float]] = {}
        self.places = PlaceMemo()

    @property
    def ready(self) -> bool:
        return self.state.ready

    def filter(self, args: ExtenderArgs) -> dict[str, Any]:
        verdict = pod_requests(args.pod_object)
        if isinstance(verdict, str):
            why = f"the pod's partition request cannot be served: {verdict}"
            return filter_result([], dict.fromkeys(args.node_names, why))
        if not verdict:
            return filter_result(args.node_names, {})
        passed: list[str] = []
        failed: dict[str, str] = {}
        for view in self.state.node_states(args.node_names, args.pod.uid):
            placed = self._place(view, verdict)
            if isinstance(placed, NotPlaced):
                failed[view.name] = placed.why
            else:
                passed.append(view.name)
        return filter_result(passed, failed)

    def prioritize(self, args: ExtenderArgs) -> list[dict[str, Any]]:
        verdict = pod_requests(args.pod_object)
        if isinstance(verdict, str) or not verdict:
            return priority_list(dict.fromkeys(args.node_names, 0))
        scores: dict[str, int] = {}
        for view in self.state.node_states(args.node_names, args.pod.uid):
            placed = self._place(view, verdict)
            scores[view.name] = 0 if isinstance(placed, NotPlaced) else score(placed, self.policy)
        return priority_list(scores)

    def _place(self, view: NodeState, asked: Asked) -> Placed | NotPlaced:
        if asked.slices:
            return place_slices(view, asked.slices)
        return self.places.place(view, asked.partitions)

    def bind(self, args: BindingArgs) -> BindAnswer:
        if not self.ready:
            return BindAnswer(BindOutcome.NOT_READY, "the extender has not read the cluster yet")
        with self.pod_locks.holding(args.pod.uid, self._lock_seconds) as acquired:
            if not acquired:
                return BindAnswer(
                    BindOutcome.BUSY,
                    f"pod {args.pod.key} is still being bound by an earlier request (waited "
                    f"{self._lock_seconds:g} s); the scheduler will retry",
                )
            earlier = self._earlier_binding(args)
            if earlier:
                return BindAnswer(BindOutcome.EARLIER_BIND, earlier)
            return self._bind(args)

    def _earlier_binding(self, args: BindingArgs) -> str:
        """Why the pod cannot be bound to ``args.node`` yet: an earlier Binding of it to
        another node has an unknown outcome and may still be applied; "" otherwise."""
        now = self._monotonic()
        with self._unsettled_lock:
            self._unsettled = {uid: e for uid, e in self._unsettled.items() if e[1] > now}
            entry = self._unsettled.get(args.pod.uid)
        if entry is None or entry[0] == args.node:
            return ""
        node, until = entry
        return (
            f"the earlier bind of pod {args.pod.key} to {node} has an unknown outcome (the API "
            f"server may still apply it for {until - now:.0f} s); not binding it to "
            f"{args.node} meanwhile; the scheduler will retry"
        )

    def _settled(self, uid: str, unknown_on: str = "") -> None:
        """Record how the pod's last Binding ended: known, or unknown on node ``unknown_on``."""
        with self._unsettled_lock:
            if unknown_on:
                self._unsettled[uid] = (unknown_on, self._monotonic() + self._settle_seconds)
            else:
                self._unsettled.pop(uid, None)

    def _bind(self, args: BindingArgs) -> BindAnswer:
        """Under the pod's lock: reserve under the node's, then create the Binding."""
        with self.locks.holding(args.node, self._lock_seconds) as acquired:
            if not acquired:
                return BindAnswer(
                    BindOutcome.BUSY,
                    f"node {args.node} is busy with other binds (waited "
                    f"{self._lock_seconds:g} s); the scheduler will retry",
                )
            try:
                prepared = self._reserve(args)
            except PodChanged as error:
                return BindAnswer(BindOutcome.POD_CHANGED, f"{error}; the scheduler will retry")
            except KubeApiError as error:
                return BindAnswer(BindOutcome.API_ERROR, str(error))
        if isinstance(prepared, BindAnswer):
            if prepared.outcome is BindOutcome.ALREADY_BOUND:
                self._settled(args.pod.uid)
            return prepared
        pod, entry, created = prepared
        try:
            self.api.bind_pod(pod.ref, args.node)
        except BindingRefused as error:
            self._settled(pod.ref.uid)
            if entry is not None and created:
                self.state.forget(entry)
            return BindAnswer(BindOutcome.BINDING_REFUSED, str(error))
        except KubeApiError as error:
            # The pod may be bound all the same: its reservation stays until the release
            # rules see the pod carved, gone or bound elsewhere, and no bind to another node
            # rewrites it while this Binding may still land.
            self._settled(pod.ref.uid, unknown_on=args.node)
            log.warning(
                "binding_outcome_unknown",
                extra={"pod": pod.ref.name, "namespace": pod.ref.namespace, "error": str(error)},
            )
            return BindAnswer(BindOutcome.API_ERROR, str(error))
        self._settled(pod.ref.uid)
        outcome = BindOutcome.BOUND if created or entry is None else BindOutcome.REUSED
        log.info(
            "bound",
            extra={
                "namespace": pod.ref.namespace,
                "pod": pod.ref.name,
                "uid": pod.ref.uid,
                "node": args.node,
                "outcome": outcome.value,
                "reserved": {
                    **{
                        name: f"{r.card} {r.profile} {r.start}:{r.size}"
                        for name, r in sorted((entry.containers if entry else {}).items())
                    },
                    **{
                        name: f"{r.card} slice {r.compute_units}cu {r.memory_mib}MiB"
                        for name, r in sorted((entry.slices if entry else {}).items())
                    },
                },
            },
        )
        return BindAnswer(outcome)

    def _reserve(
        self, args: BindingArgs
    ) -> tuple[PodInfo, PodReservation | None, bool] | BindAnswer:
        """Under the node's lock: the pod, its reservation on the node (None when it asks for
        no partition and no slice) and whether this call made it; or the answer when it cannot
        be bound."""
        node, want = args.node, args.pod
        pod = self.api.get_pod(want.namespace, want.name)
        if pod is None or pod.ref.uid != want.uid:
            return BindAnswer(
                BindOutcome.POD_GONE,
                f"pod {want.key} (uid {want.uid}) no longer exists"
                + ("" if pod is None else "; a different pod has that name now"),
            )
        if pod.deleting:
            return BindAnswer(BindOutcome.POD_GONE, f"pod {want.key} is being deleted")
        spec = pod.raw.get("spec")
        named = spec.get("schedulerName") if isinstance(spec, Mapping) else None
        if named != self.scheduler_name:
            # Only the pods of its own scheduler: a bind request for any other pod is not
            # from that scheduler, whoever sent it.
            return BindAnswer(
                BindOutcome.REFUSED_POD,
                f"pod {want.key} names scheduler {shorten(str(named))!r}, not "
                f"{self.scheduler_name!r}; this extender binds only that scheduler's pods",
            )
        if pod.node_name:
            # Bound by the bind before this one (a retry after the scheduler's httpTimeout):
            # that bind's answer, and never a second node.
            if pod.node_name == node:
                return BindAnswer(BindOutcome.ALREADY_BOUND)
            return BindAnswer(
                BindOutcome.POD_CHANGED, f"pod {want.key} is already bound to {pod.node_name}"
            )
        verdict = pod_requests(pod.raw)
        if isinstance(verdict, str):
            return BindAnswer(
                BindOutcome.REFUSED_POD,
                f"the pod's partition request cannot be served: {verdict}",
            )
        if not verdict:
            return pod, None, False
        reused = self._reusable(pod, node)
        if reused is not None:
            return pod, reused, False
        lease = self.api.get_lease(self.state.namespace, node)
        if lease is None:
            view = NodeState(node, None, NO_GEOMETRY)
        else:
            view = self.state.node_state(node, pod.ref.uid, lease=lease)
        placed = self._place(view, verdict)
        if isinstance(placed, NotPlaced):
            return BindAnswer(BindOutcome.NO_FIT, f"node {node} cannot place the pod: {placed.why}")
        reservation = Reservation(
            node,
            self._clock(),
            {a.container: Reserved(a.card, a.profile, a.start, a.size) for a in placed.assignments},
            {
                a.container: ReservedSlice(a.card, a.compute_units, a.memory_mib)
                for a in placed.slices
            },
        )
        self.api.reserve_pod(pod, encode_reservation(reservation))
        return pod, self.state.hold(pod.ref, reservation), True

    def _reusable(self, pod: PodInfo, node: str) -> PodReservation | None:
        """The table's entry for the pod when its annotation reserves exactly that on this
        node: a bind retried after the first one wrote it."""
        text = pod.annotations.get(RESERVATION_ANNOTATION)
        entry = self.state.reservation_of(pod.ref.uid)
        if text is None or entry is None or entry.node != node:
            return None
        try:
            reservation = decode_reservation(text)
        except ReservationError:
            return None
        if (
            reservation.node != node
            or dict(reservation.containers) != dict(entry.containers)
            or dict(reservation.slices) != dict(entry.slices)
        ):
            return None
        return entry
