#!/usr/bin/python
# Copyright: hygon.dcu contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# Apache-2.0 code may be combined into works under the GNU General Public License version 3,
# the license of ansible-core, which runs this module.

from __future__ import annotations

DOCUMENTATION = r"""
---
module: mig_instances
short_description: Remove the partition instances of a Hygon DCU node
version_added: "0.1.0"
description:
  - With O(state=absent), destroys the live instances on every card or on the cards listed in
    O(cards), in the only order the driver accepts, every compute instance of a GPU instance and
    then the GPU instance itself.
  - An instance a process is using is never forced. It is retried until O(wait_timeout) runs
    out, then reported by card, profile, placement and uuid, and the module fails.
  - Removes poison directories from the driver's registry (C(/etc/dmi_mig_config/ci/)). A
    directory left on a conf file name makes every later create of that id fail. Only empty
    directories are removed (C(rmdir)); a non-empty one is reported and left alone.
  - A GPU instance left without its compute instance (an interrupted create) is removed too.
  - With O(sweep_only=true), only the poison directories are removed and every instance is left
    alone (after a reboot, when the device plugin may already have carved instances for pods).
author:
  - hygon.dcu maintainers (!UNKNOWN)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - hygon.dcu.node
  - hygon.dcu.node.retry
  - hygon.dcu.node.library
options:
  state:
    description:
      - C(absent) removes instances. (Creating a layout is not supported yet.)
    type: str
    default: absent
    choices: [absent]
  sweep_only:
    description:
      - Remove only the poison directories (of the cards in O(cards), all when omitted) and
        leave every instance alone. Without O(cards) the management library is not used.
    type: bool
    default: false
  cards:
    description:
      - Cards to act on, each a library index written with the ASCII digits C(0-9) (C(0)) or a
        PCI address (C(0000:09:00.0)). All cards when omitted. Poison directories are swept for
        the same cards.
    type: list
    elements: str
attributes:
  platform:
    platforms: posix
  check_mode:
    support: full
    details: Check mode lists what would be destroyed and swept; it cannot know whether an
      instance would be in use at that moment.
  diff_mode:
    support: full
notes:
  - Stop the workloads first; the device plugin reclaims instances of deleted pods by itself.
"""

EXAMPLES = r"""
- name: Remove every instance on the node
  hygon.dcu.mig_instances:
    state: absent

- name: Remove the instances of two cards, waiting up to two minutes for their users
  hygon.dcu.mig_instances:
    state: absent
    cards: ["0", "0000:0c:00.0"]
    wait_timeout: 120

- name: Remove the poison directories only, keeping every instance
  hygon.dcu.mig_instances:
    state: absent
    sweep_only: true
"""

RETURN = r"""
destroyed:
  description: Instances destroyed (in check mode, the instances that would be destroyed).
  returned: always
  type: list
  elements: dict
  sample:
    - {"card": 0, "pci": "0000:09:00.0", "gpu_instance_id": 3, "compute_instance_id": 0,
       "profile": "2g.15gb", "profile_id": 3, "placement": "0:1",
       "uuid": "3b2a1c9e-7f00-4c1d-9a55-0123456789ab",
       "conf_path": "/etc/dmi_mig_config/ci/dev0gi3ci0.conf"}
swept:
  description: Poison directories removed from C(ci/) (in check mode, those that would be).
  returned: always
  type: list
  elements: str
  sample: ["/etc/dmi_mig_config/ci/dev0gi4ci0.conf"]
remaining:
  description: Instances still there (in use when the timeout ran out), with C(reason) and the
    pids holding their conf files where any were found.
  returned: always
  type: list
  elements: dict
poison_left:
  description: Directories in C(ci/) that could not be removed (not empty).
  returned: always
  type: list
  elements: dict
"""

from dataclasses import dataclass, field
from typing import Any

from ansible.module_utils.basic import AnsibleModule

from ..module_utils.busy_retry import retry_busy
from ..module_utils.common_options import (
    host_root_spec,
    is_ascii_number,
    library_spec,
    retry_options,
    retry_spec,
)
from ..module_utils.facts import describe_instance, finding_facts, instance_facts
from ..module_utils.holders import find_holders
from ..module_utils.hydmi import HydmiError, InstanceInUse
from ..module_utils.node import Instance, InstanceNotFound, Node, UuidMismatch
from ..module_utils.registry import Finding


@dataclass
class Plan:
    cards: list[int]
    gpu_instances: list[list[Instance]]  # per GPU instance, its entries from Node.instances()
    sweep: list[str]
    poison_left: list[Finding]
    card_filter: bool

    @property
    def change(self) -> bool:
        return bool(self.gpu_instances or self.sweep)


@dataclass
class Outcome:
    destroyed: list[Instance] = field(default_factory=list)
    remaining: list[dict[str, Any]] = field(default_factory=list)


def resolve_cards(node: Node, wanted: list[str] | None) -> list[int]:
    count = node.card_count()
    if not wanted:
        return list(range(count))
    by_pci = {pci: index for index, pci in node.registry().cards.items()}
    chosen: list[int] = []
    for item in wanted:
        text = str(item).strip().lower()
        if is_ascii_number(text) and int(text) < count:
            index = int(text)
        elif text in by_pci:
            index = by_pci[text]
        else:
            known = ", ".join(f"{i} ({p})" for p, i in sorted(by_pci.items(), key=lambda x: x[1]))
            raise ValueError(
                f"card {item!r} is neither a card index below {count} nor a PCI address in the "
                f"registry (known: {known or 'none; the registry exists only with the mode on'})"
            )
        if index not in chosen:
            chosen.append(index)
    return chosen


