# Copyright: hygon.dcu contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# Apache-2.0 code may be combined into works under the GNU General Public License version 3,
# the license of ansible-core, which loads this filter.

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ansible_collections.hygon.dcu.plugins.module_utils.holders import Holder

DOCUMENTATION = r"""
---
name: describe_kfd_holders
short_description: Name the processes that hold a DCU device file, for a message
version_added: "0.1.0"
description:
  - Turns the RV(hygon.dcu.kfd_holders_info#module:holders) of M(hygon.dcu.kfd_holders_info)
    into one phrase, C(pid 12 (python3 train.py) in pod 5f0c...; pid 40 (hy-smi)), for a
    message that asks the operator to stop them.
  - Each holder is described exactly as M(hygon.dcu.kfd_holders_info) describes it in its own
    failure message; a command line longer than 160 characters is cut, and the pod appears only
    when the holder's cgroup showed one.
author:
  - hygon.dcu maintainers (!UNKNOWN)
options:
  _input:
    description: The holders, as M(hygon.dcu.kfd_holders_info) returns them.
    type: list
    elements: dict
    required: true
"""

EXAMPLES = r"""
- name: Refuse while /dev/kfd is held
  ansible.builtin.fail:
    msg: "Still holding /dev/kfd: {{ holders.holders | hygon.dcu.describe_kfd_holders }}."
  when: holders.holders | length > 0
"""

RETURN = r"""
_value:
  description: The holders, separated by C(; ), in the order of the input; empty for none.
  type: str
"""


def describe_kfd_holders(holders: Iterable[Mapping[str, Any]]) -> str:
    """Each holder as the node layer describes it, joined by ``; ``."""
    return "; ".join(
        Holder(
            pid=holder["pid"],
            command=holder["command"],
            fd_count=holder.get("fd_count", 0),
            pod_uid=holder.get("pod_uid"),
            container_id=holder.get("container_id"),
        ).describe()
        for holder in holders
    )


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"describe_kfd_holders": describe_kfd_holders}
