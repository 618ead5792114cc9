"""Each role input is defined once, in defaults/main.yml, and described the same everywhere else.

For every role: each default has an argument-spec entry with the same default, each spec option
that is not required has that default, and the spec never disagrees between entry points.
Where docs list a role's inputs in a table (``| variable | default | meaning |``), the table
names every public input with the same default and nothing that is not an input of the role or
its playbooks. A table of one feature's inputs (PARTIAL_TABLES) names every input of the role
whose name starts with one of the feature's prefixes, and only inputs of the role.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
ROLES = sorted(path.parent.parent.name for path in REPO.glob("roles/*/meta/argument_specs.yml"))
# The table that lists each role's inputs, by role. A role without one documents its inputs in
# meta/argument_specs.yml only (ansible-doc -t role).
TABLES = {
    "mig_node": REPO / "docs" / "operating.md",
    "fleet_report": REPO / "docs" / "report.md",
}
# Tables of one feature's inputs: document -> (role, the prefixes of the inputs it lists).
PARTIAL_TABLES = {
    REPO / "docs" / "extender.md": (
        "device_plugin",
        ("hygon_dcu_device_plugin_extender_", "hygon_dcu_device_plugin_scheduler_"),
    ),
}
TABLE_HEADER = re.compile(r"^\|\s*variable\s*\|\s*default\s*\|", re.M)
NAME = re.compile(r"`([a-z][a-z0-9_]*)`")
LITERAL = re.compile(r"^`([^`]*)`$")
_MISSING = object()


def load(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def defaults_of(role: str) -> dict[str, Any]:
    return load(REPO / "roles" / role / "defaults" / "main.yml") or {}


def spec_options(role: str) -> dict[str, dict[str, Any]]:
    """Every option of every entry point, once; an option's spec must be the same in each."""
    specs = load(REPO / "roles" / role / "meta" / "argument_specs.yml")["argument_specs"]
    merged: dict[str, dict[str, Any]] = {}
    for entry, spec in specs.items():
        for name, option in (spec.get("options") or {}).items():
            seen = merged.setdefault(name, option)
            assert seen == option, f"{role}: {name} differs in entry point {entry}"
    return merged


def table_rows(path: Path) -> list[tuple[list[str], str]]:
    """(variable names, default cell) of each row of the inputs table in ``path``."""
    text = path.read_text()
    header = TABLE_HEADER.search(text)
    assert header, f"{path}: no '| variable | default | meaning |' table"
    rows = []
    for line in text[header.start() :].splitlines()[2:]:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        rows.append((NAME.findall(cells[0]), cells[1]))
    return rows


def playbook_inputs() -> str:
    """The playbooks' text without comments: where a playbook-only input is read."""
    lines = []
    for path in sorted((REPO / "playbooks").rglob("*.yml")):
        lines += [
            line for line in path.read_text().splitlines() if not line.lstrip().startswith("#")
        ]
    return "\n".join(lines)


@pytest.mark.parametrize("role", ROLES)
def test_defaults_and_the_argument_spec_agree(role: str) -> None:
    defaults = defaults_of(role)
    options = spec_options(role)
    for name, value in defaults.items():
        assert name in options, f"{role}: default {name} has no argument-spec entry"
        assert options[name].get("default", _MISSING) == value, (
            f"{role}: {name} defaults to {value!r} in defaults/main.yml but to "
            f"{options[name].get('default', 'nothing')!r} in meta/argument_specs.yml"
        )
    for name, option in options.items():
        if option.get("required"):
            assert name not in defaults, f"{role}: required option {name} has a default"
            assert "default" not in option, f"{role}: required option {name} has a default"
        else:
            assert name in defaults, f"{role}: option {name} has no default in defaults/main.yml"


def check_default(path: Path, name: str, cell: str, option: dict[str, Any]) -> None:
    literal = LITERAL.match(cell)
    if literal:
        assert yaml.safe_load(literal.group(1)) == option["default"], (
            f"{path.name}: {name} defaults to {cell} there, to {option['default']!r} in the role"
        )
    else:
        # Only a templated default is described in words (e.g. "inventory name").
        assert "{{" in str(option["default"]), f"{path.name}: {name}: {cell}"


@pytest.mark.parametrize("role", sorted(TABLES))
def test_the_inputs_table_lists_every_input_with_its_default(role: str) -> None:
    options = spec_options(role)
    rows = table_rows(TABLES[role])
    listed = {name: default for names, default in rows for name in names}
    playbooks = playbook_inputs()
    readme = (REPO / "roles" / role / "README.md").read_text()
    for name, option in options.items():
        if name.startswith(f"{role}__"):
            # Set by the collection's playbooks, not by operators: the role README names it.
            assert f"`{name}`" in readme or name in readme, f"{role}: README misses {name}"
            continue
        assert name in listed, f"{TABLES[role].name} misses {role}'s input {name}"
        check_default(TABLES[role], name, listed[name], option)
    for name in listed:
        assert name in options or re.search(rf"\b{name}\b", playbooks), (
            f"{TABLES[role].name} lists {name}, which neither {role} nor a playbook reads"
        )


@pytest.mark.parametrize("path", sorted(PARTIAL_TABLES), ids=lambda path: path.name)
def test_a_features_table_lists_its_inputs_with_their_defaults(path: Path) -> None:
    role, prefixes = PARTIAL_TABLES[path]
    options = spec_options(role)
    listed = {name: default for names, default in table_rows(path) for name in names}
    wanted = {name for name in options if name.startswith(prefixes)}
    assert wanted, f"no input of {role} starts with {prefixes}: the table checks nothing"
    assert set(listed) == wanted, f"{path.name} lists {sorted(listed)}, {role} has {sorted(wanted)}"
    for name in wanted:
        check_default(path, name, listed[name], options[name])


def test_every_inputs_table_is_checked() -> None:
    documents = [*REPO.glob("docs/**/*.md"), *REPO.glob("roles/*/README.md"), REPO / "README.md"]
    with_table = {
        path for path in documents if path.is_file() and TABLE_HEADER.search(path.read_text())
    }
    assert with_table == set(TABLES.values()) | set(PARTIAL_TABLES)
