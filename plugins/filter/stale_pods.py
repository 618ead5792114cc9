# Copyright: hygon.dcu contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# Apache-2.0 code may be combined into works under the GNU General Public License version 3,
# the license of ansible-core, which loads this filter.

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.hygon.dcu.plugins.plugin_utils.pods import has_finished

DOCUMENTATION = r"""
---
name: stale_pods
short_description: Find the pods whose partition grant names an instance that no longer exists
version_added: "0.1.0"
description:
  - A reboot wipes every partition instance, and the kubelet never calls Allocate again for the
    containers that ran on them. This filter finds those pods among the pods on a node.
  - 'The device plugin annotates each pod it serves with one annotation per container, keyed
    O(annotation_prefix) plus a key, whose value is JSON C({"uuid": ..., "container": ...}).'
  - The key is the container's name when it fits and a digest of it when not, so the
    container's name is read from the value (the key is the fallback).
  - A pod is stale when a grant's C(uuid) is not in O(live_uuids), it has not finished (phase
    neither C(Succeeded) nor C(Failed)) and it is not already being deleted.
author:
  - hygon.dcu maintainers (!UNKNOWN)
options:
  _input:
    description: The pods on the node, as M(kubernetes.core.k8s_info) returns them.
    type: list
    elements: dict
    required: true
  live_uuids:
    description: The uuids of the node's live instances (M(hygon.dcu.mig_info)).
    type: list
    elements: str
    required: true
  annotation_prefix:
    description:
      - The prefix of the grant annotations (the role passes the generated
        C(mig_node__vocabulary_annotation_prefix)).
    type: str
    required: true
notes:
  - A grant annotation whose value is not JSON fails the filter, naming the pod and the key.
"""

EXAMPLES = r"""
- name: Find pods whose partition no longer exists
  ansible.builtin.set_fact:
    stale: >-
      {{ node_pods.resources | hygon.dcu.stale_pods(
           live_uuids=node_info.mig_info.instances | map(attribute='uuid') | list,
           annotation_prefix=mig_node__vocabulary_annotation_prefix) }}
"""

RETURN = r"""
_value:
  description:
    - The stale pods, in the order of the input, each with the containers whose grant is lost.
  type: list
  elements: dict
  contains:
    namespace:
      description: The pod's namespace.
      type: str
    name:
      description: The pod's name.
      type: str
    containers:
      description: The names of the containers whose partition is gone.
      type: list
      elements: str
"""


def _grant(pod: Mapping[str, Any], key: str, value: Any) -> Mapping[str, Any]:
    try:
        grant = json.loads(value)
    except (TypeError, ValueError) as exc:
        metadata = pod["metadata"]
        raise AnsibleFilterError(
            f"pod {metadata['namespace']}/{metadata['name']}: annotation {key} is not JSON: {exc}"
        ) from exc
    # Any other JSON value names no uuid, so it grants nothing that still exists.
    return grant if isinstance(grant, Mapping) else {}


def _lost_containers(
    pod: Mapping[str, Any], live_uuids: Collection[Any], annotation_prefix: str
) -> list[Any]:
    lost = []
    for key, value in (pod["metadata"].get("annotations") or {}).items():
        if not key.startswith(annotation_prefix):
            continue
        grant = _grant(pod, key, value)
        if grant.get("uuid", "") not in live_uuids:
            lost.append(grant.get("container", key[len(annotation_prefix) :]))
    return lost


def stale_pods(
    pods: Iterable[Mapping[str, Any]], live_uuids: Collection[Any], annotation_prefix: str
) -> list[dict[str, Any]]:
    """The running pods with a grant for an instance not in ``live_uuids``."""
    stale = []
    for pod in pods:
        metadata = pod["metadata"]
        lost = _lost_containers(pod, live_uuids, annotation_prefix)
        if lost and not has_finished(pod) and not metadata.get("deletionTimestamp"):
            stale.append(
                {"namespace": metadata["namespace"], "name": metadata["name"], "containers": lost}
            )
    return stale


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"stale_pods": stale_pods}
