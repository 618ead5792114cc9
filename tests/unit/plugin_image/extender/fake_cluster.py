"""The fake API server as the scheduler extender meets it: the shared FakeApiServer
(tests/support/fake_api_server) serving merge patch only, with the pods/binding subresource
(Bindings), and what the extender tests set up on it: geometry Leases as the device plugin
writes them, pods as the scheduler sees them, and the hooks and faults they need.

A fake because the real API server runs only in the cluster tier (tests/cluster); the shared
one keeps what the extender's correctness rests on: every change bumps the object's
resourceVersion, a merge patch naming an older resourceVersion (or another uid) is refused
with 409 Conflict, a patch of another type with 415 (the extender must merge-patch), a
Binding of a bound pod or of another uid is refused with 409 and answered, when accepted, with
a Status (not a Binding, as the real one does), and lists honour a label selector and
pagination (limit / continue)."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

from fake_api_server import Behaviour, Bindings, FakeApiServer, Fault, Hook, Request, lease_problem
from fake_api_server import pod as pod_object
from hygon_dcu_plugin.vocabulary import GEOMETRY_ANNOTATION, GEOMETRY_LABEL

NAMESPACE = "hygon-dcu-system"
MERGE_PATCH = "application/merge-patch+json"


def _micro_time(seconds: float) -> str:
    moment = datetime.datetime.fromtimestamp(seconds, datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def is_pod_patch(request: Request) -> bool:
    return request.is_for("pods", method="PATCH", named=True) and not _subresource(request)


def is_binding(request: Request) -> bool:
    return _subresource(request) == "binding"


def is_lease_list(request: Request) -> bool:
    return request.is_for("leases", method="GET", named=False)


def _subresource(request: Request) -> str:
    return request.route.subresource if request.route is not None else ""


def _where(request: Request) -> tuple[str, str]:
    """(namespace, name) of the object a request is for."""
    route = request.route
    return (route.namespace, route.name) if route is not None else ("", "")


class FakeCluster(FakeApiServer):
    def __init__(self) -> None:
        super().__init__(patch_types=[MERGE_PATCH], behaviours=[Bindings()])

    # what tests set up --------------------------------------------------------------------
    def put_lease(
        self,
        node: str,
        text: str | None,
        renewed: float,
        duration: int = 40,
        namespace: str = NAMESPACE,
        labelled: bool = True,
    ) -> None:
        """The geometry Lease of ``node`` as the device plugin writes it (created, or updated
        in place: the same uid, a new resourceVersion)."""
        metadata: dict[str, Any] = {"name": node, "namespace": namespace}
        if labelled:
            metadata["labels"] = {GEOMETRY_LABEL: "v1"}
        if text is not None:
            metadata["annotations"] = {GEOMETRY_ANNOTATION: text}
        lease = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": metadata,
            "spec": {
                "holderIdentity": f"hygon-dcu-device-plugin-{node}",
                "leaseDurationSeconds": duration,
                "renewTime": _micro_time(renewed),
            },
        }
        problem = lease_problem(lease)
        if problem:
            raise ValueError(f"the API server would refuse this Lease: {problem}")
        with self.lock:
            existing = self.objects.get(("Lease", namespace, node))
            if existing is not None:
                metadata["uid"] = existing["metadata"]["uid"]
            self.seed(lease)

    def add_pod(
        self,
        name: str,
        containers: dict[str, dict[str, str]],
        namespace: str = "ml",
        phase: str = "Pending",
        node: str = "",
    ) -> dict[str, Any]:
        """A pod as the API server stores it; returns a copy (what the scheduler sends)."""
        return self.seed(
            pod_object(
                name,
                namespace,
                node=node,
                containers=containers,
                phase=phase,
                scheduler="hygon-dcu-scheduler",
            )
        )

    def pod(self, name: str, namespace: str = "ml") -> dict[str, Any]:
        found = self.get("Pod", name, namespace)
        if found is None:
            raise KeyError(f"no pod {namespace}/{name}")
        return found

    def change_pod(self, name: str, namespace: str = "ml", **fields: Any) -> dict[str, Any]:
        """Someone else changed the pod: ``fields`` merged in (None deletes), a new
        resourceVersion."""
        return self.change("Pod", name, namespace, **fields)

    def touch_pod(self, name: str, namespace: str = "ml") -> None:
        """Someone else changed the pod: a new resourceVersion."""
        self.change_pod(name, namespace, metadata={"labels": {"touched": "yes"}})

    def set_phase(self, name: str, phase: str, namespace: str = "ml") -> None:
        self.change_pod(name, namespace, status={"phase": phase})

    def delete_pod(self, name: str, namespace: str = "ml") -> None:
        self.remove("Pod", name, namespace)

    def events_for(self, name: str, reason: str) -> list[dict[str, Any]]:
        return [
            e
            for e in self.objects_of("Event")
            if e.get("involvedObject", {}).get("name") == name and e.get("reason") == reason
        ]

    # hooks and faults ---------------------------------------------------------------------
    def touch_before_each_patch(self) -> Behaviour:
        """Someone changes the pod between the extender's read and each patch of it."""

        def touch(_api: FakeApiServer, request: Request) -> None:
            namespace, name = _where(request)
            self.touch_pod(name, namespace)

        return self.plug(Hook(is_pod_patch, touch))

    def before_each_binding(self, action: Callable[[str, str, str], object]) -> Behaviour:
        """``action(namespace, name, node)`` runs before each Binding is answered."""

        def run(_api: FakeApiServer, request: Request) -> None:
            body = request.body if isinstance(request.body, dict) else {}
            node = str((body.get("target") or {}).get("name"))
            action(*_where(request), node)

        return self.plug(Hook(is_binding, run))

    def refuse_bindings(self, status: int) -> Behaviour:
        """Every Binding answered with ``status`` (unplug to end it)."""
        return self.plug(Fault(is_binding, status=status, reason="Injected"))

    def fail_lease_lists(self, status: int) -> Behaviour:
        """Every list of Leases answered with ``status``."""
        return self.plug(Fault(is_lease_list, status=status, reason="Injected"))

    def patch_types_sent(self) -> list[str]:
        """The content type of each patch of a pod, in order."""
        return [r.content_type for r in self.requests if is_pod_patch(r)]
