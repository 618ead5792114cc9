#!/usr/bin/python
# Copyright: hygon.dcu contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# Apache-2.0 code may be combined into works under the GNU General Public License version 3,
# the license of ansible-core, which runs this module.

from __future__ import annotations

DOCUMENTATION = r"""
---
module: mig_info
short_description: Report a Hygon DCU node's partition mode, cards, profiles and instances
version_added: "0.1.0"
description:
  - Reads the node-wide partition ("MIG") mode, every card (library index, PCI address, model,
    compute units, memory), the profiles each card offers with their legal placements, the live
    GPU and compute instances with their uuids, poison directories in the driver's registry and
    whether the driver was installed with virtualization support.
  - Cards are matched to PCI addresses through the registry file C(dev<N>), which only exists
    while the mode is on; with the mode off C(pci) is null.
  - Profiles are discovered from the driver by width sweep, never computed. A driver installed
    without virtualization support reports no profiles at all.
  - When the management library cannot be loaded or cannot serve (no driver, missing symbols),
    the node is reported as not partitioned and the mode falls back to the presence of the
    registry's C(dev<N>) files.
  - Finds the vendor's C(hy-smi) exactly as M(hygon.dcu.mig_mode) does with the same
    O(hy_smi_path), so a caller can refuse a switch before changing anything.
author:
  - hygon.dcu maintainers (!UNKNOWN)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - hygon.dcu.node
  - hygon.dcu.node.library
  - hygon.dcu.node.hy_smi
attributes:
  platform:
    platforms: posix
  check_mode:
    support: full
  diff_mode:
    support: none
notes:
  - Read-only; never changes the node.
"""

EXAMPLES = r"""
- name: Read the node's partition state
  hygon.dcu.mig_info:
  register: node

- name: Show the profiles of card 0
  ansible.builtin.debug:
    msg: "{{ node.mig_info.cards[0].profiles | map(attribute='name') | list }}"

- name: Fail when a poison directory blocks instance ids
  ansible.builtin.assert:
    that: node.mig_info.poison | length == 0
"""

RETURN = r"""
mig_info:
  description: Everything known about the node's partitioning.
  returned: always
  type: dict
  contains:
    mode:
      description: Node-wide mode, C(enabled) or C(disabled), as read from the library
        (C(source=library)) or from the registry when the library is unusable
        (C(source=registry); C(pending) is then null).
      type: dict
      sample: {"current": "enabled", "pending": "enabled", "source": "library", "error": null}
    partitioned:
      description: True only when the library answers and the mode is on.
      type: bool
    library:
      description: Which library file was loaded, and why it is unusable if it is.
      type: dict
      sample: {"path": "/opt/hyhal/lib/libhydmi_mig.so.1", "usable": true, "error": null}
    virtualization:
      description: Whether the driver reports profiles (installed with virtualization
        support); null when no card could be queried.
      type: bool
    cards:
      description: One entry per card the library counts. C(remaining) is, per profile, how many
        more instances fit at once on the free slices (the count the device plugin advertises).
      type: list
      elements: dict
      sample:
        - index: 0
          pci: "0000:09:00.0"
          model: null
          slice_count: 4
          cu_count: 80
          memory_mib: 65520
          healthy: true
          error: null
          profiles:
            - {"id": 3, "name": "2g.15gb", "slices": 1, "cu_count": 20, "memory_mib": 16380,
               "gi_count_max": 4, "placements": ["0:1", "1:1", "2:1", "3:1"]}
          occupied_slices: [0]
          remaining: {"2g.15gb": 3, "4g.31gb": 1, "8g.63gb": 0}
          free_placements: {"2g.15gb": ["1:1", "2:1", "3:1"], "4g.31gb": ["2:2"], "8g.63gb": []}
    node_labels:
      description:
        - The capability labels of the node's Kubernetes Node, which the mig_node role writes
          and the device plugin keeps true. They give the healthy card count, whether a card
          offers profiles, the cards' model when they share one, the mode when it is known, and
          per profile how many the empty cards hold.
        - Null when the library is unusable, since nothing is certain then.
      type: dict
      sample: {"hygon.com/dcu.count": "2", "hygon.com/dcu.mig.capable": "true",
               "hygon.com/dcu.product": "c3000-bw", "hygon.com/dcu.mig.mode": "on",
               "hygon.com/dcu.mig-2g.15gb.count": "8"}
    profiles:
      description: Profiles by name across cards, with the cards offering each.
      type: list
      elements: dict
      sample:
        - {"name": "2g.15gb", "id": 3, "slices": 1, "cu_count": 20, "memory_mib": 16380,
           "cards": [0, 1], "placements": ["0:1", "1:1", "2:1", "3:1"]}
    instances:
      description: Live instances, one per compute instance (a GPU instance without one is
        listed with a null C(compute_instance_id)); C(uuid) comes from the registry conf file.
      type: list
      elements: dict
      sample:
        - {"card": 0, "pci": "0000:09:00.0", "gpu_instance_id": 3, "compute_instance_id": 0,
           "profile": "2g.15gb", "profile_id": 3, "placement": "0:1",
           "uuid": "3b2a1c9e-7f00-4c1d-9a55-0123456789ab",
           "conf_path": "/etc/dmi_mig_config/ci/dev0gi3ci0.conf"}
    poison:
      description: Directories on C(ci/) names; each blocks every later create of that id.
        Remove them with M(hygon.dcu.mig_instances).
      type: list
      elements: dict
      sample: [{"kind": "poison", "path": "/etc/dmi_mig_config/ci/dev0gi4ci0.conf",
                "detail": "a directory on a ci/ name blocks every later create of that id"}]
    findings:
      description: Everything odd in the registry (poison, links, unreadable files, bad names,
        malformed conf files).
      type: list
      elements: dict
    logical_slices:
      description: The live logical slices (the vendor's virtual devices) read through
        C(libhydmi.so), the conf files under C(/etc/vdev) (C(conf_paths)) and those of no live
        slice (C(stray_confs)). With the library unusable, C(vdevs) is empty and
        C(library.error) says why; C(conf_problem) says why a live slice's conf file cannot be
        given to a container.
      type: dict
      sample:
        library: {"path": "/opt/hyhal/lib/libhydmi.so", "usable": true, "error": null}
        vdevs:
          - {"id": 0, "card": 0, "compute_units": 20, "memory_mib": 16384,
             "conf_path": "/etc/vdev/vdev0.conf", "conf_problem": null}
        conf_paths: ["/etc/vdev/vdev0.conf"]
        stray_confs: []
    errors:
      description: Queries that failed (per card or for instances); the rest of the report
        still stands.
      type: list
      elements: str
    hy_smi:
      description: The C(hy-smi) that M(hygon.dcu.mig_mode) would run with the same
        O(hy_smi_path), or, with a null C(path), why there is none.
      type: dict
      sample: {"path": "/opt/hyhal/bin/hy-smi", "error": null}
"""

