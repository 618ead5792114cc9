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
    that exit during the scan are skipped.
  - A descriptor matches when it names O(device), is the same file seen through another mount
    namespace, or (for a character device) is open on a character device with the same device
    number, such as a copy of the node made with C(mknod) elsewhere.
  - What the scan could not check is returned, not skipped. RV(complete) is then false and
    RV(gaps) says why (descriptors it was not allowed to read, no usable C(/proc), no
    O(device) under O(host_root)). An empty RV(holders) from an incomplete scan does not mean
    the device is free.
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
      - Seconds to wait for the list to become empty, a whole number from C(0) to C(86400)
        written with the ASCII digits C(0-9). C(0) reports once without waiting.
      - When holders remain after the timeout the module fails and names them. It also fails
        when the last scan was incomplete (RV(complete) false).
    type: raw
    default: 0
  exclude_pids:
    description:
      - Process ids never reported (for example the caller's own helper processes), each a
        whole number written with the ASCII digits C(0-9).
    type: list
    elements: raw
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
  - Run as root to see the descriptors of every process; otherwise RV(complete) is false.
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
complete:
  description: True when every process was seen and compared with an existing O(device); false
    when RV(gaps) lists what could not be checked.
  returned: always
  type: bool
  sample: true
gaps:
  description: What the scan could not check, so that a holder may be missing from RV(holders).
  returned: always
  type: list
  elements: dict
  contains:
    kind:
      description: C(no_device) (O(device) does not exist under O(host_root)),
        C(no_process_list) (C(/proc) cannot be listed, is not this node's, or hides other
        users' processes) or C(unreadable_processes) (open files of some processes could not
        be read, see RV(unreadable_pids)).
      type: str
    detail:
      description: What was seen, as a sentence.
      type: str
  sample:
    - {"kind": "no_device", "detail": "/srv/node/dev/kfd does not exist, so no open file can be
       matched to it"}
waited:
  description: Seconds spent waiting for holders to go.
  returned: always
  type: float
"""

import time

from ansible.module_utils.basic import AnsibleModule

from ..module_utils.common_options import MAX_PID, host_root_spec, whole_number
from ..module_utils.facts import gap_facts, holder_facts
from ..module_utils.holders import Holder, HolderScan, explain_gaps, scan_holders
from ..module_utils.hostpath import host_path

POLL_SECONDS = 1.0


def describe(holders: list[Holder]) -> str:
    return "; ".join(holder.describe() for holder in holders)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "device": {"type": "path", "default": "/dev/kfd"},
            **host_root_spec(),
            "wait_timeout": {"type": "raw", "default": 0},
            "exclude_pids": {"type": "list", "elements": "raw", "default": []},
        },
        supports_check_mode=True,
    )
    params = module.params
    try:
        wait_timeout = whole_number(params["wait_timeout"], "wait_timeout")
        exclude_pids = [
            whole_number(pid, "exclude_pids", MAX_PID) for pid in params["exclude_pids"]
        ]
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    if not params["device"].startswith("/"):
        module.fail_json(msg=f"device must be an absolute path, got {params['device']!r}")
    device = host_path(params["host_root"], params["device"])
    started = time.monotonic()
    deadline = started + wait_timeout
    scan: HolderScan = scan_holders(device, exclude_pids=exclude_pids)
    while scan.holders and time.monotonic() < deadline:
        time.sleep(min(POLL_SECONDS, max(deadline - time.monotonic(), 0)))
        scan = scan_holders(device, exclude_pids=exclude_pids)
    holders = scan.holders
    result = {
        "changed": False,
        "device": device,
        "holders": [holder_facts(h) for h in holders],
        "unreadable_pids": scan.unreadable_pids,
        "complete": scan.complete,
        "gaps": [gap_facts(gap) for gap in scan.gaps],
        "waited": round(time.monotonic() - started, 3),
    }
    if holders and wait_timeout > 0:
        module.fail_json(
            msg=(
                f"{len(holders)} process(es) still hold {device} after {wait_timeout} s: "
                f"{describe(holders)}. Stop them (for the device plugin: park it on this node) "
                "and run again."
            ),
            **result,
        )
    if not scan.complete and wait_timeout > 0:
        # Waiting for an empty list means nothing when the list cannot be trusted.
        module.fail_json(
            msg=f"cannot tell whether anything holds {device}: {explain_gaps(scan.gaps)}.",
            **result,
        )
    module.exit_json(**result)


if __name__ == "__main__":
    main()
