#!/usr/bin/python
# Copyright: hygon.dcu contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# Apache-2.0 code may be combined into works under the GNU General Public License version 3,
# the license of ansible-core, which runs this module.

from __future__ import annotations

DOCUMENTATION = r"""
---
module: mig_mode
short_description: Switch a Hygon DCU node's partition ("MIG") mode on or off
version_added: "0.1.0"
description:
  - Reads the node-wide partition mode through the management library (falling back to the
    presence of the registry's C(dev<N>) files when the library is unusable) and, when it
    differs from O(state), switches it with the vendor's C(hy-smi -mig 1) or C(hy-smi -mig 0).
  - Refuses before calling C(hy-smi) when any process holds C(/dev/kfd) (the vendor tool would
    refuse with a message that names nobody; this module names each pid and command), when it
    cannot tell whether anything holds it (not run as root, no usable C(/proc), no
    C(/dev/kfd) under O(host_root); see M(hygon.dcu.kfd_holders_info)), to disable, while
    any GPU instance exists (naming each one), and, to enable, while any logical slice exists
    (naming each one) or the vendor's C(libhydmi.so) cannot list them while C(/etc/vdev) holds
    slice conf files.
  - Maps every C(hy-smi) message it knows to an error that says what to do next, shows unknown
    output verbatim, and re-reads the mode afterwards to verify the switch.
  - Never passes C(-i). The mode is node-wide and the vendor tool rejects a device selector.
  - A running device plugin does not notice a mode change; restart it after every change.
author:
  - hygon.dcu maintainers (!UNKNOWN)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - hygon.dcu.node
  - hygon.dcu.node.library
  - hygon.dcu.node.hy_smi
options:
  state:
    description:
      - C(enabled) turns partitioning on, C(disabled) turns it off.
    type: str
    required: true
    choices: [enabled, disabled]
attributes:
  platform:
    platforms: posix
  check_mode:
    support: full
    details: Check mode runs the same checks (holders, instances, C(hy-smi) present) and fails
      where the real run would, without calling C(hy-smi).
  diff_mode:
    support: full
notes:
  - Stop every user of C(/dev/kfd) first, including the device plugin (park it on the node);
    M(hygon.dcu.kfd_holders_info) can wait for them.
  - To disable, remove every instance first with M(hygon.dcu.mig_instances).
  - To enable, remove every logical slice first with M(hygon.dcu.logical_slices).
"""

EXAMPLES = r"""
- name: Turn partitioning on
  hygon.dcu.mig_mode:
    state: enabled

- name: Turn partitioning off with a vendor tool outside PATH
  hygon.dcu.mig_mode:
    state: disabled
    hy_smi_path: /opt/hyhal/bin/hy-smi
"""

RETURN = r"""
mode:
  description: The mode after the module ran (in check mode, the mode it would set).
  returned: always
  type: str
  sample: enabled
previous_mode:
  description: The mode before the module ran.
  returned: always
  type: str
  sample: disabled
mode_source:
  description: C(library), or C(registry) when the library was unusable and the mode was read
    from the presence of the registry's C(dev<N>) files.
  returned: always
  type: str
  sample: library
vendor_output:
  description: What C(hy-smi) printed, when it was called.
  returned: when hy-smi ran
  type: str
  sample: Enabled mig mode successful.
"""

import re
from dataclasses import dataclass, field
from typing import Any

from ansible.module_utils.basic import AnsibleModule

from ..module_utils.common_options import find_hy_smi, host_root_spec, hy_smi_spec, library_spec
from ..module_utils.dmi import DmiError, DmiUnusable
from ..module_utils.facts import describe_instance, describe_vdev, mode_name
from ..module_utils.holders import explain_gaps, scan_holders
from ..module_utils.hostpath import host_path
from ..module_utils.hydmi import HydmiError
from ..module_utils.node import ModeSource, Node
from ..module_utils.vdevs import VdevError, Vdevs

KFD = "/dev/kfd"

# (pattern, None for success or the error to report). Unknown output is shown verbatim.
VENDOR_MESSAGES: tuple[tuple[re.Pattern[str], str | None], ...] = (
    (re.compile(r"Enabled mig mode successful"), None),
    (re.compile(r"Disabled mig mode successful"), None),
    (
        re.compile(r"The device is exist and may be in use"),
        "hy-smi refused the switch because a process holds /dev/kfd (the vendor names none, and "
        "none was visible a moment ago). Find it with hygon.dcu.kfd_holders_info (wait_timeout "
        "waits for it), stop it (park the device plugin on this node) and run again.",
    ),
    (
        re.compile(r"GPU instances still exist"),
        "hy-smi refused to disable because GPU instances still exist. Remove them with "
        "hygon.dcu.mig_instances (state: absent) and run again.",
    ),
    (
        re.compile(r"Invlaid arguments"),
        "hy-smi rejected its arguments ('Invlaid arguments'). This module passes only "
        "'-mig 1' or '-mig 0'; check that hy_smi_path names the vendor's hy-smi and that its "
        "version supports -mig.",
    ),
)


@dataclass
class Plan:
    previous: str
    wanted: str
    source: ModeSource
    argv: list[str] = field(default_factory=list)
    refusal: str | None = None

    @property
    def change(self) -> bool:
        return self.previous != self.wanted


def instance_blockers(node: Node) -> list[str]:
    """Instances that block a disable, named; from the registry if the library cannot list."""
    try:
        return [describe_instance(i) for i in node.instances()]
    except HydmiError:
        registry = node.registry()
        named = [conf.path for conf in registry.conf_files]
        named += registry.gpu_instance_files
        return named


