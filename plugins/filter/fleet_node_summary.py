# Copyright: hygon.dcu contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# Apache-2.0 code may be combined into works under the GNU General Public License version 3,
# the license of ansible-core, which loads this filter.

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

DOCUMENTATION = r"""
---
name: fleet_node_summary
short_description: Summarise one node for the fleet report
version_added: "0.1.0"
description:
  - Builds one node's entry of the fleet report (C(fleet.json)) from what M(hygon.dcu.mig_info)
    read on the node, the pods on the node and the device-plugin pods.
  - Each live partition lists the pods it serves. The device plugin annotates each pod it serves
    with an annotation whose value holds the partition's uuid; pods are matched by that uuid,
    never by the key, whose format may change, so any key that starts with
    O(annotation_prefix) (its last C(.) left out) counts.
  - Only stable facts go in (no times, no resource versions), so the same node gives the same
    summary and an unchanged fleet rewrites no file.
author:
  - hygon.dcu maintainers (!UNKNOWN)
options:
  _input:
    description: The C(mig_info) that M(hygon.dcu.mig_info) returned for the node.
    type: dict
    required: true
  host:
    description: The node's inventory name.
    type: str
    required: true
  kubernetes:
    description:
      - Whether the cluster was read. When false the pods are not known, each partition's
        C(pods) is null and the device plugin's state is C(not read).
    type: bool
    required: true
  node_name:
    description: The node's Kubernetes name (reported only when O(kubernetes) is true).
    type: str
    required: true
  pods:
    description: The pods on the node, as M(kubernetes.core.k8s_info) returns them.
    type: list
    elements: dict
    default: []
  plugin_pods:
    description: The device-plugin pods on the node, as M(kubernetes.core.k8s_info) returns them.
    type: list
    elements: dict
    default: []
  annotation_prefix:
    description: The prefix of the device plugin's grant annotations (the generated vocabulary's).
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Summarise the node
  ansible.builtin.set_fact:
    node_summary: >-
      {{ node_read.mig_info | hygon.dcu.fleet_node_summary(
           host=inventory_hostname, kubernetes=true, node_name='gpu-7',
           pods=node_pods.resources, plugin_pods=plugin_pods.resources,
           annotation_prefix=annotation_prefix) }}
"""

RETURN = r"""
_value:
  description: The node's summary, as C(fleet.json) lists it under C(nodes).
  type: dict
  contains:
    host:
      description: The node's inventory name.
      type: str
    kubernetes:
      description: Whether the cluster was read.
      type: bool
    node_name:
      description: The node's Kubernetes name, null without O(kubernetes).
      type: str
    mode:
      description: C(enabled), C(disabled) or C(unknown).
      type: str
    pending:
      description: The mode after the next reboot, when the library tells.
      type: str
    mode_source:
      description: C(library) or C(registry).
      type: str
    partitioned:
      description: True only when the library answers and the mode is on.
      type: bool
    virtualization:
      description: Whether the driver reports profiles; null when no card answered.
      type: bool
    library_error:
      description: Why the management library is unusable, null when it is usable.
      type: str
    errors:
      description: The queries that failed.
      type: list
      elements: str
    cards:
      description:
        - Each card by index, with its partitions sorted by first slice (each with the pods it
          serves, sorted by namespace and name, or null without O(kubernetes)), its occupied
          slices and its free placements per profile.
        - Its logical slices (C(logical_slices), by id, each with its compute units, memory,
          conf problem and the running pods the device plugin annotated with it, or null without
          O(kubernetes)) and the compute units and memory they use and leave free
          (C(slice_use)).
      type: list
      elements: dict
    slices_error:
      description: Why the logical slices could not be read, null when they were.
      type: str
    poison:
      description: The paths of the registry's poison directories, sorted.
      type: list
      elements: str
    plugin:
      description:
        - The device plugin's C(state) (C(ready), C(not ready), C(absent) or C(not read)) and
          its C(pods) (namespace, name, phase, ready), sorted by namespace and name.
      type: dict
"""


