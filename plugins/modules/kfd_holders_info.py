#!/usr/bin/python
# Copyright: hygon.dcu contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# Apache-2.0 code may be combined into works under the GNU General Public License version 3,
# the license of ansible-core, which runs this module.

from __future__ import annotations

DOCUMENTATION = r"""
---
module: kfd_holders_info
short_description: List the processes that hold a Hygon DCU device file open
version_added: "0.1.0"
description:
  - Lists every process with an open file descriptor on O(device) (by default C(/dev/kfd)),
    with its command line, how many descriptors it holds and, where its cgroup shows one, the
    Kubernetes pod UID and container id.
  - The vendor's mode switch (C(hy-smi -mig)) is refused while anything holds C(/dev/kfd) and
    its message names nobody; this module names them.
  - Reads C(/proc/*/fd) directly in one pass, without starting a process per pid. Processes
    that exit during the scan and descriptors that cannot be read are skipped.
  - Holders of C(/dev/mkfd) (the vendor daemon C(hymgr) holds it permanently) are not holders
    of C(/dev/kfd) and never listed for it.
author:
  - hygon.dcu maintainers (!UNKNOWN)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - hygon.dcu.node
options:
  device:
    description:
      - Device file to look for, as a path on the node (before O(host_root) is applied).
    type: path
    default: /dev/kfd
  wait_timeout:
    description:
      - Seconds to wait for the list to become empty. C(0) reports once without waiting.
      - When holders remain after the timeout the module fails and names them.
    type: int
    default: 0
  exclude_pids:
    description:
      - Process ids never reported (for example the caller's own helper processes).
    type: list
    elements: int
    default: []
attributes:
  platform:
    platforms: posix
  check_mode:
    support: full
  diff_mode:
    support: none
notes:
  - Read-only; never changes the node.
  - Run as root to see the descriptors of every process.
"""

EXAMPLES = r"""
- name: Who holds /dev/kfd?
  hygon.dcu.kfd_holders_info:
  register: kfd

- name: Wait up to five minutes for every holder to go (fails naming the rest)
  hygon.dcu.kfd_holders_info:
    wait_timeout: 300

- name: Holders of a card's render node
  hygon.dcu.kfd_holders_info:
    device: /dev/dri/renderD128
"""

RETURN = r"""
holders:
  description: Processes holding O(device), sorted by pid.
  returned: always
  type: list
  elements: dict
  contains:
    pid:
      description: Process id.
      type: int
    command:
      description: Command line, arguments separated by spaces.
      type: str
    fd_count:
      description: Number of descriptors the process has open on the device.
      type: int
    pod_uid:
      description: Kubernetes pod UID from the process's cgroup, or null.
      type: str
    container_id:
      description: Container id (64 hex characters) from the process's cgroup, or null.
      type: str
  sample:
    - {"pid": 4242, "command": "python3 -m hygon_dcu_plugin", "fd_count": 1,
       "pod_uid": "6f1d2c3b-4a5e-4f60-8a9b-0c1d2e3f4a5b", "container_id": "0123...cdef"}
device:
  description: The path that was scanned for (O(device) under O(host_root)).
  returned: always
  type: str
  sample: /dev/kfd
unreadable_pids:
  description: Processes whose open files could not be read (the module was not run as
    root); any of them may be a holder.
  returned: always
  type: list
  elements: int
  sample: []
waited:
  description: Seconds spent waiting for holders to go.
  returned: always
  type: float
"""

import time

from ansible.module_utils.basic import AnsibleModule

from ..module_utils.common_options import host_root_spec
from ..module_utils.facts import holder_facts
from ..module_utils.holders import Holder, HolderScan, scan_holders
from ..module_utils.hostpath import host_path

POLL_SECONDS = 1.0


def describe(holders: list[Holder]) -> str:
    return "; ".join(holder.describe() for holder in holders)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "device": {"type": "path", "default": "/dev/kfd"},
            **host_root_spec(),
            "wait_timeout": {"type": "int", "default": 0},
            "exclude_pids": {"type": "list", "elements": "int", "default": []},
        },
        supports_check_mode=True,
    )
    params = module.params
    if params["wait_timeout"] < 0:
        module.fail_json(msg="wait_timeout must be 0 (no wait) or a number of seconds")
    if not params["device"].startswith("/"):
        module.fail_json(msg=f"device must be an absolute path, got {params['device']!r}")
    device = host_path(params["host_root"], params["device"])
    started = time.monotonic()
    deadline = started + params["wait_timeout"]
    scan: HolderScan = scan_holders(device, exclude_pids=params["exclude_pids"])
    while scan.holders and time.monotonic() < deadline:
        time.sleep(min(POLL_SECONDS, max(deadline - time.monotonic(), 0)))
        scan = scan_holders(device, exclude_pids=params["exclude_pids"])
    holders = scan.holders
    result = {
        "changed": False,
        "device": device,
        "holders": [holder_facts(h) for h in holders],
        "unreadable_pids": scan.unreadable_pids,
        "waited": round(time.monotonic() - started, 3),
    }
    if scan.unreadable_pids:
        module.warn(
            f"the open files of {len(scan.unreadable_pids)} process(es) could not be read, so "
            "holders may be missing from the list; run the module as root (become: true)"
        )
    if holders and params["wait_timeout"] > 0:
        module.fail_json(
            msg=(
                f"{len(holders)} process(es) still hold {device} after "
                f"{params['wait_timeout']} s: {describe(holders)}. Stop them (for the device "
                "plugin: park it on this node) and run again."
            ),
            **result,
        )
    module.exit_json(**result)


if __name__ == "__main__":
    main()
