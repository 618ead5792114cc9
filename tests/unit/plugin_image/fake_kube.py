"""In-memory API server behind the plugin's KubeApi interface (hygon_dcu_plugin.kube)."""

from __future__ import annotations

import itertools
import threading
import uuid
from collections.abc import Callable

from hygon_dcu_plugin.kube import ContainerSpec, KubeApiError, Pod

PARTITION_2G = {"hygon.com/dcu.partitioned": "1", "hygon.com/dcu.partitioned.mig-2g.15gb": "1"}


def limits_for(profile: str) -> dict[str, str]:
    return {"hygon.com/dcu.partitioned": "1", f"hygon.com/dcu.partitioned.mig-{profile}": "1"}


class FakeKube:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.pods: dict[str, Pod] = {}
        self.annotations: dict[str, dict[str, str]] = {}
        self.fail_annotate: str | None = None
        self.fail_get: str | None = None
        self.get_calls = 0
        self.list_calls = 0
        self._clock = itertools.count(1_000_000)
        self._generation = 0

    def add_pod(
        self,
        namespace: str,
        name: str,
        containers: dict[str, dict[str, str]],
        init_containers: dict[str, dict[str, str]] | None = None,
        phase: str = "Pending",
        created: float | None = None,
        uid: str | None = None,
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
        )
        self._set(pod)
        return pod

    def _set(self, pod: Pod) -> None:
        with self._cond:
            self.pods[pod.key] = pod
            self._generation += 1
            self._cond.notify_all()

    def set_phase(self, namespace: str, name: str, phase: str) -> None:
        pod = self.pods[f"{namespace}/{name}"]
        self._set(Pod(**{**pod.__dict__, "phase": phase}))

    def mark_deleting(self, namespace: str, name: str) -> None:
        pod = self.pods[f"{namespace}/{name}"]
        self._set(Pod(**{**pod.__dict__, "deleting": True}))

    def delete_pod(self, namespace: str, name: str) -> None:
        with self._cond:
            self.pods.pop(f"{namespace}/{name}", None)
            self._generation += 1
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
            self.annotations.setdefault(pod.key, {}).update(annotations)

    def watch_pods(
        self, node_name: str, on_change: Callable[[], None], stop: threading.Event
    ) -> None:
        seen = [-1]
        while not stop.is_set():
            with self._cond:
                self._cond.wait_for(
                    lambda: self._generation != seen[0] or stop.is_set(), timeout=0.2
                )
                changed = self._generation != seen[0]
                seen[0] = self._generation
            if changed:
                on_change()
