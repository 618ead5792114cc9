"""The scheduler extender's reservation as both allocators read it (docs/dev/extender.md):
decoded from the pod's annotation and checked to name this node, or refused as a whole. What
each allocator then does with its container's entry is its own (a partition's span, a slice's
card and size)."""

from __future__ import annotations

from collections.abc import Mapping

from hygon_dcu_plugin.deviceplugin.refused import RequestRefused
from hygon_dcu_plugin.refusal import AllocateRefusal
from hygon_dcu_plugin.reservation import Reservation, ReservationError, decode
from hygon_dcu_plugin.vocabulary import RESERVATION_ANNOTATION


def bad_reservation(why: str) -> RequestRefused:
    return RequestRefused(
        AllocateRefusal.BAD_RESERVATION,
        f"the pod's {RESERVATION_ANNOTATION} annotation cannot be used: {why}. The scheduler "
        "extender writes it just before it binds the pod; delete the pod so it is scheduled "
        "again (nothing was carved)",
    )


def reservation_taken(why: str, what: str = "partition") -> RequestRefused:
    return RequestRefused(
        AllocateRefusal.RESERVATION_TAKEN,
        f"{why}. The {what} is not made anywhere else, since the scheduler placed the pod for "
        "that reservation; delete the pod so it is scheduled again",
    )


def pod_reservation(annotations: Mapping[str, str], node_name: str | None) -> Reservation | None:
    """The pod's reservation; None without one; BAD_RESERVATION when it cannot be trusted or
    names another node."""
    if RESERVATION_ANNOTATION not in annotations:
        return None
    try:
        reservation = decode(annotations[RESERVATION_ANNOTATION])
    except ReservationError as exc:
        raise bad_reservation(f"{exc}") from exc
    if node_name and reservation.node != node_name:
        raise bad_reservation(
            f"it reserves node {reservation.node!r}, but this is node {node_name!r}"
        )
    return reservation