def make_plan(node: Node, wanted_cards: list[str] | None, sweep_only: bool = False) -> Plan:
    """The decision, shared by check mode and the real run."""
    # A sweep of every card reads only the registry: no library call that could fail.
    cards = resolve_cards(node, wanted_cards) if wanted_cards or not sweep_only else []
    grouped: dict[tuple[int, int], list[Instance]] = {}
    for card in [] if sweep_only else cards:
        for instance in node.instances(card):
            grouped.setdefault((instance.card_index, instance.gpu_instance_id), []).append(instance)
    preview = node.sweep_poison(dry_run=True, cards=cards if wanted_cards else None)
    return Plan(cards, list(grouped.values()), preview.swept, preview.kept, bool(wanted_cards))


def _expected_uuid(entries: list[Instance]) -> str | None:
    uuids = {entry.uuid for entry in entries if entry.uuid}
    return uuids.pop() if len(uuids) == 1 else None


def _holders_of(entries: list[Instance]) -> list[str]:
    """Processes with the instances' conf files open: a hint at who uses them (a workload can
    also use an instance without keeping its conf file open, so an empty list proves nothing)."""
    described: list[str] = []
    for entry in entries:
        if entry.conf_host_path:
            described.extend(h.describe() for h in find_holders(entry.conf_host_path))
    return described


def apply(node: Node, plan: Plan, wait_timeout: int, retry_interval: float) -> Outcome:
    outcome = Outcome()

    def destroy(entries: list[Instance]) -> str | None:
        first = entries[0]
        try:
            node.destroy(
                first.card_index, first.gpu_instance_id, expected_uuid=_expected_uuid(entries)
            )
        except InstanceInUse as exc:
            return str(exc)
        except (InstanceNotFound, UuidMismatch):
            return None  # gone or replaced since the plan: not ours to destroy any more
        outcome.destroyed.extend(entries)
        return None

    for entries, reason in retry_busy(plan.gpu_instances, destroy, wait_timeout, retry_interval):
        for entry in entries:
            facts = instance_facts(entry)
            facts["reason"] = reason
            facts["holders"] = _holders_of([entry])
            outcome.remaining.append(facts)
    return outcome


def _diff(plan: Plan, remaining: list[dict[str, Any]]) -> dict[str, Any]:
    before = [describe_instance(i) for entries in plan.gpu_instances for i in entries]
    before += [f"poison {path}" for path in plan.sweep]
    kept = {(r["card"], r["gpu_instance_id"]) for r in remaining}
    after = [
        describe_instance(i)
        for entries in plan.gpu_instances
        for i in entries
        if (i.card_index, i.gpu_instance_id) in kept
    ]
    return {"before": "\n".join(before) + "\n", "after": "\n".join(after) + "\n"}


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "state": {"type": "str", "default": "absent", "choices": ["absent"]},
            "sweep_only": {"type": "bool", "default": False},
            "cards": {"type": "list", "elements": "str"},
            **retry_spec(),
            **host_root_spec(),
            **library_spec(),
        },
        supports_check_mode=True,
    )
    params = module.params
    try:
        wait_timeout, retry_interval = retry_options(params)
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    node = Node(params["host_root"], params["library_path"])
    try:
        plan = make_plan(node, params["cards"], params["sweep_only"])
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    except HydmiError as exc:
        module.fail_json(
            msg=(
                f"cannot list the node's instances: {exc}. Check that the driver is loaded and "
                "the management library is found (library_path), then run again."
            ),
            error_code=exc.code,
        )
    result: dict[str, Any] = {
        "changed": plan.change,
        "destroyed": [instance_facts(i) for entries in plan.gpu_instances for i in entries],
        "swept": plan.sweep,
        "remaining": [],
        "poison_left": [finding_facts(f) for f in plan.poison_left],
    }
    if module.check_mode:
        result["diff"] = _diff(plan, [])
        module.exit_json(**result)
    try:
        outcome = apply(node, plan, wait_timeout, retry_interval)
    except HydmiError as exc:
        module.fail_json(
            msg=f"destroying instances failed: {exc}. Nothing was forced; run again.",
            **result,
        )
    swept = node.sweep_poison(cards=plan.cards if plan.card_filter else None)
    result.update(
        changed=bool(outcome.destroyed or swept.swept),
        destroyed=[instance_facts(i) for i in outcome.destroyed],
        swept=list(swept.swept),
        remaining=outcome.remaining,
        poison_left=[finding_facts(f) for f in swept.kept],
        diff=_diff(plan, outcome.remaining),
    )
    for finding in swept.kept:
        module.warn(f"{finding.path} is a directory that is not empty; remove it by hand")
    if outcome.remaining:
        names = "; ".join(
            describe_instance(entry)
            for entries in plan.gpu_instances
            for entry in entries
            if (entry.card_index, entry.gpu_instance_id)
            in {(r["card"], r["gpu_instance_id"]) for r in outcome.remaining}
        )
        module.fail_json(
            msg=(
                f"{len(outcome.remaining)} instance(s) are still in use after "
                f"{wait_timeout} s and were left alone: {names}. Stop the workloads "
                "using them (see remaining[].holders) and run again."
            ),
            **result,
        )
    module.exit_json(**result)


if __name__ == "__main__":
    main()
