# Copyright: hygon.dcu contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# Apache-2.0 code may be combined into works under the GNU General Public License version 3,
# the license of ansible-core, which loads this filter.

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

DOCUMENTATION = r"""
---
name: describe_poison_directories
short_description: Name the poison directories of a partition registry, with why each matters
version_added: "0.1.0"
description:
  - Turns a list of registry findings (such as the RV(hygon.dcu.mig_instances#module:poison_left)
    of M(hygon.dcu.mig_instances) or the C(poison) of M(hygon.dcu.mig_info)) into one phrase,
    C(path (detail); path (detail)), for a message.
author:
  - hygon.dcu maintainers (!UNKNOWN)
options:
  _input:
    description: The findings, each with C(path) and C(detail).
    type: list
    elements: dict
    required: true
"""

EXAMPLES = r"""
- name: Refuse poison directories that could not be removed
  ansible.builtin.fail:
    msg: "Remove by hand: {{ swept.poison_left | hygon.dcu.describe_poison_directories }}."
  when: swept.poison_left | length > 0
"""

RETURN = r"""
_value:
  description: The directories with their details, separated by C(; ), in the order of the input.
  type: str
"""


def describe_poison_directories(findings: Iterable[Mapping[str, Any]]) -> str:
    """``path (detail)`` for each finding, joined by ``; ``."""
    return "; ".join(f"{finding['path']} ({finding['detail']})" for finding in findings)


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"describe_poison_directories": describe_poison_directories}
