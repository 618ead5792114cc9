"""The kube-scheduler extender wire format: requests in, answers out (no I/O here).

kube-scheduler 1.20's extender types (``k8s.io/kube-scheduler/extender/v1``) carry no JSON
tags, so it sends Go field names (``Pod``, ``NodeNames``, ``PodName`` ...) and decodes answers
case-insensitively; later releases send lower-case tags. So the keys of these objects are read
case-insensitively and answers use the lower-case spelling both accept (docs/dev/extender.md).
The pod inside ``ExtenderArgs`` is a ``v1.Pod``, whose own fields have JSON tags: its keys are
read exactly.

``nodeCacheCapable: true`` is the configuration: the scheduler then sends ``NodeNames`` only.
A request with a NodeList instead is refused with the fix.

Fail closed: anything that is not the expected shape raises ``WireError`` (HTTP 400) with a
one-line reason; names that become keys (node, namespace, pod, uid) are validated; the number
of nodes is bounded, and so is each reason echoed back.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hygon_dcu_plugin.config import kube_name_problem
from hygon_dcu_plugin.shown import shorten

# Kubernetes supports clusters of 5,000 nodes; a longer list is not from a scheduler.
MAX_NODES = 5000
# A failed node's reason as the scheduler's event shows it (it aggregates equal reasons).
MAX_REASON_CHARS = 512
# The API server's uids are UUIDs; the geometry and reservation texts cap them at 64 too.
_UID = re.compile(r"[0-9A-Za-z][0-9A-Za-z._-]{0,63}")


class WireError(ValueError):
    """The body is not a request this extender can answer; ``reason`` labels the metric."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass(frozen=True)
class PodId:
    namespace: str
    name: str
    uid: str

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class ExtenderArgs:
    """One filter or prioritize request: the pod (as the scheduler sent it) and node names."""

    pod: PodId
    pod_object: Mapping[str, Any]
    node_names: tuple[str, ...]


@dataclass(frozen=True)
class BindingArgs:
    pod: PodId
    node: str


def _fields(document: object, what: str, names: Sequence[str]) -> dict[str, Any]:
    """The members of a Go struct's JSON, by field name, matched case-insensitively."""
    if not isinstance(document, Mapping):
        raise WireError("not-an-object", f"the {what} is not a JSON object")
    wanted = {name.lower(): name for name in names}
    found: dict[str, Any] = {}
    for key, value in document.items():
        folded = key.lower() if isinstance(key, str) and key.isascii() else None
        if folded not in wanted:
            continue  # a field of a later release: Go's decoder ignores it too
        name = wanted[folded]
        if name in found:
            raise WireError(
                "duplicate-field",
                f"the {what} has {name} twice in different spellings; send it once",
            )
        found[name] = value
    return found


def _name(value: object, what: str, subdomain: bool) -> str:
    if not isinstance(value, str) or not value:
        raise WireError("bad-name", f"{what} is not a name")
    problem = kube_name_problem(value, subdomain=subdomain)
    if problem:
        raise WireError("bad-name", f"{what} {shorten(value)!r} {problem}")
    return value


def _uid(value: object, what: str) -> str:
    if not isinstance(value, str) or not _UID.fullmatch(value):
        raise WireError("bad-uid", f"{what} is not a pod uid")
    return value


def _pod(pod: object) -> tuple[PodId, Mapping[str, Any]]:
    if not isinstance(pod, Mapping):
        raise WireError("no-pod", "the request has no Pod object")
    metadata = pod.get("metadata")
    if not isinstance(metadata, Mapping):
        raise WireError("no-pod", "the Pod has no metadata")
    if not isinstance(pod.get("spec"), Mapping):
        raise WireError("no-pod", "the Pod has no spec")
    pod_id = PodId(
        _name(metadata.get("namespace"), "the Pod's namespace", subdomain=False),
        _name(metadata.get("name"), "the Pod's name", subdomain=True),
        _uid(metadata.get("uid"), "the Pod's uid"),
    )
    return pod_id, pod


def parse_args(document: object) -> ExtenderArgs:
    """An ExtenderArgs (filter and prioritize), or WireError."""
    found = _fields(document, "ExtenderArgs", ("Pod", "Nodes", "NodeNames"))
    pod_id, pod = _pod(found.get("Pod"))
    names = found.get("NodeNames")
    if names is None:
        if found.get("Nodes") is not None:
            raise WireError(
                "node-list",
                "the request carries Nodes, not NodeNames: configure this extender with "
                "nodeCacheCapable: true",
            )
        raise WireError("no-nodes", "the request has no NodeNames")
    if not isinstance(names, list):
        raise WireError("bad-nodes", "NodeNames is not a list")
    if len(names) > MAX_NODES:
        raise WireError("too-many-nodes", f"NodeNames has {len(names)} names; at most {MAX_NODES}")
    nodes = [_name(n, f"NodeNames[{i}]", subdomain=True) for i, n in enumerate(names)]
    return ExtenderArgs(pod_id, pod, tuple(dict.fromkeys(nodes)))


def parse_binding(document: object) -> BindingArgs:
    """An ExtenderBindingArgs, or WireError."""
    found = _fields(document, "ExtenderBindingArgs", ("PodName", "PodNamespace", "PodUID", "Node"))
    return BindingArgs(
        PodId(
            _name(found.get("PodNamespace"), "PodNamespace", subdomain=False),
            _name(found.get("PodName"), "PodName", subdomain=True),
            _uid(found.get("PodUID"), "PodUID"),
        ),
        _name(found.get("Node"), "Node", subdomain=True),
    )


def _reason(text: str) -> str:
    if len(text) <= MAX_REASON_CHARS:
        return text
    return text[: MAX_REASON_CHARS - 3] + "..."


def filter_result(passed: Sequence[str], failed: Mapping[str, str]) -> dict[str, Any]:
    """ExtenderFilterResult for nodeCacheCapable: the names that pass, and why the rest fail."""
    return {
        "nodenames": list(passed),
        "failedNodes": {node: _reason(why) for node, why in failed.items()},
        "error": "",
    }


def priority_list(scores: Mapping[str, int]) -> list[dict[str, Any]]:
    """HostPriorityList: one {host, score} per node."""
    return [{"host": node, "score": score} for node, score in scores.items()]


def binding_result(error: str = "") -> dict[str, Any]:
    """ExtenderBindingResult: an empty error is success."""
    return {"error": _reason(error) if error else ""}
