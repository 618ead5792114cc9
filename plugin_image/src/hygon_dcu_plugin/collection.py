"""Finding the hygon.dcu collection, whose module_utils the plugin runs (the same files the
Ansible modules run). The image puts it under /opt/hygon-dcu; an installed package looks where
Ansible installs collections. When it is nowhere, the caller stops with one line saying what
to install, not with a traceback."""

from __future__ import annotations

import importlib
import os
import sys

PROBE = "ansible_collections.hygon.dcu.plugins.module_utils.node"
_MARKER = os.path.join("ansible_collections", "hygon", "dcu", "plugins", "module_utils", "node.py")
IMAGE_ROOT = "/opt/hygon-dcu"


def _candidates() -> list[str]:
    roots: list[str] = []
    for variable in ("ANSIBLE_COLLECTIONS_PATH", "ANSIBLE_COLLECTIONS_PATHS"):
        roots += [p for p in os.environ.get(variable, "").split(os.pathsep) if p]
    roots += [
        os.path.expanduser("~/.ansible/collections"),
        os.path.join(sys.prefix, "share", "ansible", "collections"),
        "/usr/share/ansible/collections",
        IMAGE_ROOT,
    ]
    return roots


def ensure_collection() -> str | None:
    """Make the collection importable; None when it is, else the one line to print."""
    try:
        importlib.import_module(PROBE)
        return None
    except ModuleNotFoundError as exc:
        first = exc
    for root in _candidates():
        if os.path.isfile(os.path.join(root, _MARKER)):
            sys.path.insert(0, root)
            importlib.invalidate_caches()
            try:
                importlib.import_module(PROBE)
                return None
            except ModuleNotFoundError:
                sys.path.remove(root)
    return (
        f"cannot import the hygon.dcu Ansible collection ({first}): install it "
        "(ansible-galaxy collection install hygon.dcu, or that command on this repository's "
        "build) or set ANSIBLE_COLLECTIONS_PATH to the directory that holds "
        "ansible_collections/hygon/dcu"
    )


def missing_packages() -> str | None:
    """The plugin's Python dependencies that are not installed, as the one line to print."""
    missing = []
    for module, package in (
        ("grpc", "grpcio"),
        ("google.protobuf", "protobuf"),
        ("kubernetes", "kubernetes"),
        ("yaml", "PyYAML"),
    ):
        try:
            importlib.import_module(module)
        except ImportError:
            missing.append(package)
    if not missing:
        return None
    return (
        f"missing Python packages: {', '.join(missing)}; install them "
        f"(pip install {' '.join(missing)}, or pip install the plugin_image directory)"
    )
