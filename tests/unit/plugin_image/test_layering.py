"""The runtime image's layers, read from the imports of its source (docs/dev/runtime.md).

- the floor (the package's own modules but the entry point) imports no program and no kit;
- the serving kit imports the floor alone;
- each program (device plugin, webhook, extender) imports the floor, the kit and itself;
- only the device plugin reaches the vendor binding (the ctypes ``hydmi`` of the collection's
  node layer), directly or through another module of the collection.

Every import counts, a function's lazy one and a TYPE_CHECKING one included: a rule broken
only lazily is still broken the first time that path runs.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
SOURCE = REPO / "plugin_image" / "src"
PACKAGE = "hygon_dcu_plugin"
MODULE_UTILS = REPO / "plugins" / "module_utils"
COLLECTION_UTILS = "ansible_collections.hygon.dcu.plugins.module_utils"
BINDING = f"{COLLECTION_UTILS}.hydmi"
NODE_LAYER = (f"{COLLECTION_UTILS}.node", BINDING)
PROGRAMS = ("deviceplugin", "webhook", "extender")
KIT = "serving"
ENTRY_POINTS = {f"{PACKAGE}.cli", f"{PACKAGE}.__main__", f"{PACKAGE}.collection"}


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported(path: Path, name: str) -> Iterator[str]:
    """Every module an import in the file names, a name imported from a package counted as
    that package's module too (``from pkg import mod``)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            yield source
            yield from (f"{source}.{alias.name}" for alias in node.names)


def import_graph(root: Path, package: str) -> dict[str, set[str]]:
    graph = {}
    for path in sorted(root.rglob("*.py")):
        name = ".".join(part for part in (package, module_name(path, root)) if part)
        graph[name] = set(imported(path, name))
    return graph


PRODUCT = import_graph(SOURCE / PACKAGE, PACKAGE)
COLLECTION = import_graph(MODULE_UTILS, COLLECTION_UTILS)


def layer(module: str) -> str:
    """floor, serving, a program's name, or entry."""
    if module in ENTRY_POINTS:
        return "entry"
    parts = module.split(".")
    if len(parts) > 1 and parts[1] in (*PROGRAMS, KIT):
        return parts[1]
    return "floor"


def reaches_binding(module: str, seen: set[str] | None = None) -> list[str] | None:
    """The chain of imports from module to the binding, if there is one."""
    seen = set() if seen is None else seen
    for target in sorted(PRODUCT.get(module, set()) | COLLECTION.get(module, set())):
        if target == BINDING:
            return [module, target]
        if target in seen or not (target in PRODUCT or target in COLLECTION):
            continue
        seen.add(target)
        chain = reaches_binding(target, seen)
        if chain:
            return [module, *chain]
    return None


def forbidden(module: str, target: str) -> str | None:
    """Why module may not import target, or None when it may."""
    if not target.startswith(PACKAGE + ".") or target not in PRODUCT:
        return None
    own, other = layer(module), layer(target)
    if own == "entry" or other == "floor" or own == other:
        return None
    if other == "entry":
        return "nothing but the entry point imports the entry point"
    if own == "floor":
        return f"the floor imports no {other}"
    if own == KIT:
        return f"the serving kit imports no {other}"
    if other == KIT:
        return None
    return f"the {own} program imports another program ({other})"


def test_the_graph_was_read() -> None:
    # The rules below would hold trivially over an empty or misread tree.
    assert {layer(m) for m in PRODUCT} >= {"floor", KIT, "entry", *PROGRAMS}
    assert f"{PACKAGE}.deviceplugin.allocator" in PRODUCT
    assert reaches_binding(f"{PACKAGE}.deviceplugin.allocator"), "the allocator drives the binding"


@pytest.mark.parametrize("module", sorted(PRODUCT))
def test_each_layer_imports_only_what_it_stands_on(module: str) -> None:
    broken = [
        f"{module} -> {target}: {why}"
        for target in sorted(PRODUCT[module])
        if (why := forbidden(module, target))
    ]
    assert not broken, "\n".join(broken)


@pytest.mark.parametrize(
    "module", sorted(m for m in PRODUCT if layer(m) not in ("deviceplugin", "entry"))
)
def test_only_the_device_plugin_reaches_the_binding(module: str) -> None:
    chain = reaches_binding(module)
    assert chain is None, " -> ".join(chain or [])


# A Python whose imports of the node layer fail, as on a host (or in an image) without it.
WITHOUT_NODE_LAYER = f"""
import importlib.abc, sys

class Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name in {NODE_LAYER!r}:
            raise ModuleNotFoundError(name + " is absent")
        return None

sys.meta_path.insert(0, Absent())
import importlib
importlib.import_module(sys.argv[1])
"""


def import_without_node_layer(module: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_NODE_LAYER, module],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    "main", [f"{PACKAGE}.webhook.server", f"{PACKAGE}.extender.main", f"{PACKAGE}.webhook.offered"]
)
def test_the_https_programs_start_without_the_node_layer(main: str) -> None:
    run = import_without_node_layer(main)
    assert run.returncode == 0, run.stderr[-2000:]


def test_the_device_plugin_needs_the_node_layer() -> None:
    # The check above can fail: with the node layer absent, the device plugin cannot load.
    run = import_without_node_layer(f"{PACKAGE}.deviceplugin.runtime")
    assert run.returncode != 0
    assert "is absent" in run.stderr
