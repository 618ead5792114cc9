"""Every Kubernetes API call of the scheduler extender (docs/dev/extender.md).

``ExtenderApi`` is what the extender's state and verbs depend on; ``KubernetesExtenderApi`` is
the real one (the ``kubernetes`` client). Keep every call here and in the two constants below:
the extender's RBAC is checked against them. ``EXTENDER_ACCESS`` is cluster-wide (a
ClusterRole): the scheduler places pods of every namespace. ``EXTENDER_LEASE_ACCESS`` is
namespaced (a Role in the plugin's namespace): the geometry Leases live there only.

Reads take the API server's JSON as it is (``_preload_content=False``) and check its shape
here, so a pod or Lease the client's models would read differently is never guessed at; the
Binding's reply is not read at all, as the client cannot deserialise it (the API server answers
a Status, not a Binding).
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from hygon_dcu_plugin.config import kube_name_problem
from hygon_dcu_plugin.geometry import text_of_lease
from hygon_dcu_plugin.kube import TERMINAL_PHASES, KubeApiError, PodRef, api_call, event_about
from hygon_dcu_plugin.vocabulary import (
    GEOMETRY_SELECTOR,
    RESERVATION_ANNOTATION,
    RESERVED_LABEL,
    RESERVED_VALUE,
)

__all__ = [
    "EXTENDER_ACCESS",
    "EXTENDER_LEASE_ACCESS",
    "BindingRefused",
    "ExtenderApi",
    "KubeApiError",
    "KubernetesExtenderApi",
    "LeaseInfo",
    "PodChanged",
    "PodInfo",
    "PodRef",
]

# (apiGroup, resource, verb) for every call below; "" is the core group.
EXTENDER_ACCESS: tuple[tuple[str, str, str], ...] = (
    ("", "pods", "get"),  # get_pod: bind reads the pod and its current resourceVersion
    ("", "pods", "list"),  # list_reserved_pods: the reservation table's rebuild and release
    ("", "pods", "patch"),  # reserve_pod, unlabel_pod: RESERVED_LABEL and the reservation
    # bind_pod: the extender is the binder (bindVerb). The pod's binding subresource, as
    # kube-scheduler binds, not the namespaced "bindings" resource.
    ("", "pods/binding", "create"),
    ("", "events", "create"),  # create_event: a reservation not carved in time
)
EXTENDER_LEASE_ACCESS: tuple[tuple[str, str, str], ...] = (
    ("coordination.k8s.io", "leases", "get"),  # get_lease: bind reads the node's geometry
    ("coordination.k8s.io", "leases", "list"),  # list_geometry_leases: the periodic refresh
)

EVENT_SOURCE = "hygon-dcu-scheduler-extender"
# Objects per list page: bounds what one reply holds (a pod is a few KB).
PAGE_SIZE = 250
# A geometry Lease is a few KB, and its annotation is refused over geometry.MAX_TEXT (~30 KB):
# a page of the largest legal ones is ~3 MB.
LEASE_PAGE_SIZE = 100
MERGE_PATCH = "application/merge-patch+json"

log = logging.getLogger(__name__)


class PodChanged(KubeApiError):
    """The pod changed since it was read (HTTP 409 on the resourceVersion precondition)."""


class BindingRefused(KubeApiError):
    """The API server refused the Binding (HTTP 4xx): the pod is certainly not bound by it."""


@dataclass(frozen=True)
class LeaseInfo:
    """A geometry Lease as the extender reads it; a field the Lease lacks (or has in a shape
    that is not the API's) is None."""

    name: str
    text: str | None  # the geometry annotation's value
    renewed: float | None  # spec.renewTime, seconds since the epoch
    duration: int | None  # spec.leaseDurationSeconds
    version: str = ""  # metadata.resourceVersion: changes with every write


@dataclass(frozen=True)
class PodInfo:
    ref: PodRef
    resource_version: str
    phase: str
    node_name: str  # spec.nodeName; "" while unbound
    deleting: bool
    annotations: Mapping[str, str] = field(default_factory=dict)
    raw: Mapping[str, Any] = field(default_factory=dict)  # the pod as the API server sent it

    @property
    def terminal(self) -> bool:
        return self.phase in TERMINAL_PHASES


class ExtenderApi(Protocol):
    def list_geometry_leases(self, namespace: str) -> Iterator[LeaseInfo]:
        """Every Lease labelled GEOMETRY_LABEL=v1 in ``namespace``, read a page at a time as
        they are consumed (KubeApiError may come after the first ones)."""

    def get_lease(self, namespace: str, name: str) -> LeaseInfo | None:
        """The Lease, or None when the API server confirms it does not exist."""

    def list_reserved_pods(self) -> list[PodInfo]:
        """Every pod labelled RESERVED_LABEL=true, in all namespaces."""

    def get_pod(self, namespace: str, name: str) -> PodInfo | None:
        """The pod, or None when the API server confirms it does not exist."""

    def reserve_pod(self, pod: PodInfo, text: str) -> None:
        """Write the reservation annotation and RESERVED_LABEL, only if the pod is still at
        ``pod.resource_version``; PodChanged when it is not."""

    def unlabel_pod(self, pod: PodInfo) -> None:
        """Remove RESERVED_LABEL (the reservation is released), only if the pod is still at
        ``pod.resource_version``; PodChanged when it is not."""

    def bind_pod(self, pod: PodRef, node: str) -> None:
        """Bind the pod (that uid) to ``node``; BindingRefused when the API server says no."""

    def create_event(self, pod: PodRef, kind: str, reason: str, message: str) -> None:
        """Record a Kubernetes Event (kind Normal or Warning) about the pod."""


def _status(error: KubeApiError) -> int | None:
    cause = error.__cause__
    return cause.status if isinstance(cause, ApiException) else None


def _text_map(value: object) -> dict[str, str]:
    if not isinstance(value, Mapping):
        return {}
    return {k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, str)}


