# Copyright: hygon.dcu contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# Apache-2.0 code may be combined into works under the GNU General Public License version 3,
# the license of ansible-core, which loads this filter.

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

DOCUMENTATION = r"""
---
name: workload_not_ready_message
short_description: Say why a DaemonSet or Deployment of the device plugin is not ready
version_added: "0.1.0"
description:
  - Writes the failure message of a wait for a workload (the device plugin's DaemonSet, or a
    Deployment such as the admission webhook's) from what the cluster showed, with what an
    operator needs to act on it.
  - It names the workload, the time waited and why the wait stopped; the namespace and the pod
    selector; the workload's status counts; for a DaemonSet, the nodes it selects; each pod's
    node, phase, containers (with the reason and message of every state but running) and the
    conditions that are not C(True); and the last ten warning events.
author:
  - hygon.dcu maintainers (!UNKNOWN)
options:
  _input:
    description: The workload's definition as the role rendered it.
    type: dict
    required: true
  wait:
    description: The registered result of the M(kubernetes.core.k8s_info) wait (its C(msg)).
    type: dict
    required: true
  timeout:
    description: How long the wait lasted, in seconds.
    type: int
    required: true
  selector:
    description: The pod selector, as C(key=value) entries.
    type: list
    elements: str
    required: true
  status:
    description: The workload's C(status) as the cluster shows it (empty when it is not found).
    type: dict
    required: true
  pods:
    description: The pods the selector finds.
    type: list
    elements: dict
    required: true
  warnings:
    description: The events about those pods that are not C(Normal), oldest first.
    type: list
    elements: dict
    required: true
  park_label:
    description: The node label that parks the device plugin (a DaemonSet only).
    type: str
    required: true
  park_value:
    description: The value of O(park_label) on a parked node.
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Fail with what was seen
  ansible.builtin.fail:
    msg: >-
      {{ workload | hygon.dcu.workload_not_ready_message(
           wait=ready, timeout=300, selector=['app.kubernetes.io/name=hygon-dcu-device-plugin'],
           status=seen_status, pods=seen_pods, warnings=seen_warnings,
           park_label=device_plugin__park_label, park_value='parked') }}
"""

RETURN = r"""
_value:
  description: The message, several lines, each ending with a newline.
  type: str
"""

# Enough to show a crash loop's cause without burying the rest of the message.
EVENTS_SHOWN = 10


def _status_text(status: Mapping[str, Any]) -> str:
    # The conditions repeat what the counts say, at length.
    counts = [f"{key}={value}" for key, value in status.items() if key != "conditions"]
    return ", ".join(counts) or "none yet"


def _container_text(container: Mapping[str, Any]) -> str:
    text = (
        f"; container {container.get('name')} {'ready' if container.get('ready') else 'not ready'}"
    )
    for kind, detail in (container.get("state") or {}).items():
        if kind != "running":
            text += f"({kind}: {detail.get('reason', '')} {detail.get('message', '')})"
    return text


def _pod_lines(pod: Mapping[str, Any]) -> list[str]:
    status = pod.get("status") or {}
    node = (pod.get("spec") or {}).get("nodeName", "(none: not scheduled)")
    phase = f"phase {status.get('phase', 'unknown')}"
    containers = [
        *(status.get("initContainerStatuses") or []),
        *(status.get("containerStatuses") or []),
    ]
    for container in containers:
        phase += _container_text(container)
    for condition in status.get("conditions") or []:
        if condition.get("status") != "True":
            phase += (
                f"; {condition.get('type')} {condition.get('status')}:"
                f" {condition.get('reason', '')} {condition.get('message', '')}"
            )
    return [f"Pod {pod['metadata']['name']} on node {node}:", f"{phase}."]


def workload_not_ready_message(
    workload: Mapping[str, Any],
    *,
    wait: Mapping[str, Any],
    timeout: Any,
    selector: Iterable[str],
    status: Mapping[str, Any],
    pods: Iterable[Mapping[str, Any]],
    warnings: list[Mapping[str, Any]],
    park_label: str,
    park_value: str,
) -> str:
    """The wait's failure message: the workload, its pods, then the recent warnings."""
    kind = workload["kind"]
    namespace = workload["metadata"]["namespace"]
    lines = [
        f"{kind} {namespace}/{workload['metadata']['name']} is not ready",
        f"after {timeout} s: {wait.get('msg', 'not found')}",
        f"Namespace {namespace}, pod selector {','.join(selector)}.",
        f"Status: {_status_text(status)}.",
    ]
    if kind == "DaemonSet":
        node_selector = workload["spec"]["template"]["spec"].get("nodeSelector") or {}
        labels = ",".join(f"{key}={value}" for key, value in node_selector.items())
        lines.append(f"Nodes: those labelled {labels} and not {park_label}={park_value}.")
    found = [line for pod in pods for line in _pod_lines(pod)]
    if not found:
        parked = " (no Hygon node, or every one is parked)" if kind == "DaemonSet" else ""
        found = [f"No pod matches the selector{parked}."]
    lines += found
    lines += [
        f"Event on {event['involvedObject']['name']}: {event.get('reason', '')}:"
        f" {event.get('message', '')}"
        for event in warnings[-EVENTS_SHOWN:]
    ]
    return "".join(f"{line}\n" for line in lines)


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"workload_not_ready_message": workload_not_ready_message}
