#!/usr/bin/python
# Copyright: hygon.dcu contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# Apache-2.0 code may be combined into works under the GNU General Public License version 3,
# the license of ansible-core, which runs this module.

from __future__ import annotations

DOCUMENTATION = r"""
---
module: logical_slices
short_description: Remove the logical slices (virtual devices) of a Hygon DCU node
version_added: "0.1.0"
description:
  - With O(state=absent), destroys the live logical slices (the vendor's virtual devices,
    "vdevs") on every card or on the cards listed in O(cards), one at a time through the
    vendor's library C(libhydmi.so).
  - A slice a process is using is never forced. It is retried until O(wait_timeout) runs out,
    then reported with the processes that hold its conf file, and the module fails.
  - Fails before destroying anything when the library cannot list the slices, or when its
    answers disagree with each other.
  - Conf files under C(/etc/vdev) that belong to no live slice are reported in RV(stray_confs)
    and left alone (a create in progress writes its conf file first).
author:
  - hygon.dcu maintainers (!UNKNOWN)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - hygon.dcu.node
  - hygon.dcu.node.retry
options:
  state:
    description:
      - C(absent) removes slices. (The device plugin creates them, one per container.)
    type: str
    default: absent
    choices: [absent]
  cards:
    description:
      - Card indexes to act on, each written with the ASCII digits C(0-9). All cards when
        omitted.
    type: list
    elements: str
attributes:
  platform:
    platforms: posix
  check_mode:
    support: full
    details: Check mode lists what would be destroyed; it cannot know whether a slice would be
      in use at that moment.
  diff_mode:
    support: full
notes:
  - Stop the workloads first; the partition mode cannot be switched on while any slice lives.
"""

EXAMPLES = r"""
- name: Remove every logical slice on the node
  hygon.dcu.logical_slices:
    state: absent

- name: Remove the slices of card 1, waiting up to a minute for their users
  hygon.dcu.logical_slices:
    state: absent
    cards: ["1"]
    wait_timeout: 60
"""

RETURN = r"""
destroyed:
  description: Slices destroyed (in check mode, the slices that would be destroyed).
  returned: always
  type: list
  elements: dict
  sample:
    - {"id": 0, "card": 0, "compute_units": 20, "memory_mib": 16384,
       "conf_path": "/etc/vdev/vdev0.conf", "conf_problem": null}
remaining:
  description: Slices still there (in use when the timeout ran out), with C(reason) and the
    processes holding their conf files where any were found.
  returned: always
  type: list
  elements: dict
stray_confs:
  description: Conf files under C(/etc/vdev) of no live slice, left alone.
  returned: always
  type: list
  elements: str
  sample: ["/etc/vdev/vdev3.conf"]
"""

from dataclasses import dataclass, field
from typing import Any

from ansible.module_utils.basic import AnsibleModule

from ..module_utils.busy_retry import retry_busy
from ..module_utils.common_options import (
    host_root_spec,
    is_ascii_number,
    retry_options,
    retry_spec,
)
from ..module_utils.dmi import DmiError, VdevBusy, VdevGone
from ..module_utils.facts import describe_vdev, vdev_facts
from ..module_utils.holders import find_holders
from ..module_utils.hostpath import host_path
from ..module_utils.vdevs import Vdev, VdevError, VdevReading, Vdevs


@dataclass
class Outcome:
    destroyed: list[Vdev] = field(default_factory=list)
    remaining: list[dict[str, Any]] = field(default_factory=list)


def chosen(reading: VdevReading, cards: list[str] | None) -> list[Vdev]:
    """The live slices of ``cards`` (all when None); ValueError for a card that is no index."""
    if not cards:
        return list(reading.vdevs)
    wanted: set[int] = set()
    for item in cards:
        text = str(item).strip()
        if not is_ascii_number(text):
            raise ValueError(f"card {item!r} is not a card index (ASCII digits 0-9)")
        wanted.add(int(text))
    return [vdev for vdev in reading.vdevs if vdev.card in wanted]


def apply(
    vdevs: Vdevs, planned: list[Vdev], host_root: str, wait_timeout: int, retry_interval: float
) -> Outcome:
    outcome = Outcome()

    def destroy(vdev: Vdev) -> str | None:
        try:
            vdevs.destroy(vdev.id)
        except VdevBusy as exc:
            return str(exc)
        except VdevGone:
            return None  # gone since the plan: nothing of ours to destroy
        outcome.destroyed.append(vdev)
        return None

    for vdev, reason in retry_busy(planned, destroy, wait_timeout, retry_interval):
        facts = vdev_facts(vdev)
        facts["reason"] = reason
        facts["holders"] = [
            holder.describe() for holder in find_holders(host_path(host_root, vdev.conf_path))
        ]
        outcome.remaining.append(facts)
    return outcome


def _diff(planned: list[Vdev], left: list[Vdev]) -> dict[str, str]:
    return {
        "before": "".join(describe_vdev(vdev) + "\n" for vdev in planned),
        "after": "".join(describe_vdev(vdev) + "\n" for vdev in left),
    }


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "state": {"type": "str", "default": "absent", "choices": ["absent"]},
            "cards": {"type": "list", "elements": "str"},
            **retry_spec(),
            **host_root_spec(),
        },
        supports_check_mode=True,
    )
    params = module.params
    try:
        wait_timeout, retry_interval = retry_options(params)
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    vdevs = Vdevs(params["host_root"])
    try:
        reading = vdevs.read()
        planned = chosen(reading, params["cards"])
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    except (DmiError, VdevError) as exc:
        module.fail_json(
            msg=(
                f"cannot list the node's logical slices: {exc}. Nothing was destroyed. Check "
                "that the driver is loaded and the vendor's libhydmi.so is found, then run again."
            )
        )
    result: dict[str, Any] = {
        "changed": bool(planned),
        "destroyed": [vdev_facts(vdev) for vdev in planned],
        "remaining": [],
        "stray_confs": reading.stray_confs,
    }
    if module.check_mode:
        result["diff"] = _diff(planned, [])
        module.exit_json(**result)
    try:
        outcome = apply(vdevs, planned, params["host_root"], wait_timeout, retry_interval)
    except DmiError as exc:
        module.fail_json(
            msg=f"destroying logical slices failed: {exc}. Nothing was forced; run again.",
            **result,
        )
    left_ids = {entry["id"] for entry in outcome.remaining}
    result.update(
        changed=bool(outcome.destroyed),
        destroyed=[vdev_facts(vdev) for vdev in outcome.destroyed],
        remaining=outcome.remaining,
        diff=_diff(planned, [vdev for vdev in planned if vdev.id in left_ids]),
    )
    if outcome.remaining:
        names = "; ".join(describe_vdev(vdev) for vdev in planned if vdev.id in left_ids)
        module.fail_json(
            msg=(
                f"{len(outcome.remaining)} logical slice(s) are still in use after "
                f"{wait_timeout} s and were left alone: {names}. Stop the workloads using them "
                "(see remaining[].holders) and run again."
            ),
            **result,
        )
    module.exit_json(**result)


if __name__ == "__main__":
    main()