def _timestamp(value: object) -> float | None:
    """An RFC 3339 time (Time or MicroTime) as seconds since the epoch, or None."""
    if not isinstance(value, str) or len(value) > 64:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def lease_from_json(obj: object) -> LeaseInfo | None:
    """A Lease of the API's JSON, or None when it is not one (no valid name)."""
    if not isinstance(obj, Mapping):
        return None
    metadata = obj.get("metadata")
    if not isinstance(metadata, Mapping):
        return None
    name = metadata.get("name")
    if not isinstance(name, str) or kube_name_problem(name, subdomain=True):
        return None
    text = text_of_lease(obj)
    spec = obj.get("spec")
    spec = spec if isinstance(spec, Mapping) else {}
    duration = spec.get("leaseDurationSeconds")
    if not isinstance(duration, int) or isinstance(duration, bool) or duration < 0:
        duration = None
    version = metadata.get("resourceVersion")
    return LeaseInfo(
        name,
        text,
        _timestamp(spec.get("renewTime")),
        duration,
        version if isinstance(version, str) else "",
    )


def pod_from_json(obj: object, keep_raw: bool = True) -> PodInfo | None:
    """A pod of the API's JSON, or None when it lacks what identifies it; ``raw`` holds the
    JSON only when ``keep_raw`` (a list keeps what it needs, not every pod's spec)."""
    if not isinstance(obj, Mapping):
        return None
    metadata = obj.get("metadata")
    if not isinstance(metadata, Mapping):
        return None
    namespace, name, uid = metadata.get("namespace"), metadata.get("name"), metadata.get("uid")
    version = metadata.get("resourceVersion")
    if not all(isinstance(v, str) and v for v in (namespace, name, uid, version)):
        return None
    spec = obj.get("spec")
    status = obj.get("status")
    node = spec.get("nodeName") if isinstance(spec, Mapping) else None
    phase = status.get("phase") if isinstance(status, Mapping) else None
    return PodInfo(
        PodRef(str(namespace), str(name), str(uid)),
        str(version),
        phase if isinstance(phase, str) and phase else "Pending",
        node if isinstance(node, str) else "",
        metadata.get("deletionTimestamp") is not None,
        _text_map(metadata.get("annotations")),
        obj if keep_raw else {},
    )


def _json(response: Any) -> Any:
    """The JSON of a raw reply (urllib3's response: ``data`` is the whole body)."""
    try:
        return json.loads(response.data)
    finally:
        response.release_conn()


