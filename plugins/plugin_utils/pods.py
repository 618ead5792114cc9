# Copyright: hygon.dcu contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# Apache-2.0 code may be combined into works under the GNU General Public License version 3,
# the license of ansible-core, which loads this code.

"""What the roles' filters read from a pod the same way: whether it has finished, which kinds
of object own it, and which resources its containers ask for."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# A pod in one of these phases runs nothing any more: it holds no device and restarts nothing.
FINISHED_PHASES = ("Succeeded", "Failed")


def has_finished(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase", "") in FINISHED_PHASES


def owner_kinds(pod: Mapping[str, Any]) -> list[Any]:
    """The kinds in the pod's ownerReferences (a DaemonSet's pods say ``DaemonSet``)."""
    return [owner.get("kind") for owner in pod["metadata"].get("ownerReferences") or []]


def resource_names(pod: Mapping[str, Any]) -> set[str]:
    """Every resource name a container or init container of the pod requests or limits."""
    spec = pod.get("spec") or {}
    names: set[str] = set()
    for container in (spec.get("containers") or []) + (spec.get("initContainers") or []):
        resources = container.get("resources") or {}
        names.update(resources.get("requests") or {})
        names.update(resources.get("limits") or {})
    return names
