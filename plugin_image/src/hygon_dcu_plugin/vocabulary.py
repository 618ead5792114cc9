"""Kubernetes resource names served by the plugin and how a pod's limits map onto them."""

from __future__ import annotations

from collections.abc import Mapping

WHOLE_CARD = "hygon.com/dcu"
# Never served here; listed so nobody reuses the name for something else.
SLICED = "hygon.com/dcu.sliced"
FAMILY = "hygon.com/dcu.partitioned"
PROFILE_PREFIX = FAMILY + ".mig-"

ANNOTATION_PREFIX = "hygon.com/dcu.partition."
ENV_VISIBLE_DEVICE = "DMI_MIG_VISIBLE_DEVICE"


class RequestRefused(Exception):
    """An Allocate the plugin will not serve; the message tells the user what to change."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def profile_resource(profile_name: str) -> str:
    return PROFILE_PREFIX + profile_name


def socket_name(resource: str) -> str:
    """Socket file name for a resource, unique inside the kubelet's device-plugin directory."""
    return "hygon-dcu-" + resource.split("/", 1)[1].replace("/", "-") + ".sock"


def _quantity(value: object) -> int | None:
    text = str(value).strip()
    return int(text) if text.isdigit() else None


def requested_profile(container: str, limits: Mapping[str, object]) -> str:
    """The one profile a container's limits ask for, or RequestRefused saying what is wrong.

    The admission webhook refuses these shapes up front; checking again here keeps a pod
    created while the webhook was down from getting a half-right partition.
    """
    family = limits.get(FAMILY)
    if family is None or _quantity(family) != 1:
        raise RequestRefused(
            "bad_request",
            f"container {container!r} must set limits {FAMILY}: 1 (has {family!r}); "
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
            f"container {container!r} requests {limits[profile_resource(profiles[0])]!r} of "
            f"{profile_resource(profiles[0])}: the quantity must be 1",
        )
    return profiles[0]
