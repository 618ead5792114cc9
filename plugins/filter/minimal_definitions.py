# Copyright: hygon.dcu contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# Apache-2.0 code may be combined into works under the GNU General Public License version 3,
# the license of ansible-core, which loads this filter.

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

DOCUMENTATION = r"""
---
name: minimal_definitions
short_description: Turn references to Kubernetes objects into the least definitions naming them
version_added: "0.1.0"
description:
  - Turns references C({api_version, kind, name[, namespace]}) into definitions with only
    C(apiVersion), C(kind), C(metadata.name) and, when the reference has one,
    C(metadata.namespace) - all that M(kubernetes.core.k8s) needs to delete the objects in one
    call, in order.
author:
  - hygon.dcu maintainers (!UNKNOWN)
options:
  _input:
    description: The references, in the order the objects are to be handled.
    type: list
    elements: dict
    required: true
"""

EXAMPLES = r"""
- name: Delete, in order
  kubernetes.core.k8s:
    state: absent
    definition: >-
      {{ [{'api_version': 'apps/v1', 'kind': 'DaemonSet', 'name': 'hygon-dcu-device-plugin',
           'namespace': 'hygon-dcu-system'},
          {'api_version': 'v1', 'kind': 'Namespace', 'name': 'hygon-dcu-system'}]
         | hygon.dcu.minimal_definitions }}
"""

RETURN = r"""
_value:
  description: One definition per reference, in the order of the input.
  type: list
  elements: dict
"""


def _definition(reference: Mapping[str, Any]) -> dict[str, Any]:
    metadata = {"name": reference["name"]}
    # A cluster-scoped object's reference has no namespace at all.
    if "namespace" in reference:
        metadata["namespace"] = reference["namespace"]
    return {"apiVersion": reference["api_version"], "kind": reference["kind"], "metadata": metadata}


def minimal_definitions(references: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``{apiVersion, kind, metadata: {name[, namespace]}}`` for each reference."""
    return [_definition(reference) for reference in references]


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"minimal_definitions": minimal_definitions}
