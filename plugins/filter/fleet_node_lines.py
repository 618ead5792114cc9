# Copyright: hygon.dcu contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# Apache-2.0 code may be combined into works under the GNU General Public License version 3,
# the license of ansible-core, which loads this filter.

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

DOCUMENTATION = r"""
---
name: fleet_node_lines
short_description: Show one node of the fleet report as lines for the run's output
version_added: "0.1.0"
description:
  - Turns a node's summary (from P(hygon.dcu.fleet_node_summary#filter)) into lines an operator
    reads in the run's output - the mode and the device plugin, then per card a slice picture
    (C(#) occupied, C(.) free), its partitions with the pods they serve and its free placements,
    then the poison directories and the query errors.
  - Long lists are cut at O(shown) entries, followed by C(and N more (see fleet.json)), so a big
    node stays readable; C(fleet.json) has them all.
author:
  - hygon.dcu maintainers (!UNKNOWN)
positional: _input, shown
options:
  _input:
    description: The node's summary, as P(hygon.dcu.fleet_node_summary#filter) returns it.
    type: dict
    required: true
  shown:
    description: How many entries of a long list to show.
    type: int
    required: true
"""

EXAMPLES = r"""
- name: Show the node
  ansible.builtin.debug:
    msg: "{{ node_summary | hygon.dcu.fleet_node_lines(10) }}"
"""

RETURN = r"""
_value:
  description: The lines, in the order they are read.
  type: list
  elements: str
"""


def _fold(value: Any) -> Any:
    return value.lower() if isinstance(value, str) else value


def _cut(items: Sequence[Any], shown: int) -> str:
    text = ", ".join(str(item) for item in items[:shown])
    if len(items) > shown:
        text += f" and {len(items) - shown} more (see fleet.json)"
    return text


def _mode_line(node: Mapping[str, Any], shown: int) -> str:
    pending = node["pending"]
    line = f"mode {node['mode']}"
    if pending and pending != node["mode"]:
        line += f" (pending {pending})"
    plugin = node["plugin"]
    if not node["kubernetes"]:
        device_plugin = f"{plugin['state']} (Kubernetes steps off)"
    elif plugin["pods"]:
        names = [pod["name"] for pod in plugin["pods"]]
        device_plugin = f"{plugin['state']} ({_cut(names, shown)})"
    else:
        device_plugin = plugin["state"]
    return f"{line}, read from the {node['mode_source']}; device plugin: {device_plugin}"


def _card_line(card: Mapping[str, Any]) -> str:
    picture = "".join(
        "#" if index in card["occupied_slices"] else "."
        for index in range(int(card["slice_count"]))
    )
    line = (
        f"card {card['index']} {card['pci'] or 'PCI address unknown (mode off)'}"
        f", model {card['model'] or 'not reported by the driver'}"
        f", {card['slice_count']} slices [{picture}]"
        f" ({card['cu_count']} CUs, {card['memory_mib']} MiB)"
    )
    return line if card["healthy"] else f"{line}; FAILS QUERIES: {card['error']}"


def _partition_line(part: Mapping[str, Any], shown: int) -> str:
    if part["pods"] is None:
        pods = "pods not read (Kubernetes steps off)"
    elif not part["pods"]:
        pods = "no pod"
    else:
        pods = "pod " + _cut([f"{pod['namespace']}/{pod['name']}" for pod in part["pods"]], shown)
    compute = part["compute_instance_id"]
    return (
        f"  partition {part['profile'] or 'unknown profile'} at {part['placement']}"
        f" (GPU instance {part['gpu_instance_id']}"
        f", compute instance {compute if compute is not None else 'none'})"
        f" uuid {part['uuid'] or 'none'}: {pods}"
    )


def _free_line(card: Mapping[str, Any], mode: Any) -> str:
    # By profile name, without regard to case (as the report always listed them).
    profiles = sorted(card["free_placements"].items(), key=lambda item: _fold(item[0]))
    free = "; ".join(
        f"{profile} {' '.join(str(p) for p in placements) or 'none'}"
        for profile, placements in profiles
    )
    when = "" if mode == "enabled" else " once partitioning is on"
    return f"  free placements{when}: {free or 'none (no profile reported)'}"


def _slices_line(card: Mapping[str, Any], shown: int) -> str:
    use = card["slice_use"]
    slices = ", ".join(
        f"{vdev['id']} ({vdev['compute_units']} CUs, {vdev['memory_mib']} MiB"
        + (f"; conf: {vdev['conf_problem']}" if vdev["conf_problem"] else "")
        + (
            "; pod " + _cut([f"{pod['namespace']}/{pod['name']}" for pod in vdev["pods"]], shown)
            if vdev.get("pods")
            else ""
        )
        + ")"
        for vdev in card["logical_slices"]
    )
    return (
        f"  logical slices: {slices or 'none'}; free {use['free_compute_units']} CUs, "
        f"{use['free_memory_mib']} MiB"
    )


def fleet_node_lines(node: Mapping[str, Any], shown: int) -> list[str]:
    """The node's summary as the lines the run prints."""
    shown = int(shown)
    lines = [_mode_line(node, shown)]
    if node["library_error"]:
        lines.append(f"management library unusable: {node['library_error']}")
    if node["slices_error"] and node["mode"] != "enabled":
        lines.append(f"logical slices unknown: {node['slices_error']}")
    for card in node["cards"]:
        lines.append(_card_line(card))
        lines += [_partition_line(part, shown) for part in card["partitions"]]
        if not card["partitions"]:
            lines.append("  no partition")
        lines.append(_free_line(card, node["mode"]))
        if node["mode"] != "enabled" and not node["slices_error"]:
            lines.append(_slices_line(card, shown))
    poison = node["poison"]
    lines.append(
        "poison directories: " + (f"{len(poison)}: {_cut(poison, shown)}" if poison else "none")
    )
    if node["errors"]:
        lines.append(f"query errors: {_cut(node['errors'], shown)}")
    return lines


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"fleet_node_lines": fleet_node_lines}
