"""Every Kubernetes API call the plugin makes, behind one small interface.

`KubeApi` is what the allocator and the reclaimer depend on; `KubernetesApi` is the real one
(the `kubernetes` client). Keep every call in this file and in API_ACCESS,
LOST_POD_DELETE_ACCESS, NODE_LABEL_ACCESS or LEASE_ACCESS below: the RBAC rules of the DaemonSet
are derived from those constants.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

from hygon_dcu_plugin.config import kube_name_problem
from hygon_dcu_plugin.vocabulary import GEOMETRY_ANNOTATION, GEOMETRY_LABEL, GEOMETRY_LABEL_VALUE

# (apiGroup, resource, verb) for every call below; "" is the core group.
API_ACCESS: tuple[tuple[str, str, str], ...] = (
    ("", "pods", "get"),  # get_pod: identify the container, confirm a pod is gone
    ("", "pods", "patch"),  # annotate_pod: the grant's annotation on the pod
    ("", "pods", "list"),  # list_node_pods, and the list behind watch_pods
    ("", "pods", "watch"),  # watch_pods: wake the reclaimer when a pod on this node changes
    ("", "events", "create"),  # create_event: granted, refused, stuck, lost
)
# Granted only with delete_pods_with_lost_partitions (off by default), the one feature that
# calls it: delete_pod_with_uid, a running pod whose partition is lost.
LOST_POD_DELETE_ACCESS: tuple[tuple[str, str, str], ...] = (("", "pods", "delete"),)
# Granted only with node_labels (off by default): node_labels and patch_node_labels, the
# capability labels kept true (deviceplugin/node_labeler.py).
NODE_LABEL_ACCESS: tuple[tuple[str, str, str], ...] = (("", "nodes", "get"), ("", "nodes", "patch"))

# The geometry Lease (docs/dev/extender.md), written by put_geometry_lease. Granted by a Role in
# the plugin's own namespace, NOT by the ClusterRole derived from API_ACCESS: a plugin pod can
# then touch no Lease outside that namespace (no list or watch either: the extender lists them).
LEASE_ACCESS: tuple[tuple[str, str, str], ...] = (
    ("coordination.k8s.io", "leases", "get"),  # put_geometry_lease: the current resourceVersion
    ("coordination.k8s.io", "leases", "create"),  # put_geometry_lease: the first publish
    ("coordination.k8s.io", "leases", "update"),  # put_geometry_lease: every later one
)

TERMINAL_PHASES = ("Succeeded", "Failed")
EVENT_SOURCE = "hygon-dcu-device-plugin"

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ContainerSpec:
    name: str
    limits: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Pod:
    namespace: str
    name: str
    uid: str
    phase: str
    created: float  # creation timestamp, seconds since the epoch
    deleting: bool = False  # deletionTimestamp is set
    containers: tuple[ContainerSpec, ...] = ()
    init_containers: tuple[ContainerSpec, ...] = ()
    annotations: Mapping[str, str] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def terminal(self) -> bool:
        return self.phase in TERMINAL_PHASES

    @property
    def ref(self) -> PodRef:
        return PodRef(self.namespace, self.name, self.uid)


@dataclass(frozen=True)
class PodRef:
    """Enough of a pod to act on exactly that pod (the uid guards against a namesake)."""

    namespace: str
    name: str
    uid: str


@dataclass(frozen=True)
class PodEvent:
    """One change the pod watch saw: kind is ADDED, MODIFIED or DELETED."""

    kind: str
    namespace: str
    name: str
    uid: str


class KubeApiError(Exception):
    """The API server could not be asked (network, auth); nothing can be concluded."""


_NOT_FOUND_RAISES = object()


def api_call(what: str, call: Callable[[], Any], not_found: Any = _NOT_FOUND_RAISES) -> Any:
    """One API call. Every failure becomes a KubeApiError naming what was asked; a 404 is the
    answer ``not_found`` when the caller gave one (the object is gone, which says something)."""
    try:
        return call()
    except ApiException as exc:
        if exc.status == 404 and not_found is not _NOT_FOUND_RAISES:
            return not_found
        raise KubeApiError(f"{what}: HTTP {exc.status} {exc.reason}") from exc
    except Exception as exc:
        raise KubeApiError(f"{what}: {exc}") from exc


def event_about(
    pod: PodRef, kind: str, reason: str, message: str, *, component: str, host: str | None = None
) -> client.CoreV1Event:
    """The Event (kind Normal or Warning) about ``pod`` that ``component`` (on ``host``) records:
    the one builder of the image's programs."""
    now = datetime.now(UTC)
    return client.CoreV1Event(
        metadata=client.V1ObjectMeta(generate_name=f"{pod.name[:200]}.", namespace=pod.namespace),
        involved_object=client.V1ObjectReference(
            api_version="v1", kind="Pod", name=pod.name, namespace=pod.namespace, uid=pod.uid
        ),
        type=kind,
        reason=reason,
        message=message,
        source=client.V1EventSource(component=component, host=host),
        first_timestamp=now,
        last_timestamp=now,
        count=1,
    )


