"""Kubernetes resource names served by the plugin and how a pod's limits map onto them."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

WHOLE_CARD = "hygon.com/dcu"
# Never served here; listed so nobody reuses the name for something else.
SLICED = "hygon.com/dcu.sliced"
FAMILY = "hygon.com/dcu.partitioned"
PROFILE_PREFIX = FAMILY + ".mig-"

ANNOTATION_PREFIX = "hygon.com/dcu.partition."
# The part of an annotation key after "/" is at most 63 characters.
_KEY_NAME_MAX = 63
ENV_VISIBLE_DEVICE = "DMI_MIG_VISIBLE_DEVICE"


class RequestRefused(Exception):
    """An Allocate the plugin will not serve; the message tells the user what to change."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


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


# Quantities the allocator accepts are small whole numbers in ASCII digits; anything else
# (unicode digits, thousands of digits, suffixes the API server did not canonicalise) is "not
# a valid count" rather than an exception.
_MAX_QUANTITY_DIGITS = 18


def _quantity(value: object) -> int | None:
    text = str(value).strip()
    if not text or len(text) > _MAX_QUANTITY_DIGITS or not (text.isascii() and text.isdigit()):
        return None
    return int(text)


def _shown(value: object, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def requested_profile(container: str, limits: Mapping[str, object]) -> str:
    """The one profile a container's limits ask for, or RequestRefused saying what is wrong.

    The admission webhook refuses these shapes up front; checking again here keeps a pod
    created while the webhook was down from getting a half-right partition.
    """
    family = limits.get(FAMILY)
    if family is None or _quantity(family) != 1:
        raise RequestRefused(
            "bad_request",
            f"container {container!r} must set limits {FAMILY}: 1 (has {_shown(family)}); "
            "one container gets exactly one partition",
        )
    profiles = sorted(
        key[len(PROFILE_PREFIX) :] for key in limits if key.startswith(PROFILE_PREFIX)
    )
    if not profiles:
        raise RequestRefused(
            "no_profile",
            f"container {container!r} requests {FAMILY} but no profile: add a limit "
            f"{PROFILE_PREFIX}<profile>: 1 (for example {PROFILE_PREFIX}2g.15gb: 1)",
        )
    if len(profiles) > 1:
        raise RequestRefused(
            "two_profiles",
            f"container {container!r} requests several profiles {profiles}: a container sees "
            "exactly one partition, so request exactly one profile",
        )
    quantity = _quantity(limits[profile_resource(profiles[0])])
    if quantity != 1:
        raise RequestRefused(
            "bad_request",
            f"container {container!r} requests {_shown(limits[profile_resource(profiles[0])])} of "
            f"{profile_resource(profiles[0])}: the quantity must be 1",
        )
    return profiles[0]
