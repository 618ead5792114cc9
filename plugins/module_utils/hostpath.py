# Copyright: hygon.dcu contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Host-root prefixing: one rule for every host path, so a simulated node is just another root."""

from __future__ import annotations

import os


def host_path(host_root: str, canonical: str) -> str:
    """Where the canonical absolute path ``canonical`` lives under ``host_root``.

    With the default root ``/`` the canonical path comes back unchanged, which keeps messages
    and returned paths identical to what an operator sees on the node.
    """
    if not canonical.startswith("/"):
        raise ValueError(f"expected an absolute path, got {canonical!r}")
    root = host_root or "/"
    if root.rstrip("/") == "":
        return canonical
    return os.path.join(root, canonical.lstrip("/"))
