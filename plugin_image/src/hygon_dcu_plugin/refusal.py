"""Why Allocate refuses a container: the refusal labels and their gRPC status. The request
grammar (``request.py``) maps each of its reasons onto a label here; nothing here knows the
grammar. The device plugin carries a refusal to the kubelet (``deviceplugin/refused.py``).
"""

from __future__ import annotations

from enum import StrEnum


class AllocateRefusal(StrEnum):
    """Why Allocate refuses a container: the ``reason`` label of
    hygon_dcu_allocation_failures_total (docs/image.md lists them; dashboards and alerts
    select on them), each answered to the kubelet with its gRPC status (``status``).

    A container refused for its own resources gets its request model reason's refusal
    (``request.Reason.refusal``).
    """

    BAD_REQUEST = "bad_request"
    NO_PROFILE = "no_profile"
    TWO_PROFILES = "two_profiles"
    TOO_MANY = "too_many"
    UNKNOWN_PROFILE = "unknown_profile"
    NO_CAPACITY = "no_capacity"
    UNIDENTIFIED = "unidentified"
    KUBELET_UNREACHABLE = "kubelet_unreachable"
    STALE_GRANT = "stale_grant"
    CARD_UNHEALTHY = "card_unhealthy"
    POISONED_REGISTRY = "poisoned_registry"
    RESERVATION_TAKEN = "reservation_taken"
    BAD_RESERVATION = "bad_reservation"
    GRANTS_STORE = "grants_store"
    SLICES_UNREADABLE = "slices_unreadable"
    SLICE_TOO_LARGE = "slice_too_large"
    CARD_SLICED = "card_sliced"

    @property
    def status(self) -> str:
        """The name of the grpc.StatusCode the kubelet is answered with."""
        return _GRPC_STATUS[self]


# The spec is wrong: INVALID_ARGUMENT; the node cannot serve it now: RESOURCE_EXHAUSTED or
# FAILED_PRECONDITION. Names, not grpc's enum, so the webhook (which imports this module)
# does not load grpc.
_GRPC_STATUS = {
    AllocateRefusal.BAD_REQUEST: "INVALID_ARGUMENT",
    AllocateRefusal.NO_PROFILE: "INVALID_ARGUMENT",
    AllocateRefusal.TWO_PROFILES: "INVALID_ARGUMENT",
    AllocateRefusal.TOO_MANY: "INVALID_ARGUMENT",
    AllocateRefusal.UNKNOWN_PROFILE: "FAILED_PRECONDITION",
    AllocateRefusal.NO_CAPACITY: "RESOURCE_EXHAUSTED",
    AllocateRefusal.UNIDENTIFIED: "FAILED_PRECONDITION",
    AllocateRefusal.KUBELET_UNREACHABLE: "FAILED_PRECONDITION",
    AllocateRefusal.STALE_GRANT: "FAILED_PRECONDITION",
    AllocateRefusal.CARD_UNHEALTHY: "FAILED_PRECONDITION",
    AllocateRefusal.POISONED_REGISTRY: "FAILED_PRECONDITION",
    AllocateRefusal.RESERVATION_TAKEN: "FAILED_PRECONDITION",
    AllocateRefusal.BAD_RESERVATION: "FAILED_PRECONDITION",
    AllocateRefusal.GRANTS_STORE: "FAILED_PRECONDITION",
    AllocateRefusal.SLICES_UNREADABLE: "FAILED_PRECONDITION",
    AllocateRefusal.SLICE_TOO_LARGE: "FAILED_PRECONDITION",
    AllocateRefusal.CARD_SLICED: "FAILED_PRECONDITION",
}
