# Copyright: hygon.dcu contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# Apache-2.0 code may be combined into works under the GNU General Public License version 3,
# the license of ansible-core, which loads this filter.

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

DOCUMENTATION = r"""
---
name: plugin_not_ready_message
short_description: Say why the device-plugin pod on a node is not Ready
version_added: "0.1.0"
description:
  - Writes the failure message of a wait for the device-plugin pod on a node from what the
    cluster showed - the pods the wait found (the input), the DaemonSets of the plugin's
    namespace and the Node - so an operator knows where to look.
  - It names the node, the time waited, the namespace and the selector; each pod's phase and
    the state of each container that is not ready (with its reason); each DaemonSet's Ready
    count and nodeSelector (or that there is none, or that listing them failed); and the next
    step, which depends on whether the node carries the label O(present_label) set to C(true)
    and whether a pod is there at all.
author:
  - hygon.dcu maintainers (!UNKNOWN)
options:
  _input:
    description:
      - The registered result of the M(kubernetes.core.k8s_info) wait for the pod
        (C(resources), or C(msg) when the listing failed).
    type: dict
    required: true
  daemonsets:
    description: The registered result of listing the DaemonSets in O(namespace).
    type: dict
    required: true
  node:
    description: The registered result of reading the Node.
    type: dict
    required: true
  node_name:
    description: The Kubernetes name of the node.
    type: str
    required: true
  timeout:
    description: How long the wait lasted, in seconds.
    type: int
    required: true
  namespace:
    description: The device plugin's namespace.
    type: str
    required: true
  selector:
    description: The label selector of the device-plugin pods.
    type: str
    required: true
  present_label:
    description: The node label the DaemonSet's nodeSelector requires to be C(true).
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Fail with what the cluster showed
  ansible.builtin.fail:
    msg: >-
      {{ plugin_pods | hygon.dcu.plugin_not_ready_message(
           daemonsets=plugin_daemonsets, node=plugin_node, node_name='gpu-7', timeout=600,
           namespace='hygon-dcu-system', selector='app.kubernetes.io/name=hygon-dcu-device-plugin',
           present_label=mig_node__present_label) }}
"""

RETURN = r"""
_value:
  description: The message, several lines, without a trailing newline.
  type: str
"""


def _container_note(status: Mapping[str, Any]) -> str:
    # The state is a one-key mapping (waiting, running or terminated) to its details.
    state = status.get("state") or {}
    note = f", container {status.get('name')} {next(iter(state), 'in no state')}"
    for detail in state.values():
        if isinstance(detail, Mapping) and "reason" in detail:
            note += f" ({detail['reason']})"
    return note


def _pod_line(pod: Mapping[str, Any]) -> str:
    status = pod.get("status") or {}
    line = f"Pod {pod['metadata']['name']}: phase {status.get('phase', 'unknown')}"
    for container in status.get("containerStatuses") or []:
        if not container.get("ready", False):
            line += _container_note(container)
    return line + "."


def _daemonset_lines(daemonset: Mapping[str, Any]) -> list[str]:
    status = daemonset.get("status") or {}
    template = (daemonset.get("spec") or {}).get("template") or {}
    node_selector = (template.get("spec") or {}).get("nodeSelector", {})
    return [
        f"DaemonSet {daemonset['metadata']['name']}: {status.get('numberReady', 0)} of",
        f"{status.get('desiredNumberScheduled', 0)} pod(s) Ready, nodeSelector",
        f"{json.dumps(node_selector)}.",
    ]


def _pod_lines(pods_result: Mapping[str, Any], pods: list[Any]) -> list[str]:
    if "msg" in pods_result and "resources" not in pods_result:
        return [f"Listing the pods failed: {pods_result['msg']}."]
    if not pods:
        return ["No pod with that selector is on the node."]
    return [_pod_line(pod) for pod in pods]


def _daemonsets_lines(daemonsets: Mapping[str, Any], namespace: str) -> list[str]:
    if daemonsets.get("failed", False):
        return [f"Listing the DaemonSets failed: {daemonsets.get('msg', 'no message')}."]
    found = daemonsets.get("resources") or []
    if not found:
        return [
            f"Namespace {namespace} has no DaemonSet: deploy the device plugin"
            " (hygon.dcu.deploy_device_plugin)",
            "with the same hygon_dcu_namespace, or set hygon_dcu_namespace to where it runs.",
        ]
    return [line for daemonset in found for line in _daemonset_lines(daemonset)]


def _next_step_lines(
    node: Mapping[str, Any], node_name: str, present_label: str, namespace: str, pods: list[Any]
) -> list[str]:
    node_object = (node.get("resources") or [{}])[0]
    labels = (node_object.get("metadata") or {}).get("labels") or {}
    if labels.get(present_label, "") != "true":
        return [
            f"Node '{node_name}' lacks {present_label}=true, which the DaemonSet's nodeSelector",
            "requires: run hygon.dcu.label_nodes for it.",
        ]
    if not pods:
        return [
            "If the DaemonSet schedules no pod here, compare its nodeSelector and tolerations"
            " with the node's labels and taints."
        ]
    return [f"Read the pod's events and logs (kubectl -n {namespace} describe pod; kubectl logs)."]


def plugin_not_ready_message(
    pods_result: Mapping[str, Any],
    *,
    daemonsets: Mapping[str, Any],
    node: Mapping[str, Any],
    node_name: str,
    timeout: Any,
    namespace: str,
    selector: str,
    present_label: str,
) -> str:
    """The wait's failure message: the pods, the DaemonSets, then what to do next."""
    pods = pods_result.get("resources") or []
    lines = [
        f"No Ready device-plugin pod on node '{node_name}' after {timeout} s",
        f"(namespace {namespace}, selector {selector}).",
        *_pod_lines(pods_result, pods),
        *_daemonsets_lines(daemonsets, namespace),
        *_next_step_lines(node, node_name, present_label, namespace, pods),
    ]
    return "\n".join(lines)


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"plugin_not_ready_message": plugin_not_ready_message}
