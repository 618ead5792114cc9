# Copyright: hygon.dcu contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The options the node modules share, specified once.

Each function returns the ``argument_spec`` entries documented by one doc fragment of
``plugins/doc_fragments/node.py`` (validate-modules checks that the two agree); a module merges
them into its own spec: ``argument_spec={"state": ..., **host_root_spec(), **library_spec()}``.
Fresh dicts every call, so no module can change another's spec.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

Spec = dict[str, dict[str, Any]]

HY_SMI = "hy-smi"


def host_root_spec() -> Spec:
    """``host_root``: fragment ``hygon.dcu.node``."""
    return {"host_root": {"type": "path", "default": "/"}}


def library_spec() -> Spec:
    """``library_path``: fragment ``hygon.dcu.node.library``."""
    return {"library_path": {"type": "path"}}


def hy_smi_spec() -> Spec:
    """``hy_smi_path``: fragment ``hygon.dcu.node.hy_smi``."""
    return {"hy_smi_path": {"type": "path"}}


def find_hy_smi(
    configured: str | None, which: Callable[[str], str | None]
) -> tuple[str | None, str | None]:
    """(path, refusal) for the vendor tool named by the ``hy_smi_path`` option.

    ``which`` looks a command name up on the node (the module's ``get_bin_path``, which searches
    the task's ``PATH``). A value with a ``/`` must be an executable file; a bare name, like the
    default ``hy-smi``, is looked up with ``which``.
    """
    if configured and "/" in configured:
        if not (os.path.isfile(configured) and os.access(configured, os.X_OK)):
            return None, (
                f"hy_smi_path {configured} is not an executable file; point it at the vendor's "
                "hy-smi (usually under /opt/hyhal/bin)"
            )
        return configured, None
    name = configured or HY_SMI
    found = which(name)
    if found is None:
        return None, (
            f"{name} was not found on PATH; install the vendor's tools (hyhal) or set "
            "hy_smi_path to its location"
        )
    return found, None
