"""Lost grants: a live pod whose partition no longer exists.

After a power loss the instances are gone, but the kubelet restarts the pod's containers from
its checkpoint (it never calls Allocate again): the conf file it binds is missing, the runtime
creates a directory there, and the workload sees no device while the pod reads Running. Only
the pod's controller can fix that, by recreating the pod. So a lost grant gets a Warning Event
and a metric at once; with ``delete_pods_with_lost_partitions`` the pod is deleted (uid
guarded). The grant itself goes the usual way once the pod is gone (stale: nothing to
destroy), and the reclaimer sweeps the directory.

Lost means certain: the GPU instance the grant names is not live, or it is live with a
readable uuid that is not the grant's. An instance whose uuid cannot be read is not lost.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from ansible_collections.hygon.dcu.plugins.module_utils.node import Instance

from hygon_dcu_plugin.deviceplugin.events import WARNING, PodEvents
from hygon_dcu_plugin.deviceplugin.grants import Grant
from hygon_dcu_plugin.deviceplugin.metrics import LabelKey, Metrics
from hygon_dcu_plugin.kube import KubeApi, KubeApiError, Pod

log = logging.getLogger(__name__)

REASON = "PartitionLost"


def grant_lost(grant: Grant, live_on_card: list[Instance]) -> bool:
    """True only when the grant's instance is certainly gone (see the module doc)."""
    at = [i for i in live_on_card if i.gpu_instance_id == grant.gpu_instance_id]
    if any(i.uuid == grant.uuid for i in at):
        return False
    return all(i.uuid is not None for i in at)


class LostGrants:
    def __init__(
        self,
        kube: KubeApi,
        events: PodEvents,
        metrics: Metrics,
        *,
        delete_pods: bool,
        count: Callable[[str], None],
    ) -> None:
        self._kube = kube
        self._events = events
        self._metrics = metrics
        self._delete_pods = delete_pods
        self._count = count
        self._seen: dict[LabelKey, float] = {}

    def begin_pass(self) -> None:
        self._seen = {}

    def found(self, grant: Grant, pod: Pod) -> None:
        containers = ", ".join(grant.containers)
        labels = (("namespace", grant.namespace), ("pod", grant.pod_name))
        self._seen[labels] = self._seen.get(labels, 0.0) + 1
        self._count("partition_lost")
        fix = (
            "the plugin deletes the pod so its controller recreates it"
            if self._delete_pods
            else "delete the pod so its controller recreates it (or set "
            "delete_pods_with_lost_partitions: true in the plugin's config)"
        )
        message = (
            f"partition {grant.profile} (uuid {grant.uuid}, card {grant.card_pci}, GPU "
            f"instance {grant.gpu_instance_id}) of container {containers} no longer exists "
            "(node power loss or reboot, or destroyed by hand): the container sees no device. "
            + fix[0].upper()
            + fix[1:]
        )
        log.warning("partition lost", extra={"pod": grant.pod_key, "uuid": grant.uuid, "fix": fix})
        self._events.emit(pod.ref, WARNING, REASON, message)
        if self._delete_pods and not pod.deleting:
            try:
                self._kube.delete_pod_with_uid(pod.ref)
            except KubeApiError as exc:
                log.error(
                    "cannot delete the pod whose partition is lost",
                    extra={"pod": grant.pod_key, "error": str(exc)},
                )
                return
            self._count("lost_pod_deleted")
            log.warning("deleted a pod whose partition is lost", extra={"pod": grant.pod_key})

    def end_pass(self) -> None:
        self._metrics.lost_partitions.set_all(dict(self._seen))
