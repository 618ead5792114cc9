"""Which container an Allocate call serves.

Allocate carries only device ids. The kubelet lists the pod it is admitting in PodResources
before calling us, with no device yet for the container being allocated, but the same List
also shows pods it already rejected, terminating and completed pods (all with empty device
lists, in no stable order). So: keep containers whose pod (read from the API server) requests
the resource and is neither terminal nor terminating; the API can lag the kubelet, and the
kubelet admits pods one at a time in creation order, so a stale entry is always OLDER than the
pod being admitted: the newest candidate wins. Within a pod, containers are allocated one per
call in spec order, init containers first; an app container may reuse an init container's
device id, and then it reuses that init container's partition.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from hygon_dcu_plugin.deviceplugin.podresources import ListedPod, PodLister, PodResourcesError
from hygon_dcu_plugin.deviceplugin.refused import RequestRefused
from hygon_dcu_plugin.kube import ContainerSpec, KubeApi, KubeApiError, Pod
from hygon_dcu_plugin.refusal import AllocateRefusal

log = logging.getLogger(__name__)


class Claim(Protocol):
    """What identification reads of a grant (a partition's or a slice's)."""

    @property
    def pod_uid(self) -> str: ...

    @property
    def containers(self) -> tuple[str, ...]: ...

    @property
    def device_ids(self) -> tuple[str, ...]: ...


ClaimT = TypeVar("ClaimT", bound=Claim)


@dataclass(frozen=True)
class Target(Generic[ClaimT]):
    pod: Pod
    container: ContainerSpec
    # A live grant of this pod holding one of the requested ids: answer with its partition
    # (a retried call for the same container, or an app container reusing an init container's).
    reuse: ClaimT | None = None


def pod_lookup(kube: KubeApi, node_name: str | None) -> Callable[[str, str], Pod | None]:
    """Pods by namespace and name for one identification: the node's pods in one list (the
    kubelet's List shows every pod on the node), a get for one the list lacks; None = gone."""
    cache: dict[tuple[str, str], Pod | None] = {}
    if node_name:
        try:
            pods = kube.list_node_pods(node_name)
        except KubeApiError as exc:
            log.warning(
                "listing this node's pods failed; asking pod by pod", extra={"error": str(exc)}
            )
            pods = []
        cache.update({(p.namespace, p.name): p for p in pods})

    def lookup(namespace: str, name: str) -> Pod | None:
        if (namespace, name) not in cache:
            cache[(namespace, name)] = kube.get_pod(namespace, name)
        return cache[(namespace, name)]

    return lookup


def _requesting(pod: Pod, resource: str) -> list[ContainerSpec]:
    """Containers of the pod that ask for the resource, in the kubelet's allocation order."""
    return [c for c in (*pod.init_containers, *pod.containers) if resource in c.limits]


def _pending(
    pod: Pod, listed: ListedPod, resource: str, grants: Sequence[Claim]
) -> ContainerSpec | None:
    done = {name for r in grants if r.pod_uid == pod.uid for name in r.containers}
    app_names = {c.name for c in pod.containers}
    listed_devices = {c.name: c.devices.get(resource, ()) for c in listed.containers}
    for container in _requesting(pod, resource):
        if container.name in done:
            continue
        if container.name in app_names and listed_devices.get(container.name):
            # The kubelet already holds a device for it: not the one being admitted.
            continue
        return container
    return None


def identify(
    resource: str,
    device_ids: Sequence[str],
    listed: Sequence[ListedPod],
    lookup: Callable[[str, str], Pod | None],
    grants: Sequence[ClaimT],
) -> Target[ClaimT]:
    candidates: list[tuple[Pod, ListedPod]] = []
    for entry in listed:
        if all(c.devices.get(resource) for c in entry.containers):
            continue
        pod = lookup(entry.namespace, entry.name)
        if pod is None or pod.terminal or pod.deleting:
            continue
        if not _requesting(pod, resource):
            continue
        candidates.append((pod, entry))

    wanted = set(device_ids)
    for pod, entry in candidates:
        for grant in grants:
            if grant.pod_uid == pod.uid and wanted & set(grant.device_ids):
                pending = _pending(pod, entry, resource, grants)
                if pending is None:
                    pending = next(
                        c for c in _requesting(pod, resource) if c.name == grant.containers[-1]
                    )
                return Target(pod=pod, container=pending, reuse=grant)

    waiting = [
        (pod, container)
        for pod, entry in candidates
        if (container := _pending(pod, entry, resource, grants)) is not None
    ]
    if not waiting:
        raise RequestRefused(
            AllocateRefusal.UNIDENTIFIED,
            f"no container waiting for {resource} was found in the kubelet's PodResources "
            "List (among pods that request it and are neither terminal nor terminating); "
            "delete and recreate the pod",
        )
    waiting.sort(key=lambda item: (item[0].created, item[0].key))
    if len(waiting) > 1:
        log.info(
            "several containers wait for a partition; serving the newest pod",
            extra={"chosen": waiting[-1][0].key, "older": [p.key for p, _ignored in waiting[:-1]]},
        )
    pod, container = waiting[-1]
    return Target(pod=pod, container=container)


def identify_admitted(
    resource: str,
    device_ids: Sequence[str],
    grants: Sequence[ClaimT],
    *,
    lister: PodLister,
    kube: KubeApi,
    node_name: str | None,
) -> tuple[Target[ClaimT], list[ListedPod]]:
    """The container an Allocate call serves, from the kubelet's PodResources List (refused
    KUBELET_UNREACHABLE when the kubelet cannot answer), and that List."""
    try:
        listed = lister.list()
    except PodResourcesError as exc:
        raise RequestRefused(
            AllocateRefusal.KUBELET_UNREACHABLE,
            f"cannot ask the kubelet which container is being admitted: {exc}",
        ) from exc
    lookup = pod_lookup(kube, node_name)
    return identify(resource, device_ids, listed, lookup, grants), listed