class KubeApi(Protocol):
    def get_pod(self, namespace: str, name: str) -> Pod | None:
        """The pod, or None when the API server confirms it does not exist."""

    def list_node_pods(self, node_name: str) -> list[Pod]:
        """Every pod bound to node_name (one call instead of one get per listed pod)."""

    def annotate_pod(
        self, namespace: str, name: str, uid: str, annotations: dict[str, str]
    ) -> None:
        """Merge annotations into the pod, only if it is still the pod with this uid."""

    def delete_pod_with_uid(self, pod: PodRef) -> None:
        """Delete the pod, only if it is still the pod with this uid."""

    def create_event(self, pod: PodRef, kind: str, reason: str, message: str) -> None:
        """Record a Kubernetes Event (kind Normal or Warning) about the pod."""

    def watch_pods(
        self, node_name: str, on_event: Callable[[PodEvent], None], stop: threading.Event
    ) -> None:
        """Call on_event for every change of a pod bound to node_name, until stop is set."""

    def node_labels(self, name: str) -> dict[str, str]:
        """The Node's labels."""

    def patch_node_labels(self, name: str, labels: dict[str, str | None]) -> None:
        """Set these labels of the Node (None removes one), no other."""

    def put_geometry_lease(
        self, namespace: str, name: str, text: str, holder: str, duration_seconds: int
    ) -> None:
        """Create or replace the geometry Lease ``namespace/name`` holding ``text``, renewed
        now. A concurrent writer makes it fail (HTTP 409): the caller tries again later."""


def _limits(container: Any) -> dict[str, str]:
    resources = getattr(container, "resources", None)
    limits = getattr(resources, "limits", None) or {}
    return {str(k): str(v) for k, v in limits.items()}


def pod_from_api(obj: Any) -> Pod:
    """Convert a kubernetes-client V1Pod into our Pod."""
    meta = obj.metadata
    spec = obj.spec
    created = meta.creation_timestamp
    return Pod(
        namespace=meta.namespace,
        name=meta.name,
        uid=meta.uid,
        phase=(obj.status.phase if obj.status else None) or "Pending",
        created=created.timestamp() if isinstance(created, datetime) else 0.0,
        deleting=meta.deletion_timestamp is not None,
        containers=tuple(ContainerSpec(c.name, _limits(c)) for c in (spec.containers or [])),
        init_containers=tuple(
            ContainerSpec(c.name, _limits(c)) for c in (spec.init_containers or [])
        ),
        annotations=dict(meta.annotations or {}),
    )


def micro_time(moment: datetime) -> datetime:
    """``moment`` as the API server's MicroTime accepts it through the client.

    The server parses MicroTime with exactly six fraction digits; the client writes a datetime
    with isoformat, which drops the fraction when the microsecond is 0, so such a moment is
    moved 1 us on. A naive moment is taken as UTC (isoformat would give no offset at all).
    """
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment if moment.microsecond else moment.replace(microsecond=1)


def _pod_event(event: Any) -> PodEvent:
    obj = event.get("object") if isinstance(event, dict) else None
    meta = getattr(obj, "metadata", None)
    return PodEvent(
        kind=str(event.get("type", "")) if isinstance(event, dict) else "",
        namespace=str(getattr(meta, "namespace", "") or ""),
        name=str(getattr(meta, "name", "") or ""),
        uid=str(getattr(meta, "uid", "") or ""),
    )


