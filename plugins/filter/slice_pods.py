# Copyright: hygon.dcu contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# Apache-2.0 code may be combined into works under the GNU General Public License version 3,
# the license of ansible-core, which loads this filter.

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ansible_collections.hygon.dcu.plugins.plugin_utils.pods import has_finished, resource_names

DOCUMENTATION = r"""
---
name: slice_pods
short_description: The pods on a node that hold a logical slice
version_added: "0.1.0"
description:
  - From the pods on a node, picks those that have not finished (phase neither C(Succeeded) nor
    C(Failed)) with a container or init container that requests or limits O(sliced_resource).
  - The enable path of the C(hygon.dcu.mig_node) role refuses while any runs, unless told to
    drain them; their slices would be destroyed with the switch.
author:
  - hygon.dcu maintainers (!UNKNOWN)
positional: _input, sliced_resource
options:
  _input:
    description: The pods on the node, as M(kubernetes.core.k8s_info) returns them.
    type: list
    elements: dict
    required: true
  sliced_resource:
    description:
      - The logical slice resource name (the role passes the generated
        C(mig_node__vocabulary_sliced)).
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Find the pods that hold a logical slice
  ansible.builtin.set_fact:
    slice_holders: "{{ node_pods.resources | hygon.dcu.slice_pods(mig_node__vocabulary_sliced) }}"
"""

RETURN = r"""
_value:
  description: Each chosen pod as C(namespace/name), in the order of the input.
  type: list
  elements: str
"""


def slice_pods(pods: Iterable[Mapping[str, Any]], sliced_resource: str) -> list[str]:
    return [
        f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
        for pod in pods
        if not has_finished(pod) and sliced_resource in resource_names(pod)
    ]


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"slice_pods": slice_pods}