def slice_blockers(host_root: str) -> list[str]:
    """The live logical slices, described. VdevError when that cannot be known: the library
    cannot list them while their driver's conf files say some may live."""
    vdevs = Vdevs(host_root)
    try:
        return [describe_vdev(vdev) for vdev in vdevs.read().vdevs]
    except DmiUnusable as exc:
        # No slice lives without the conf file the driver writes for it: a node without the
        # slicing library (or without slices) has none of those files.
        confs = vdevs.conf_paths()
        if not confs:
            return []
        raise VdevError(
            f"the vendor library cannot list logical slices ({exc}) while "
            f"{', '.join(confs)} say some may live"
        ) from exc
    except DmiError as exc:
        raise VdevError(f"the vendor library cannot list logical slices: {exc}") from exc


def make_plan(module: AnsibleModule, node: Node) -> Plan:
    """The decision, shared by check mode and the real run."""
    params = module.params
    mode = node.mode()
    plan = Plan(
        previous=mode_name(mode.current) or "unknown",
        wanted=params["state"],
        source=mode.source,
    )
    if not plan.change:
        return plan
    kfd = host_path(params["host_root"], KFD)
    scan = scan_holders(kfd)
    holders = scan.holders
    if holders:
        names = "; ".join(holder.describe() for holder in holders)
        plan.refusal = (
            f"{len(holders)} process(es) hold {kfd}, so the vendor switch would be refused: "
            f"{names}. Stop them (park the device plugin on this node; "
            "hygon.dcu.kfd_holders_info with wait_timeout waits for them) and run again."
        )
        return plan
    if not scan.complete:
        plan.refusal = (
            f"whether anything holds {kfd} is unknown, so the switch was not tried: "
            f"{explain_gaps(scan.gaps)}."
        )
        return plan
    if plan.wanted == "disabled":
        blockers = instance_blockers(node)
        if blockers:
            plan.refusal = (
                f"cannot disable: {len(blockers)} instance(s) still exist: "
                f"{'; '.join(blockers)}. Remove them with hygon.dcu.mig_instances "
                "(state: absent) and run again."
            )
            return plan
    if plan.wanted == "enabled":
        try:
            slices = slice_blockers(params["host_root"])
        except VdevError as exc:
            plan.refusal = f"cannot enable: {exc}. Nothing was switched."
            return plan
        if slices:
            plan.refusal = (
                f"cannot enable: {len(slices)} logical slice(s) still exist: "
                f"{'; '.join(slices)}. Remove them with hygon.dcu.logical_slices "
                "(state: absent) and run again."
            )
            return plan
    hy_smi, refusal = find_hy_smi(params["hy_smi_path"], module.get_bin_path)
    if refusal or hy_smi is None:
        plan.refusal = refusal
        return plan
    plan.argv = [hy_smi, "-mig", "1" if plan.wanted == "enabled" else "0"]
    return plan


def vendor_error(output: str, rc: int) -> str | None:
    """The actionable error for hy-smi's output, or None when it reports success."""
    for pattern, error in VENDOR_MESSAGES:
        if pattern.search(output):
            return error
    if rc == 0:
        return None
    return f"hy-smi exited with {rc} and printed something this module does not know: {output!r}"


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "state": {"type": "str", "required": True, "choices": ["enabled", "disabled"]},
            **host_root_spec(),
            **library_spec(),
            **hy_smi_spec(),
        },
        supports_check_mode=True,
    )
    node = Node(module.params["host_root"], module.params["library_path"])
    plan = make_plan(module, node)
    result: dict[str, Any] = {
        "changed": plan.change,
        "previous_mode": plan.previous,
        "mode": plan.wanted,
        "mode_source": plan.source.value,
        "diff": {"before": {"mode": plan.previous}, "after": {"mode": plan.wanted}},
    }
    if plan.refusal:
        result.update(changed=False, mode=plan.previous)
        module.fail_json(msg=plan.refusal, **result)
    if not plan.change or module.check_mode:
        module.exit_json(**result)

    rc, out, err = module.run_command(plan.argv)
    output = "\n".join(part.strip() for part in (out, err) if part.strip())
    result["vendor_output"] = output
    error = vendor_error(output, rc)
    after = node.mode()
    result["mode"] = mode_name(after.current) or "unknown"
    result["mode_source"] = after.source.value
    result["changed"] = result["mode"] != plan.previous
    result["diff"]["after"] = {"mode": result["mode"]}
    if error:
        module.fail_json(msg=error, **result)
    if result["mode"] != plan.wanted:
        module.fail_json(
            msg=(
                f"hy-smi reported success ({output!r}) but the mode still reads "
                f"{result['mode']} (pending: {mode_name(after.pending)}). Check the driver "
                "(dmesg) and run again; a reboot may be needed."
            ),
            **result,
        )
    if plan.wanted == "enabled" and not any_profiles(node):
        module.warn(
            "the mode is on but no card reports any profile: the driver was probably installed "
            "without virtualization support, so no partition can be created. Reinstall the "
            "driver with virtualization support."
        )
    module.exit_json(**result)


def any_profiles(node: Node) -> bool:
    try:
        return any(card.profiles for card in node.cards())
    except HydmiError:
        return True  # unknown: the mode read above already came from wherever it could


if __name__ == "__main__":
    main()