def _fold(value: Any) -> Any:
    # The report has always sorted names without regard to case (Jinja's sort did).
    return value.lower() if isinstance(value, str) else value


def _by_namespace_and_name(pods: Iterable[Mapping[str, Any]]) -> list[Any]:
    return sorted(pods, key=lambda pod: (_fold(pod["namespace"]), _fold(pod["name"])))


def _whole_number(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        return 0


def _start_and_size(placement: Any) -> tuple[int, int]:
    """``start:size`` as two numbers; what is missing or unreadable counts as 0."""
    start, size = f"{placement}:".split(":")[:2]
    return _whole_number(start), _whole_number(size)


def _grants(pods: Iterable[Mapping[str, Any]], annotation_stem: str) -> list[dict[str, Any]]:
    """Every grant annotation's value with the pod it is on."""
    grants = []
    for pod in pods:
        metadata = pod["metadata"]
        served = {
            "namespace": metadata["namespace"],
            "name": metadata["name"],
            "phase": (pod.get("status") or {}).get("phase") or "",
            "terminating": metadata.get("deletionTimestamp") is not None,
        }
        for key, value in (metadata.get("annotations") or {}).items():
            if key.startswith(annotation_stem):
                grants.append({"value": str(value), "pod": dict(served)})
    return grants


def _served_pods(uuid: Any, grants: list[dict[str, Any]]) -> list[dict[str, Any]]:
    served: list[dict[str, Any]] = []
    if not uuid:
        return served
    for grant in grants:
        if uuid in grant["value"] and grant["pod"] not in served:
            served.append(grant["pod"])
    return served


def _partition(
    instance: Mapping[str, Any], grants: list[dict[str, Any]], kubernetes: bool
) -> dict[str, Any]:
    start, size = _start_and_size(instance["placement"])
    pods = _served_pods(instance["uuid"], grants)
    return {
        "profile": instance["profile"],
        "placement": instance["placement"],
        "start": start,
        "size": size,
        "uuid": instance["uuid"],
        "gpu_instance_id": instance["gpu_instance_id"],
        "compute_instance_id": instance["compute_instance_id"],
        "pods": _by_namespace_and_name(pods) if kubernetes else None,
    }


def _slice_holders(grants: list[dict[str, Any]]) -> dict[tuple[Any, Any], list[Any]]:
    """(card PCI address, vdev id) -> the pods whose slice annotation names it, each
    annotation read once. A vdev id is reused once destroyed, so a finished pod's annotation
    (its slice is gone) is left out."""
    holders: dict[tuple[Any, Any], list[Any]] = {}
    for grant in grants:
        if grant["pod"]["phase"] in ("Succeeded", "Failed"):
            continue
        try:
            value = json.loads(grant["value"])
        except ValueError:
            continue  # a partition's or a damaged annotation: it names no slice
        if not isinstance(value, dict):
            continue
        card, vdev_id = value.get("card"), value.get("slice")
        # Only what can equal a card's address (text, or none) and a vdev id (a number).
        if not isinstance(card, str | None) or not isinstance(vdev_id, int | float):
            continue
        pods = holders.setdefault((card, vdev_id), [])
        if grant["pod"] not in pods:
            pods.append(grant["pod"])
    return holders


def _slice(vdev: Mapping[str, Any], holders: list[Any] | None) -> dict[str, Any]:
    return {
        "id": vdev["id"],
        "compute_units": vdev["compute_units"],
        "memory_mib": vdev["memory_mib"],
        "conf_problem": vdev["conf_problem"],
        "pods": None if holders is None else _by_namespace_and_name(holders),
    }


def _slice_use(card: Mapping[str, Any], slices: list[dict[str, Any]]) -> dict[str, int]:
    used_cus = sum(int(vdev["compute_units"]) for vdev in slices)
    used_mib = sum(int(vdev["memory_mib"]) for vdev in slices)
    return {
        "used_compute_units": used_cus,
        "free_compute_units": max(int(card["cu_count"] or 0) - used_cus, 0),
        "used_memory_mib": used_mib,
        "free_memory_mib": max(int(card["memory_mib"] or 0) - used_mib, 0),
    }


def _card(
    card: Mapping[str, Any],
    instances: Iterable[Mapping[str, Any]],
    vdevs: Iterable[Mapping[str, Any]],
    grants: list[dict[str, Any]],
    *,
    slice_holders: dict[tuple[Any, Any], list[Any]],
    kubernetes: bool,
) -> dict[str, Any]:
    partitions = [
        _partition(instance, grants, kubernetes)
        for instance in instances
        if instance["card"] == card["index"]
    ]
    slices = sorted(
        (
            _slice(vdev, slice_holders.get((card["pci"], vdev["id"]), []) if kubernetes else None)
            for vdev in vdevs
            if vdev["card"] == card["index"]
        ),
        key=lambda vdev: vdev["id"],
    )
    return {
        "index": card["index"],
        "pci": card["pci"],
        "model": card["model"],
        "slice_count": card["slice_count"],
        "cu_count": card["cu_count"],
        "memory_mib": card["memory_mib"],
        "healthy": card["healthy"],
        "error": card["error"],
        "occupied_slices": card["occupied_slices"],
        "partitions": sorted(partitions, key=lambda part: (part["start"], part["gpu_instance_id"])),
        "free_placements": card["free_placements"],
        "logical_slices": slices,
        "slice_use": _slice_use(card, slices),
    }


def _plugin_pod(pod: Mapping[str, Any]) -> dict[str, Any]:
    status = pod.get("status") or {}
    conditions = status.get("conditions") or []
    return {
        "namespace": pod["metadata"]["namespace"],
        "name": pod["metadata"]["name"],
        "phase": status.get("phase") or "",
        "ready": any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions),
    }


