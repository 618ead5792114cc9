"""The pods/binding subresource, as the scheduler (and the extender's bind verb) meets it: a
Binding of another uid or of a pod already on a node is refused with 409, a target that is not
a Node with 422, and an accepted Binding is answered with a Status (not the Binding)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .behaviour import Behaviour
from .replies import Reply, failure, status_body
from .requests import Request

if TYPE_CHECKING:
    from .server import FakeApiServer


class Bindings(Behaviour):
    def before(self, api: FakeApiServer, request: Request) -> Reply | None:
        route = request.route
        if route is None or (route.plural, route.subresource) != ("pods", "binding"):
            return None
        if request.method != "POST":
            return failure(405, "MethodNotAllowed", "a Binding is only created")
        body = request.body if isinstance(request.body, dict) else {}
        with api.lock:
            key = ("Pod", route.namespace, route.name)
            pod = api.objects.get(key)
            if pod is None:
                return failure(404, "NotFound", f'pods "{route.name}" not found')
            uid = (body.get("metadata") or {}).get("uid")
            if uid not in (None, pod["metadata"]["uid"]):
                return failure(409, "Conflict", "Precondition failed: UID")
            node = pod["spec"].get("nodeName")
            if node:
                return failure(
                    409, "Conflict", f"pod {route.name} is already assigned to node {node}"
                )
            target = body.get("target") or {}
            if target.get("kind") != "Node" or not target.get("name"):
                return failure(422, "Invalid", "target must be a Node")
            pod["spec"]["nodeName"] = target["name"]
            pod["metadata"]["resourceVersion"] = api.next_version()
            api.history.append(f"bind Pod/{route.name}")
        return Reply(201, status_body(201, ""))
