# Copyright: hygon.dcu contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# Apache-2.0 code may be combined into works under the GNU General Public License version 3,
# the license of ansible-core, which loads this filter.

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ansible_collections.hygon.dcu.plugins.plugin_utils.pods import owner_kinds

DOCUMENTATION = r"""
---
name: drained_pods
short_description: Name the pods on a node that a full drain evicts and waits for
version_added: "0.1.0"
description:
  - From the pods on a node, names every pod a drain evicts, as C(namespace/name). That is every
    pod but those a DaemonSet owns and the static (mirror) pods, which a drain leaves alone.
  - An empty list means the drain is complete.
author:
  - hygon.dcu maintainers (!UNKNOWN)
options:
  _input:
    description: The pods on the node, as M(kubernetes.core.k8s_info) returns them.
    type: list
    elements: dict
    required: true
"""

EXAMPLES = r"""
- name: Wait until the drained pods are gone
  kubernetes.core.k8s_info:
    kind: Pod
    field_selectors:
      - spec.nodeName={{ node_name }}
  register: left
  retries: 60
  delay: 5
  until: left.resources | default([]) | hygon.dcu.drained_pods | length == 0
"""

RETURN = r"""
_value:
  description: C(namespace/name) of each pod the drain still waits for, in the order of the input.
  type: list
  elements: str
"""

# The kubelet's annotation on the API object it mirrors a static pod into.
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"


def _left_by_a_drain(pod: Mapping[str, Any]) -> bool:
    annotations = pod["metadata"].get("annotations") or {}
    return "DaemonSet" in owner_kinds(pod) or MIRROR_ANNOTATION in annotations


def drained_pods(pods: Iterable[Mapping[str, Any]]) -> list[str]:
    """``namespace/name`` of every pod a drain evicts."""
    return [
        f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
        for pod in pods
        if not _left_by_a_drain(pod)
    ]


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"drained_pods": drained_pods}
