"""In-memory API server behind the plugin's KubeApi interface (hygon_dcu_plugin.kube)."""

from __future__ import annotations

import itertools
import threading
import uuid
from collections.abc import Callable

from fake_api_server import annotation_key_problem
from hygon_dcu_plugin.kube import ContainerSpec, KubeApiError, Pod, PodEvent, PodRef

PARTITION_2G = {"hygon.com/dcu.partitioned": "1", "hygon.com/dcu.partitioned.mig-2g.15gb": "1"}


def limits_for(profile: str) -> dict[str, str]:
    return {"hygon.com/dcu.partitioned": "1", f"hygon.com/dcu.partitioned.mig-{profile}": "1"}


def slice_limits(memory_mib: int, compute_units: int | None = None) -> dict[str, str]:
    limits = {"hygon.com/dcu.sliced": "1", "hygon.com/dcu.sliced.memory-mib": str(memory_mib)}
    if compute_units is not None:
        limits["hygon.com/dcu.sliced.compute-units"] = str(compute_units)
    return limits


class FakeKube:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.pods: dict[str, Pod] = {}
        self.annotations: dict[str, dict[str, str]] = {}
        self.fail_annotate: str | None = None
        self.fail_get: str | None = None
        self.fail_events: str | None = None
        self.kube_events: list[tuple[PodRef, str, str, str]] = []  # (pod, kind, reason, text)
        self.deleted_by_plugin: list[PodRef] = []
        self.get_calls = 0
        self.list_calls = 0
        self._clock = itertools.count(1_000_000)
        self.events: list[PodEvent] = []  # what a watch streams, in order

    def add_pod(
        self,
        namespace: str,
        name: str,
        containers: dict[str, dict[str, str]],
        init_containers: dict[str, dict[str, str]] | None = None,
        phase: str = "Pending",
        created: float | None = None,
        uid: str | None = None,
        annotations: dict[str, str] | None = None,
    ) -> Pod:
        pod = Pod(
            namespace=namespace,
            name=name,
            uid=uid or str(uuid.uuid4()),
            phase=phase,
            created=float(next(self._clock)) if created is None else created,
            containers=tuple(ContainerSpec(n, lim) for n, lim in containers.items()),
            init_containers=tuple(
                ContainerSpec(n, lim) for n, lim in (init_containers or {}).items()
            ),
            # What the pod carries when it is read (e.g. the extender's reservation); what the
            # plugin itself writes goes to self.annotations.
            annotations=dict(annotations or {}),
        )
        self._set(pod)
        return pod

    def _set(self, pod: Pod) -> None:
        with self._cond:
            kind = "MODIFIED" if pod.key in self.pods else "ADDED"
            self.pods[pod.key] = pod
            self.events.append(PodEvent(kind, pod.namespace, pod.name, pod.uid))
            self._cond.notify_all()

    def set_phase(self, namespace: str, name: str, phase: str) -> None:
        pod = self.pods[f"{namespace}/{name}"]
        self._set(Pod(**{**pod.__dict__, "phase": phase}))

    def mark_deleting(self, namespace: str, name: str) -> None:
        pod = self.pods[f"{namespace}/{name}"]
        self._set(Pod(**{**pod.__dict__, "deleting": True}))

    def delete_pod(self, namespace: str, name: str) -> None:
        with self._cond:
            pod = self.pods.pop(f"{namespace}/{name}", None)
            if pod is not None:
                self.events.append(PodEvent("DELETED", namespace, name, pod.uid))
            self._cond.notify_all()

    # KubeApi -------------------------------------------------------------------------------
    def get_pod(self, namespace: str, name: str) -> Pod | None:
        with self._cond:
            self.get_calls += 1
            if self.fail_get:
                raise KubeApiError(self.fail_get)
            return self.pods.get(f"{namespace}/{name}")

    def list_node_pods(self, node_name: str) -> list[Pod]:
        with self._cond:
            self.list_calls += 1
            if self.fail_get:
                raise KubeApiError(self.fail_get)
            return list(self.pods.values())

    def annotate_pod(
        self, namespace: str, name: str, uid: str, annotations: dict[str, str]
    ) -> None:
        with self._cond:
            if self.fail_annotate:
                raise KubeApiError(self.fail_annotate)
            pod = self.pods.get(f"{namespace}/{name}")
            if pod is None or pod.uid != uid:
                raise KubeApiError(f"annotate pod {namespace}/{name}: uid precondition failed")
            for key in annotations:
                problem = annotation_key_problem(key)
                if problem:
                    raise KubeApiError(f"annotate pod {namespace}/{name}: HTTP 422 {problem}")
            self.annotations.setdefault(pod.key, {}).update(annotations)

    def delete_pod_with_uid(self, pod: PodRef) -> None:
        with self._cond:
            current = self.pods.get(f"{pod.namespace}/{pod.name}")
            if current is None:
                return
            if current.uid != pod.uid:
                raise KubeApiError(f"delete pod {pod.namespace}/{pod.name}: uid precondition")
            self.deleted_by_plugin.append(pod)
        self.delete_pod(pod.namespace, pod.name)

    def create_event(self, pod: PodRef, kind: str, reason: str, message: str) -> None:
        with self._cond:
            if self.fail_events:
                raise KubeApiError(self.fail_events)
            self.kube_events.append((pod, kind, reason, message))

    def reasons(self, name: str) -> list[str]:
        with self._cond:
            return [reason for pod, _kind, reason, _text in self.kube_events if pod.name == name]

    def watch_pods(
        self, node_name: str, on_event: Callable[[PodEvent], None], stop: threading.Event
    ) -> None:
        seen = 0

        def pending() -> bool:
            return len(self.events) > seen or stop.is_set()

        while not stop.is_set():
            with self._cond:
                self._cond.wait_for(pending, timeout=0.2)
                fresh = self.events[seen:]
                seen = len(self.events)
            for event in fresh:
                on_event(event)
