# Copyright: hygon.dcu contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# Apache-2.0 code may be combined into works under the GNU General Public License version 3,
# the license of ansible-core, which loads this filter.

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

DOCUMENTATION = r"""
---
name: describe_scan_gaps
short_description: Say what a scan of the DCU device holders could not see, and the fix for each
version_added: "0.1.0"
description:
  - 'Turns the RV(hygon.dcu.kfd_holders_info#module:gaps) of M(hygon.dcu.kfd_holders_info) into
    one phrase, C(detail: fix; detail: fix), taking each gap''s fix from O(fixes) by the gap''s
    C(kind).'
  - A kind that O(fixes) has no entry for points to C(docs/troubleshooting.md).
author:
  - hygon.dcu maintainers (!UNKNOWN)
positional: _input, fixes
options:
  _input:
    description: The gaps, as M(hygon.dcu.kfd_holders_info) returns them.
    type: list
    elements: dict
    required: true
  fixes:
    description: What the operator should do about a gap, by its C(kind).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Require a scan that can see every holder of /dev/kfd
  ansible.builtin.assert:
    that: scan.complete is sameas true
    fail_msg: >-
      Who holds /dev/kfd cannot be known: {{ scan.gaps | hygon.dcu.describe_scan_gaps(fixes) }}.
  vars:
    fixes:
      no_process_list: run the node steps on the node itself, with procfs mounted on /proc
"""

RETURN = r"""
_value:
  description: The gaps with their fixes, separated by C(; ), in the order of the input.
  type: str
"""

# For a gap the caller has no advice for: the troubleshooting guide covers every kind.
UNKNOWN_KIND_FIX = "see docs/troubleshooting.md"


def describe_scan_gaps(gaps: Iterable[Mapping[str, Any]], fixes: Mapping[str, Any]) -> str:
    """``detail: fix`` for each gap, joined by ``; ``."""
    return "; ".join(f"{gap['detail']}: {fixes.get(gap['kind'], UNKNOWN_KIND_FIX)}" for gap in gaps)


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"describe_scan_gaps": describe_scan_gaps}
