"""Partition tokens in use: which ids the kubelet lists as assigned, and how many partitions
our grants hold (what ``advertise.partition_plan`` keeps Healthy)."""

from __future__ import annotations

import logging

from .grants import GrantStore
from .podresources import PodLister, PodResourcesError
from .vocabulary import FAMILY, PROFILE_PREFIX, profile_resource

log = logging.getLogger(__name__)


def held_tokens(store: GrantStore, lister: PodLister) -> tuple[dict[str, set[str]], dict[str, int]]:
    """Token ids the kubelet lists as assigned, and partitions our grants hold, per resource."""
    in_use: dict[str, set[str]] = {}
    held: dict[str, int] = {}
    for grant in store.load():
        in_use.setdefault(FAMILY, set()).update(grant.device_ids)
        held[FAMILY] = held.get(FAMILY, 0) + 1
        resource = profile_resource(grant.profile)
        held[resource] = held.get(resource, 0) + 1
    try:
        listed = lister.list()
    except PodResourcesError as exc:
        log.warning(
            "PodResources List failed; counting held tokens from grants only",
            extra={"error": str(exc)},
        )
        listed = []
    for pod in listed:
        for container in pod.containers:
            for resource, ids in container.devices.items():
                if resource == FAMILY or resource.startswith(PROFILE_PREFIX):
                    in_use.setdefault(resource, set()).update(ids)
    return in_use, held