from typing import Any

from ansible.module_utils.basic import AnsibleModule

from ..module_utils.common_options import find_hy_smi, host_root_spec, hy_smi_spec, library_spec
from ..module_utils.facts import (
    card_facts,
    finding_facts,
    instance_facts,
    mode_facts,
    vdev_facts,
)
from ..module_utils.hydmi import HydmiError
from ..module_utils.cards import Card
from ..module_utils.dmi import DmiError
from ..module_utils.node import ModeSource, Node
from ..module_utils.node_labels import capability_labels
from ..module_utils.vdevs import VdevError, Vdevs


def profiles_by_name(cards: list[Card]) -> list[dict[str, Any]]:
    merged: dict[str, dict[str, Any]] = {}
    for card in cards:
        for profile in card.profiles:
            entry = merged.setdefault(
                profile.name,
                {
                    "name": profile.name,
                    "id": profile.id,
                    "slices": profile.slices,
                    "cu_count": profile.cu_count,
                    "memory_mib": profile.memory_mib,
                    "placements": [str(p) for p in profile.placements],
                    "cards": [],
                },
            )
            entry["cards"].append(card.index)
    return sorted(merged.values(), key=lambda entry: (entry["slices"], entry["name"]))


def logical_slices(host_root: str) -> dict[str, Any]:
    """The live logical slices through the vendor's libhydmi.so, or why they cannot be read."""
    vdevs = Vdevs(host_root)
    facts: dict[str, Any] = {
        "library": {"path": vdevs.library.path, "usable": False, "error": None},
        "vdevs": [],
        "stray_confs": [],
        "conf_paths": [],
    }
    try:
        reading = vdevs.read()
    except (DmiError, VdevError) as exc:
        facts["library"]["error"] = str(exc)
        try:
            facts["conf_paths"] = vdevs.conf_paths()
        except VdevError as unlisted:  # reported, as everything else mig_info cannot read
            facts["library"]["error"] += f"; {unlisted}"
        return facts
    facts["library"]["usable"] = True
    facts["vdevs"] = [vdev_facts(vdev) for vdev in reading.vdevs]
    facts["stray_confs"] = reading.stray_confs
    facts["conf_paths"] = reading.conf_paths
    return facts


def gather(node: Node) -> dict[str, Any]:
    errors: list[str] = []
    registry = node.registry()
    mode = node.mode()
    library_error: HydmiError | None = node.library.load_error
    cards: list[Card] = []
    instances: list[dict[str, Any]] = []
    try:
        cards = node.cards()
    except HydmiError as exc:
        errors.append(f"cards: {exc}")
        library_error = library_error or exc
    for card in cards:
        if not card.healthy:
            errors.append(f"card {card.index}: {card.error}")
            continue
        try:
            instances.extend(instance_facts(i) for i in node.instances(card.index))
        except HydmiError as exc:
            errors.append(f"instances on card {card.index}: {exc}")
    queried = [card for card in cards if card.healthy]
    return {
        "mode": mode_facts(mode),
        "partitioned": node.partitioned(),
        "library": {
            "path": node.library.path,
            "usable": library_error is None and mode.source is ModeSource.LIBRARY,
            "error": str(library_error) if library_error else mode.error,
        },
        "virtualization": any(card.profiles for card in queried) if queried else None,
        "cards": [card_facts(card) for card in cards],
        "profiles": profiles_by_name(cards),
        "instances": instances,
        "poison": [finding_facts(f) for f in registry.poison],
        "findings": [finding_facts(f) for f in registry.findings],
        "logical_slices": logical_slices(node.host_root),
        # Unsure without the library: no labels rather than wrong ones (0 cards, no profiles).
        "node_labels": capability_labels(cards, mode.current) if library_error is None else None,
        "errors": errors,
    }


def main() -> None:
    module = AnsibleModule(
        argument_spec={**host_root_spec(), **library_spec(), **hy_smi_spec()},
        supports_check_mode=True,
    )
    node = Node(module.params["host_root"], module.params["library_path"])
    info = gather(node)
    hy_smi, error = find_hy_smi(module.params["hy_smi_path"], module.get_bin_path)
    info["hy_smi"] = {"path": hy_smi, "error": error}
    module.exit_json(changed=False, mig_info=info)


if __name__ == "__main__":
    main()
