"""The DaemonSet and Deployment controllers, as far as a client waiting for a rollout sees
them: before each request, a workload whose spec generation is not yet observed is marked
rolled out (one node for a DaemonSet), unless its kind is ``stalled`` (a rollout that never
finishes)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .behaviour import Behaviour
from .replies import Reply
from .requests import Request

if TYPE_CHECKING:
    from .server import FakeApiServer


def _rolled_out(obj: dict[str, Any]) -> dict[str, Any]:
    generation = obj["metadata"]["generation"]
    if obj["kind"] == "DaemonSet":
        return {
            "observedGeneration": generation,
            "desiredNumberScheduled": 1,
            "currentNumberScheduled": 1,
            "updatedNumberScheduled": 1,
            "numberReady": 1,
            "numberAvailable": 1,
            "numberMisscheduled": 0,
        }
    replicas = obj["spec"].get("replicas", 1)
    return {
        "observedGeneration": generation,
        "replicas": replicas,
        "updatedReplicas": replicas,
        "readyReplicas": replicas,
        "availableReplicas": replicas,
    }


@dataclass(eq=False)
class Rollout(Behaviour):
    stalled: frozenset[str] = frozenset()

    def before(self, api: FakeApiServer, request: Request) -> Reply | None:
        with api.lock:
            for obj in api.objects.values():
                kind = obj["kind"]
                if kind not in ("DaemonSet", "Deployment") or kind in self.stalled:
                    continue
                if (obj.get("status") or {}).get("observedGeneration") != obj["metadata"][
                    "generation"
                ]:
                    obj["status"] = _rolled_out(obj)
                    obj["metadata"]["resourceVersion"] = api.next_version()
                    api.history.append(f"rolled out {kind}/{obj['metadata']['name']}")
        return None