def _call_json(call: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
    return _json(call(**kwargs))


def _done(response: Any) -> None:
    """A raw reply whose body is not needed: read to its end (an unread body would be taken
    for the next reply on the kept-alive connection), then the connection is pooled again."""
    try:
        response.data  # noqa: B018 - reads the body
    finally:
        response.release_conn()


class KubernetesExtenderApi:
    """The real API server through the ``kubernetes`` client (in-cluster or kubeconfig).

    Its own ApiClient, not the client's global default, so nothing else configured in the
    process changes where it points."""

    def __init__(self, kubeconfig: str | None = None, timeout: float = 5.0) -> None:
        if kubeconfig:
            api_client = config.new_client_from_config(config_file=kubeconfig)
        else:
            configuration = client.Configuration()
            config.load_incluster_config(client_configuration=configuration)
            api_client = client.ApiClient(configuration)
        self._core = client.CoreV1Api(api_client)
        self._coordination = client.CoordinationV1Api(api_client)
        self._timeout = timeout

    def _pages(
        self, what: str, call: Callable[..., Any], limit: int = PAGE_SIZE
    ) -> Iterator[object]:
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {
                "limit": limit,
                "_preload_content": False,
                "_request_timeout": self._timeout,
            }
            if token:
                kwargs["_continue"] = token
            page = api_call(what, functools.partial(_call_json, call, kwargs))
            items = page.get("items") if isinstance(page, Mapping) else None
            if not isinstance(items, list):
                raise KubeApiError(f"{what}: the reply is not a list")
            yield from items
            metadata = page.get("metadata")
            token = metadata.get("continue") if isinstance(metadata, Mapping) else None
            del page, items, metadata  # one page in memory at a time, not two
            if not isinstance(token, str) or not token:
                return

    def _read(
        self, what: str, read: Callable[..., Any], namespace: str, name: str
    ) -> dict[str, Any] | None:
        """One object as JSON, or None when the API server says it does not exist."""
        obj: dict[str, Any] | None = api_call(
            what,
            lambda: _json(
                read(name, namespace, _preload_content=False, _request_timeout=self._timeout)
            ),
            not_found=None,
        )
        return obj

    def list_geometry_leases(self, namespace: str) -> Iterator[LeaseInfo]:
        # A generator: one page of Lease texts is held at a time, not every node's.
        selector = GEOMETRY_SELECTOR
        for item in self._pages(
            f"list geometry leases in {namespace}",
            functools.partial(
                self._coordination.list_namespaced_lease, namespace, label_selector=selector
            ),
            LEASE_PAGE_SIZE,
        ):
            lease = lease_from_json(item)
            if lease is None:
                log.warning("lease_unreadable", extra={"namespace": namespace})
                continue
            yield lease

    def get_lease(self, namespace: str, name: str) -> LeaseInfo | None:
        what = f"get geometry lease {namespace}/{name}"
        obj = self._read(what, self._coordination.read_namespaced_lease, namespace, name)
        if obj is None:
            return None
        lease = lease_from_json(obj)
        if lease is None or lease.name != name:
            raise KubeApiError(f"{what}: the reply is not that Lease")
        return lease

    def list_reserved_pods(self) -> list[PodInfo]:
        selector = f"{RESERVED_LABEL}={RESERVED_VALUE}"
        pods = []
        for item in self._pages(
            "list reserved pods",
            functools.partial(self._core.list_pod_for_all_namespaces, label_selector=selector),
        ):
            pod = pod_from_json(item, keep_raw=False)
            if pod is None:
                log.warning("pod_unreadable", extra={"what": "a reserved pod without identity"})
                continue
            pods.append(pod)
        return pods

    def get_pod(self, namespace: str, name: str) -> PodInfo | None:
        what = f"get pod {namespace}/{name}"
        obj = self._read(what, self._core.read_namespaced_pod, namespace, name)
        if obj is None:
            return None
        pod = pod_from_json(obj)
        if pod is None or (pod.ref.namespace, pod.ref.name) != (namespace, name):
            raise KubeApiError(f"{what}: the reply is not that pod")
        return pod

    def reserve_pod(self, pod: PodInfo, text: str) -> None:
        self._patch_pod(
            pod,
            {RESERVATION_ANNOTATION: text},
            {RESERVED_LABEL: RESERVED_VALUE},
            f"reserve pod {pod.ref.namespace}/{pod.ref.name}",
        )

    def unlabel_pod(self, pod: PodInfo) -> None:
        # The annotation stays: it is what the allocator read or will read.
        self._patch_pod(
            pod, {}, {RESERVED_LABEL: None}, f"unlabel pod {pod.ref.namespace}/{pod.ref.name}"
        )

    def _patch_pod(
        self,
        pod: PodInfo,
        annotations: dict[str, str],
        labels: dict[str, str | None],
        what: str,
    ) -> None:
        # A merge patch that names the resourceVersion read: the API server applies it only
        # to that version of the pod (409 otherwise), and the uid (immutable) pins the pod.
        # A null label is removed.
        metadata: dict[str, Any] = {
            "uid": pod.ref.uid,
            "resourceVersion": pod.resource_version,
            "labels": labels,
        }
        if annotations:
            metadata["annotations"] = annotations
        try:
            api_call(
                what,
                lambda: _done(
                    self._core.patch_namespaced_pod(
                        pod.ref.name,
                        pod.ref.namespace,
                        {"metadata": metadata},
                        _content_type=MERGE_PATCH,
                        _preload_content=False,
                        _request_timeout=self._timeout,
                    )
                ),
            )
        except KubeApiError as error:
            if _status(error) == 409:
                raise PodChanged(
                    f"{what}: the pod changed since it was read (HTTP 409)"
                ) from error.__cause__
            raise

    def bind_pod(self, pod: PodRef, node: str) -> None:
        body = client.V1Binding(
            metadata=client.V1ObjectMeta(name=pod.name, namespace=pod.namespace, uid=pod.uid),
            target=client.V1ObjectReference(api_version="v1", kind="Node", name=node),
        )
        what = f"bind pod {pod.namespace}/{pod.name} to {node}"
        try:
            api_call(
                what,
                lambda: _done(
                    self._core.create_namespaced_pod_binding(
                        pod.name,
                        pod.namespace,
                        body,
                        _preload_content=False,
                        _request_timeout=self._timeout,
                    )
                ),
            )
        except KubeApiError as error:
            status = _status(error)
            if status is not None and 400 <= status < 500:
                raise BindingRefused(str(error)) from error.__cause__
            raise

    def create_event(self, pod: PodRef, kind: str, reason: str, message: str) -> None:
        body = event_about(pod, kind, reason, message, component=EVENT_SOURCE)
        api_call(
            f"event on pod {pod.namespace}/{pod.name}",
            lambda: _done(
                self._core.create_namespaced_event(
                    pod.namespace, body, _preload_content=False, _request_timeout=self._timeout
                )
            ),
        )
