# Copyright: hygon.dcu contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# Apache-2.0 code may be combined into works under the GNU General Public License version 3,
# the license of ansible-core, which reads these fragments.

from __future__ import annotations


class ModuleDocFragment:
    """The node modules' shared options, documented once; their argument_spec entries come from
    plugins/module_utils/common_options.py (validate-modules checks that the two agree)."""

    # hygon.dcu.node
    DOCUMENTATION = r"""
options:
  host_root:
    description:
      - Directory under which the node's host paths (C(/dev/kfd), C(/etc/dmi_mig_config),
        C(/opt/hyhal/lib)) are found. C(/) on a real node; a simulated node's root in tests.
    type: path
    default: /
"""

    # hygon.dcu.node.library
    LIBRARY = r"""
options:
  library_path:
    description:
      - Explicit path of C(libhydmi_mig.so.1). When unset, the loader's search path is tried
        for C(libhydmi_mig.so.1) and C(libhydmi_mig.so), then C(/opt/hyhal/lib/) and
        C(/opt/dtk/lib/) under O(host_root).
    type: path
"""

    # hygon.dcu.node.hy_smi
    HY_SMI = r"""
options:
  hy_smi_path:
    description:
      - Path of the vendor's C(hy-smi). By default C(hy-smi) is looked up on C(PATH) (the
        task's environment, plus the C(sbin) directories); so is a value without a C(/).
    type: path
"""

    # hygon.dcu.node.retry
    RETRY = r"""
options:
  wait_timeout:
    description:
      - Seconds to keep retrying what a process is still using, a whole number from C(0) to
        C(86400) written with the ASCII digits C(0-9). C(0) tries once.
    type: raw
    default: 0
  retry_interval:
    description:
      - Seconds between retries of what is in use, from C(0.01) to C(3600), written with the
        ASCII digits C(0-9) and an optional decimal point (C(nan) and C(inf) are refused).
    type: raw
    default: 2.0
"""