class KubernetesApi:
    """The real API server through the `kubernetes` client (in-cluster or kubeconfig)."""

    def __init__(
        self, kubeconfig: str | None = None, timeout: float = 10.0, node_name: str | None = None
    ) -> None:
        self._node_name = node_name
        if kubeconfig:
            config.load_kube_config(config_file=kubeconfig)
        else:
            config.load_incluster_config()
        self._core = client.CoreV1Api()
        self._coordination = client.CoordinationV1Api()
        self._timeout = timeout

    def get_pod(self, namespace: str, name: str) -> Pod | None:
        obj = api_call(
            f"get pod {namespace}/{name}",
            lambda: self._core.read_namespaced_pod(name, namespace, _request_timeout=self._timeout),
            not_found=None,
        )
        return None if obj is None else pod_from_api(obj)

    def list_node_pods(self, node_name: str) -> list[Pod]:
        result = api_call(
            f"list pods on node {node_name}",
            lambda: self._core.list_pod_for_all_namespaces(
                field_selector=f"spec.nodeName={node_name}", _request_timeout=self._timeout
            ),
        )
        return [pod_from_api(item) for item in result.items]

    def annotate_pod(
        self, namespace: str, name: str, uid: str, annotations: dict[str, str]
    ) -> None:
        # The uid in the patch makes the API server refuse it if the name now belongs to a
        # different pod (uid is immutable).
        body = {"metadata": {"uid": uid, "annotations": annotations}}
        api_call(
            f"annotate pod {namespace}/{name}",
            lambda: self._core.patch_namespaced_pod(
                name, namespace, body, _request_timeout=self._timeout
            ),
        )

    def delete_pod_with_uid(self, pod: PodRef) -> None:
        body = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=pod.uid))
        api_call(
            f"delete pod {pod.namespace}/{pod.name}",
            lambda: self._core.delete_namespaced_pod(
                pod.name, pod.namespace, body=body, _request_timeout=self._timeout
            ),
            not_found=None,  # already gone: what the delete wanted
        )

    def create_event(self, pod: PodRef, kind: str, reason: str, message: str) -> None:
        body = event_about(pod, kind, reason, message, component=EVENT_SOURCE, host=self._node_name)
        api_call(
            f"event on pod {pod.namespace}/{pod.name}",
            lambda: self._core.create_namespaced_event(
                pod.namespace, body, _request_timeout=self._timeout
            ),
        )

    def watch_pods(
        self, node_name: str, on_event: Callable[[PodEvent], None], stop: threading.Event
    ) -> None:
        selector = f"spec.nodeName={node_name}"
        while not stop.is_set():
            watcher = watch.Watch()
            try:
                for event in watcher.stream(
                    self._core.list_pod_for_all_namespaces,
                    field_selector=selector,
                    timeout_seconds=60,
                    _request_timeout=90,
                ):
                    on_event(_pod_event(event))
                    if stop.is_set():
                        break
            except Exception as exc:  # the periodic resync covers the gap; retry the watch
                log.warning("pod watch failed, retrying", extra={"error": str(exc)})
                stop.wait(5.0)
            finally:
                watcher.stop()

    def node_labels(self, name: str) -> dict[str, str]:
        node = api_call(
            f"get node {name}",
            lambda: self._core.read_node(name, _request_timeout=self._timeout),
        )
        return dict(node.metadata.labels or {})

    def patch_node_labels(self, name: str, labels: dict[str, str | None]) -> None:
        # A merge patch: None removes a label. Only the keys given are touched.
        body = {"metadata": {"labels": labels}}
        api_call(
            f"label node {name}",
            lambda: self._core.patch_node(name, body, _request_timeout=self._timeout),
        )

    def put_geometry_lease(
        self, namespace: str, name: str, text: str, holder: str, duration_seconds: int
    ) -> None:
        for kind, value, subdomain in (("namespace", namespace, False), ("name", name, True)):
            problem = kube_name_problem(value, subdomain=subdomain)
            if problem:
                raise KubeApiError(f"geometry lease {kind} {value[:80]!r}: {problem}")
        what = f"geometry lease {namespace}/{name}"
        now = micro_time(datetime.now(UTC))
        current = api_call(
            f"get {what}",
            lambda: self._coordination.read_namespaced_lease(
                name, namespace, _request_timeout=self._timeout
            ),
            not_found=None,
        )
        labels = {GEOMETRY_LABEL: GEOMETRY_LABEL_VALUE}
        annotations = {GEOMETRY_ANNOTATION: text}
        if current is None:
            body = client.V1Lease(
                metadata=client.V1ObjectMeta(
                    name=name, namespace=namespace, labels=labels, annotations=annotations
                ),
                spec=client.V1LeaseSpec(
                    holder_identity=holder,
                    lease_duration_seconds=duration_seconds,
                    acquire_time=now,
                    renew_time=now,
                ),
            )
            api_call(
                f"create {what}",
                lambda: self._coordination.create_namespaced_lease(
                    namespace, body, _request_timeout=self._timeout
                ),
            )
            return
        meta, old = current.metadata, current.spec
        acquired, transitions = now, None
        if old is not None and old.holder_identity == holder and old.acquire_time is not None:
            # The same holder keeps its acquireTime; another one (a new pod) takes it over.
            acquired, transitions = micro_time(old.acquire_time), old.lease_transitions
        elif old is not None and old.holder_identity:
            transitions = (old.lease_transitions or 0) + 1
        # A replace with the resourceVersion read, not a patch: a concurrent write makes this
        # one fail with a 409 instead of being overwritten. What others set in metadata stays.
        body = client.V1Lease(
            metadata=client.V1ObjectMeta(
                name=name,
                namespace=namespace,
                resource_version=meta.resource_version,
                labels={**(meta.labels or {}), **labels},
                annotations={**(meta.annotations or {}), **annotations},
                owner_references=meta.owner_references,
            ),
            spec=client.V1LeaseSpec(
                holder_identity=holder,
                lease_duration_seconds=duration_seconds,
                acquire_time=acquired,
                renew_time=now,
                lease_transitions=transitions,
            ),
        )
        api_call(
            f"update {what}",
            lambda: self._coordination.replace_namespaced_lease(
                name, namespace, body, _request_timeout=self._timeout
            ),
        )
