"""Objects as other clients leave them in the API server, for tests to ``seed``: the workload
pods the product reads."""

from __future__ import annotations

from typing import Any


def pod(
    name: str,
    namespace: str = "ml",
    *,
    node: str = "",
    containers: dict[str, dict[str, str]] | None = None,
    phase: str = "Pending",
    uid: str | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    scheduler: str | None = None,
    ready: bool | None = None,
    owner: str | None = None,
) -> dict[str, Any]:
    """A pod with one container per ``containers`` entry (name -> resource limits), on
    ``node`` once bound; ``owner`` is the kind of its controller (ReplicaSet, DaemonSet...)."""
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if uid is not None:
        metadata["uid"] = uid
    if labels is not None:
        metadata["labels"] = dict(labels)
    if annotations is not None:
        metadata["annotations"] = dict(annotations)
    if owner is not None:
        metadata["ownerReferences"] = [
            {
                "apiVersion": "apps/v1",
                "kind": owner,
                "name": f"{name}-owner",
                "uid": f"owner-{name}",
                "controller": True,
            }
        ]
    spec: dict[str, Any] = {
        "containers": [
            {"name": container, "image": "registry.local/app:1", "resources": {"limits": limits}}
            for container, limits in (containers or {"main": {}}).items()
        ]
    }
    if node:
        spec["nodeName"] = node
    if scheduler is not None:
        spec["schedulerName"] = scheduler
    status: dict[str, Any] = {"phase": phase}
    if ready is not None:
        status["conditions"] = [{"type": "Ready", "status": "True" if ready else "False"}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec, "status": status}
