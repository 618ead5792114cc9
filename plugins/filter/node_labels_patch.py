# Copyright: hygon.dcu contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# Apache-2.0 code may be combined into works under the GNU General Public License version 3,
# the license of ansible-core, which loads this filter.

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.hygon.dcu.plugins.module_utils.node_labels import (
    is_capability_label,
    labels_patch,
)

DOCUMENTATION = r"""
---
name: node_labels_patch
short_description: The label patch that gives a Node its host's capability labels
version_added: "0.1.0"
description:
  - Compares a Node's labels with the capability labels of its host (the C(node_labels) that
    M(hygon.dcu.mig_info) returns) and returns the C(metadata.labels) merge patch that makes
    them equal.
  - Labels that differ are set; a capability label the Node carries that the host no longer
    earns (a profile gone, an unknown model) is removed (null). No other label is touched.
  - The result is empty when the Node is already right, so a patch task that is skipped on
    an empty result reports no change.
author:
  - hygon.dcu maintainers (!UNKNOWN)
positional: _input, wanted
options:
  _input:
    description: The Node's current labels (C(metadata.labels) of the object
      M(kubernetes.core.k8s_info) returns).
    type: dict
    required: true
  wanted:
    description: The capability labels, as M(hygon.dcu.mig_info) reports them.
    type: dict
    required: true
notes:
  - A key in O(wanted) that is not a capability label fails the filter.
"""

EXAMPLES = r"""
- name: Make the Node's capability labels true
  kubernetes.core.k8s:
    state: patched
    kind: Node
    name: "{{ node_name }}"
    definition:
      metadata:
        labels: >-
          {{ node.resources[0].metadata.labels
             | hygon.dcu.node_labels_patch(info.mig_info.node_labels) }}
"""

RETURN = r"""
_value:
  description: Label keys to values, null for a key to remove; empty when nothing changes.
  type: dict
"""


def node_labels_patch(current: Any, wanted: Any) -> dict[str, str | None]:
    if not isinstance(current, Mapping) or not isinstance(wanted, Mapping):
        raise AnsibleFilterError("node_labels_patch takes two mappings of label keys to values")
    foreign = sorted(key for key in wanted if not is_capability_label(str(key)))
    if foreign:
        raise AnsibleFilterError(f"node_labels_patch: not capability labels: {', '.join(foreign)}")
    return labels_patch(
        {str(k): str(v) for k, v in current.items()}, {str(k): str(v) for k, v in wanted.items()}
    )


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"node_labels_patch": node_labels_patch}
