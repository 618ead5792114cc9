"""Kubernetes resource names served by the plugin, and the names it writes.

How a container's limits map onto these names is read in one place: ``request.py``.
"""

from __future__ import annotations

import hashlib

VENDOR_PREFIX = "hygon.com/"
WHOLE_CARD = VENDOR_PREFIX + "dcu"
# A logical slice of a card (the vendor's virtual device) on a node with the mode off: the
# family at 1 plus its memory in MiB, and optionally its compute units (request.py).
SLICED = VENDOR_PREFIX + "dcu.sliced"
SLICE_MEMORY_MIB = SLICED + ".memory-mib"
SLICE_COMPUTE_UNITS = SLICED + ".compute-units"
SLICE_SIZE_RESOURCES = (SLICE_MEMORY_MIB, SLICE_COMPUTE_UNITS)
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
# node: where mig_node's last mode switch stands: pending, then success or failed (the
# capability labels beside it are module_utils/node_labels.py's)
MIG_STATE_LABEL = VENDOR_PREFIX + "dcu.mig.config.state"

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
RESERVED_VALUE = "true"
SCHEDULER_NAME = "hygon-dcu-scheduler"  # the second scheduler's default profile name

# Placement policies (the plugin's `policy` setting; placement.py implements them).
PACK = "pack"
SPREAD = "spread"
POLICIES = (PACK, SPREAD)


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
