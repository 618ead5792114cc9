"""Partition tokens in use: which ids the kubelet lists as assigned, and which of our grants it
does not list yet (``advertise.partition_plan`` keeps a free token Healthy for each).

A listed id stands for a grant only when it is listed on that grant's own container. A pod
whose deletion has started keeps its ids listed (and counted by the kubelet) until it is gone,
though its partition may already be reclaimed; its ids stand for no grant, so they never hide
a new grant that still needs a token (docs/dev/kubernetes.md, "Scheduling").
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from hygon_dcu_plugin.deviceplugin.grants import Grant, GrantStore
from hygon_dcu_plugin.deviceplugin.podresources import (
    ListedContainer,
    ListedPod,
    PodLister,
    PodResourcesError,
)
from hygon_dcu_plugin.deviceplugin.slice_grants import SliceGrant
from hygon_dcu_plugin.vocabulary import FAMILY, PROFILE_PREFIX, SLICED, profile_resource

log = logging.getLogger(__name__)


def held_tokens(store: GrantStore, lister: PodLister) -> tuple[dict[str, set[str]], dict[str, int]]:
    """Token ids the kubelet lists as assigned, and per resource the grants it does not list
    with an id of that resource."""
    grants = store.load().grants
    try:
        listed = lister.list()
    except PodResourcesError as exc:
        log.warning(
            "PodResources List failed; counting held tokens from grants only",
            extra={"error": str(exc)},
        )
        listed = []
    in_use: dict[str, set[str]] = {}
    for pod in listed:
        for container in pod.containers:
            for resource, ids in container.devices.items():
                if resource == FAMILY or resource.startswith(PROFILE_PREFIX):
                    in_use.setdefault(resource, set()).update(ids)
    unlisted: dict[str, int] = {}
    owners = _Owners(listed)
    for grant in grants:
        # The grant's family ids are what the kubelet gave it: always in use.
        in_use.setdefault(FAMILY, set()).update(grant.device_ids)
        resource = profile_resource(grant.profile)
        if not any(c.devices.get(resource) for c in owners.of(grant)):
            unlisted[resource] = unlisted.get(resource, 0) + 1
    return in_use, unlisted


class _Owners:
    """The listed containers that are a grant's own."""

    def __init__(self, listed: Sequence[ListedPod]) -> None:
        self._by_family_id: dict[str, list[ListedContainer]] = {}
        self._admitting: dict[tuple[str, str, str], list[ListedContainer]] = {}
        for pod in listed:
            for container in pod.containers:
                family_ids = container.devices.get(FAMILY, ())
                for device_id in family_ids:
                    self._by_family_id.setdefault(device_id, []).append(container)
                if not family_ids:
                    key = (pod.namespace, pod.name, container.name)
                    self._admitting.setdefault(key, []).append(container)

    def of(self, grant: Grant) -> list[ListedContainer]:
        """Containers listed with the grant's family id (the kubelet gives an id to one active
        container at a time, init containers aside); while the kubelet has not listed that id
        yet (its Allocate is under way), the grant's named containers that list no family id.
        A same-named pod still terminating lists its own, other family id: never the grant's."""
        owners = [c for i in grant.device_ids for c in self._by_family_id.get(i, ())]
        if owners:
            return owners
        return [
            c
            for name in grant.containers
            for c in self._admitting.get((grant.namespace, grant.pod_name, name), ())
        ]


def held_slice_tokens(
    slices: Sequence[SliceGrant], listed: Sequence[ListedPod]
) -> tuple[set[str], int]:
    """Slice token ids the kubelet lists as assigned (and every grant's own), and how many
    slice grants it does not list with a slice id yet (their Allocate is under way)."""
    in_use = {i for pod in listed for c in pod.containers for i in c.devices.get(SLICED, ())}
    unlisted = sum(1 for grant in slices if not set(grant.device_ids) & in_use)
    return in_use | {i for grant in slices for i in grant.device_ids}, unlisted
