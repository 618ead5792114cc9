# Copyright: hygon.dcu contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# Apache-2.0 code may be combined into works under the GNU General Public License version 3,
# the license of ansible-core, which loads this filter.

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ansible_collections.hygon.dcu.plugins.plugin_utils.pods import (
    has_finished,
    owner_kinds,
    resource_names,
)

DOCUMENTATION = r"""
---
name: accelerator_pods
short_description: Choose the pods that must leave a node before its partition mode switches
version_added: "0.1.0"
description:
  - From the pods on a node, picks those with a container or init container that requests or
    limits a resource whose name starts with O(vendor_prefix), and that have not finished
    (phase neither C(Succeeded) nor C(Failed)).
  - Pods owned by a DaemonSet are listed apart, in RV(_value.daemonset), because evicting them
    is pointless; they tolerate the cordon and come straight back.
author:
  - hygon.dcu maintainers (!UNKNOWN)
positional: _input, vendor_prefix
options:
  _input:
    description: The pods on the node, as M(kubernetes.core.k8s_info) returns them.
    type: list
    elements: dict
    required: true
  vendor_prefix:
    description:
      - The product's resource name prefix (the role passes the generated
        C(mig_node__vocabulary_vendor_prefix)).
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Choose the pods that request a Hygon DCU resource
  ansible.builtin.set_fact:
    chosen: >-
      {{ node_pods.resources | hygon.dcu.accelerator_pods(mig_node__vocabulary_vendor_prefix) }}
"""

RETURN = r"""
_value:
  description: The chosen pods, each as C({namespace, name}), in the order of the input.
  type: dict
  contains:
    evict:
      description: Pods to evict.
      type: list
      elements: dict
    daemonset:
      description: Pods a DaemonSet owns, which eviction cannot move.
      type: list
      elements: dict
"""


def _requests_vendor_resource(pod: Mapping[str, Any], vendor_prefix: str) -> bool:
    return any(name.startswith(vendor_prefix) for name in resource_names(pod))


def accelerator_pods(
    pods: Iterable[Mapping[str, Any]], vendor_prefix: str
) -> dict[str, list[dict[str, Any]]]:
    """Split the node's unfinished pods that use a vendor resource into evict and daemonset."""
    chosen: dict[str, list[dict[str, Any]]] = {"evict": [], "daemonset": []}
    for pod in pods:
        if has_finished(pod) or not _requests_vendor_resource(pod, vendor_prefix):
            continue
        entry = {"namespace": pod["metadata"]["namespace"], "name": pod["metadata"]["name"]}
        chosen["daemonset" if "DaemonSet" in owner_kinds(pod) else "evict"].append(entry)
    return chosen


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"accelerator_pods": accelerator_pods}
