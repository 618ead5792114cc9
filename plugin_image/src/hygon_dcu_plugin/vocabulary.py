"""Kubernetes resource names served by the plugin, and the names it writes.

How a container's limits map onto these names is read in one place: ``request.py``.
"""

from __future__ import annotations

import hashlib
from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .request import Reason

VENDOR_PREFIX = "hygon.com/"
WHOLE_CARD = VENDOR_PREFIX + "dcu"
# Never served here; listed so nobody reuses the name for something else.
SLICED = "hygon.com/dcu.sliced"
FAMILY = "hygon.com/dcu.partitioned"
PROFILE_PREFIX = FAMILY + ".mig-"

# Requests by size: the family at 1 plus the DCU memory in MiB, and optionally a minimum of
# compute units; the smallest profile of the node that covers both is carved (request.py).
MEMORY_MIB = FAMILY + ".memory-mib"
COMPUTE_UNITS = FAMILY + ".compute-units"
SIZE_RESOURCES = (MEMORY_MIB, COMPUTE_UNITS)

ANNOTATION_PREFIX = "hygon.com/dcu.partition."
# The part of an annotation key after "/" is at most 63 characters.
_KEY_NAME_MAX = 63
ENV_VISIBLE_DEVICE = "DMI_MIG_VISIBLE_DEVICE"

# Names the roles set and select on; the plugin itself never reads them. They live here so the
# roles' copies are generated from one place (plugin_image/tools/generate_role_vocabulary.py).
PRESENT_LABEL = VENDOR_PREFIX + "dcu.present"  # node: a Hygon node (the DaemonSet's selector)
PARK_LABEL = VENDOR_PREFIX + "dcu.device-plugin"  # node: "parked" during a mode switch
EVICT_LABEL = VENDOR_PREFIX + "dcu.evict"  # pod: marked for eviction by mig_node
ADMISSION_SCOPE_LABEL = VENDOR_PREFIX + "dcu.admission"  # namespace: the webhook's scope
CONFIG_HASH_ANNOTATION = VENDOR_PREFIX + "config-sha256"  # pod template: rolls on a new config

# The scheduler extender (docs/dev/extender.md). The device plugin publishes its node's geometry
# as an annotation of a Lease named after the node, labelled GEOMETRY_LABEL, in its own
# namespace; the extender reserves card + placement per container in RESERVATION_ANNOTATION of
# the pod before it binds it, and the allocator carves exactly there.
GEOMETRY_ANNOTATION = VENDOR_PREFIX + "dcu.geometry"
GEOMETRY_LABEL = VENDOR_PREFIX + "dcu.geometry"
GEOMETRY_LABEL_VALUE = "v1"
GEOMETRY_SELECTOR = f"{GEOMETRY_LABEL}={GEOMETRY_LABEL_VALUE}"
RESERVATION_ANNOTATION = VENDOR_PREFIX + "dcu.reservation"
# Set with the reservation, so the extender finds reserved pods with one labelled list.
RESERVED_LABEL = VENDOR_PREFIX + "dcu.reserved"
SCHEDULER_NAME = "hygon-dcu-scheduler"  # the second scheduler's default profile name

# Placement policies (the plugin's `policy` setting; placement.py implements them).
PACK = "pack"
SPREAD = "spread"
POLICIES = (PACK, SPREAD)


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
}


class RequestRefused(Exception):
    """An Allocate the plugin will not serve; the message tells the user what to change.

    ``reason`` is the AllocateRefusal; ``request_reason`` is the request model's Reason when
    the container's own resources are what is wrong (``for_request``).
    """

    def __init__(self, reason: AllocateRefusal, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.request_reason: Reason | None = None

    @classmethod
    def for_request(cls, request_reason: Reason, message: str) -> RequestRefused:
        """Refused for the container's own resources: the refusal is the reason's."""
        refused = cls(request_reason.refusal, message)
        refused.request_reason = request_reason
        return refused


def annotation_key(container: str) -> str:
    """The pod annotation key of a container's grant (the value names the container too).

    The container name itself when the key stays legal (up to 49 characters); else a digest
    of it behind "sha256_", which no container name can look like (container names have no
    "_"), so two containers of a pod never share a key.
    """
    key = ANNOTATION_PREFIX + container
    if len(key.split("/", 1)[1]) <= _KEY_NAME_MAX:
        return key
    digest = hashlib.sha256(container.encode()).hexdigest()
    room = _KEY_NAME_MAX - len(ANNOTATION_PREFIX.split("/", 1)[1]) - len("sha256_")
    return f"{ANNOTATION_PREFIX}sha256_{digest[:room]}"


def profile_resource(profile_name: str) -> str:
    return PROFILE_PREFIX + profile_name


def socket_name(resource: str) -> str:
    """Socket file name for a resource, unique inside the kubelet's device-plugin directory."""
    return "hygon-dcu-" + resource.split("/", 1)[1].replace("/", "-") + ".sock"