def _plugin_state(kubernetes: bool, pods: list[dict[str, Any]]) -> str:
    if not kubernetes:
        return "not read"
    if not pods:
        return "absent"
    return "ready" if any(pod["ready"] for pod in pods) else "not ready"


def fleet_node_summary(
    mig_info: Mapping[str, Any],
    *,
    host: str,
    kubernetes: bool,
    node_name: str,
    annotation_prefix: str,
    pods: Iterable[Mapping[str, Any]] = (),
    plugin_pods: Iterable[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """One node's entry of fleet.json."""
    grants = _grants(pods, annotation_prefix.removesuffix("."))
    plugin = [_plugin_pod(pod) for pod in plugin_pods]
    cards = sorted(mig_info["cards"], key=lambda card: card["index"])
    # A node layer older than logical slices reports none; say so rather than show zero.
    logical = mig_info.get("logical_slices") or {
        "library": {"usable": False, "error": "not reported by this node's mig_info"},
        "vdevs": [],
    }
    vdevs = logical["vdevs"]
    holders = _slice_holders(grants)
    return {
        "host": host,
        "kubernetes": kubernetes,
        "node_name": node_name if kubernetes else None,
        "mode": mig_info["mode"].get("current") or "unknown",
        "pending": mig_info["mode"]["pending"],
        "mode_source": mig_info["mode"]["source"],
        "partitioned": mig_info["partitioned"],
        "virtualization": mig_info["virtualization"],
        "library_error": None if mig_info["library"]["usable"] else mig_info["library"]["error"],
        "errors": mig_info["errors"],
        "cards": [
            _card(
                card,
                mig_info["instances"],
                vdevs,
                grants,
                slice_holders=holders,
                kubernetes=kubernetes,
            )
            for card in cards
        ],
        "slices_error": None if logical["library"]["usable"] else logical["library"]["error"],
        "poison": sorted((finding["path"] for finding in mig_info["poison"]), key=_fold),
        "plugin": {
            "state": _plugin_state(kubernetes, plugin),
            "pods": _by_namespace_and_name(plugin),
        },
    }


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"fleet_node_summary": fleet_node_summary}
