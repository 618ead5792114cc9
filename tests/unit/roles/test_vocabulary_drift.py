"""The product's Kubernetes names reach the roles only through the generated vocabulary files.

plugin_image/tools/generate_role_vocabulary.py writes them from the plugin's Python definitions.
These tests fail when a definition changed and the files were not regenerated, when a role or
playbook spells a name itself, and when the roles' documentation names something the plugin
does not define.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[3]
TOOL = REPO / "plugin_image" / "tools" / "generate_role_vocabulary.py"
SCANNED = (REPO / "roles", REPO / "playbooks")

# Written by the generator (the test below checks it writes exactly these).
GENERATED = frozenset(
    {
        "roles/mig_node/vars/vocabulary.yml",
        "roles/mig_node/templates/vocabulary.j2",
        "roles/device_plugin/vars/vocabulary.yml",
        "roles/device_plugin/templates/admission/vocabulary.j2",
        "roles/fleet_report/templates/vocabulary.j2",
    }
)
# Descriptions for people, which may name the product's names literally: every name they
# mention is checked against the definitions instead.
DOCUMENTED = frozenset(
    {
        "roles/mig_node/README.md",
        "roles/mig_node/meta/argument_specs.yml",
        "roles/device_plugin/README.md",
        "roles/device_plugin/meta/argument_specs.yml",
        "roles/fleet_report/README.md",
        "roles/fleet_report/meta/argument_specs.yml",
    }
)
# The domain the roles spelled out before the names were generated; the definitions' own
# domain is searched for as well, so a leftover is found even after the domain changes.
HISTORIC_DOMAIN = "hygon.com"


def load_tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("generate_role_vocabulary", TOOL)
    assert spec is not None and spec.loader is not None
    tool = importlib.util.module_from_spec(spec)
    # dataclasses look their module up while the class is built
    sys.modules[spec.name] = tool
    spec.loader.exec_module(tool)
    return tool


@pytest.fixture(scope="module")
def tool() -> ModuleType:
    return load_tool()


@pytest.fixture(scope="module")
def names(tool: ModuleType) -> dict[str, str]:
    """Key -> value of every name the generator takes from the definitions."""
    return {name.key: name.value for name in tool.names()}


def run_tool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(TOOL), *args], capture_output=True, text=True, check=False, timeout=60
    )


def relative(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


def scanned_files() -> list[Path]:
    return sorted(path for top in SCANNED for path in top.rglob("*") if path.is_file())


def domains_of(names: dict[str, str]) -> set[str]:
    """The domains of the prefixed names, and the historic one."""
    return {HISTORIC_DOMAIN} | {value.split("/", 1)[0] for value in names.values() if "/" in value}


def object_name_pattern(names: dict[str, str]) -> re.Pattern[str]:
    """A name without a domain (an object's name, such as the second scheduler's), on its own:
    not inside a longer word or a path."""
    plain = sorted(value for value in names.values() if "/" not in value)
    assert plain, "no object name in the vocabulary: this pattern checks nothing"
    return re.compile(
        "(?<![A-Za-z0-9/-])(?:" + "|".join(re.escape(value) for value in plain) + ")(?![A-Za-z0-9])"
    )


def literal_pattern(names: dict[str, str]) -> re.Pattern[str]:
    """A name's domain and "/", also with the dots escaped as in a regular expression."""
    domains = domains_of(names)
    return re.compile(
        "|".join(re.escape(domain).replace(r"\.", r"\\?\.") + "/" for domain in sorted(domains))
    )


def test_generated_files_match_the_definitions() -> None:
    result = run_tool("--check")
    assert result.returncode == 0, result.stderr


def test_the_allowed_generated_files_are_what_the_generator_writes(tool: ModuleType) -> None:
    assert {f"roles/{target.path}" for target in tool.TARGETS} == GENERATED


def test_check_names_the_stale_file(tmp_path: Path) -> None:
    roles = tmp_path / "roles"
    assert run_tool("--roles-dir", str(roles)).returncode == 0
    assert run_tool("--check", "--roles-dir", str(roles)).returncode == 0
    stale = roles / "device_plugin" / "vars" / "vocabulary.yml"
    stale.write_text(stale.read_text() + "# edited by hand\n")
    result = run_tool("--check", "--roles-dir", str(roles))
    assert result.returncode == 1
    assert f"out of date: {stale}" in result.stderr
    assert "mig_node" not in result.stderr


def test_no_role_or_playbook_spells_a_product_name(names: dict[str, str]) -> None:
    pattern = literal_pattern(names)
    found = []
    for path in scanned_files():
        if relative(path) in GENERATED | DOCUMENTED:
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if pattern.search(line):
                found.append(f"{relative(path)}:{number}: {line.strip()}")
    assert not found, "use the generated vocabulary instead:\n" + "\n".join(found)


def test_no_role_or_playbook_spells_a_products_object_name(names: dict[str, str]) -> None:
    pattern = object_name_pattern(names)
    found = []
    for path in scanned_files():
        if relative(path) in GENERATED | DOCUMENTED:
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if pattern.search(line):
                found.append(f"{relative(path)}:{number}: {line.strip()}")
    assert not found, "use the generated vocabulary instead:\n" + "\n".join(found)


def known(token: str, values: set[str]) -> bool:
    """A name, a name ending a sentence, or a name after a prefix (profile, annotation key)."""
    if token in values or token.rstrip(".") in values:
        return True
    prefixes = [value for value in values if value.endswith((".", "-"))]
    return any(token.startswith(prefix) and token != prefix for prefix in prefixes)


def test_documented_names_exist_in_the_definitions(names: dict[str, str]) -> None:
    values = set(names.values())
    domains = domains_of(names)
    token = re.compile(
        "(?<![A-Za-z0-9.-])(?:"
        + "|".join(re.escape(domain) for domain in sorted(domains))
        + ")/[A-Za-z0-9._-]*"
    )
    unknown = []
    mentioned = 0
    for path in sorted(DOCUMENTED):
        text = (REPO / path).read_text()
        for match in token.finditer(text):
            mentioned += 1
            if not known(match.group(), values):
                number = text.count("\n", 0, match.start()) + 1
                unknown.append(f"{path}:{number}: {match.group()}")
    assert mentioned > 0, "no name found: the pattern is wrong"
    assert not unknown, "not a name the plugin defines:\n" + "\n".join(unknown)


def test_every_vocabulary_reference_names_a_generated_name(names: dict[str, str]) -> None:
    # A misspelt variable fails only when its task runs, which for an error message may be never.
    variable = re.compile(r"\b([a-z_]+)__vocabulary_([a-z_]+)\b")
    attribute = re.compile(r"\bvocabulary\.(?!j2\b|yml\b)([a-z_]+)\b")
    importing = "import 'vocabulary.j2' as vocabulary"
    wrong = []
    for path in scanned_files():
        if relative(path) in GENERATED or path.suffix not in {".yml", ".j2"}:
            continue
        text = path.read_text()
        role = relative(path).split("/")[1] if relative(path).startswith("roles/") else None
        for match in variable.finditer(text):
            vars_file = f"roles/{match.group(1)}/vars/vocabulary.yml"
            if match.group(1) != role:
                wrong.append(f"{relative(path)}: {match.group()} (another role's variable)")
            elif vars_file not in GENERATED:
                wrong.append(f"{relative(path)}: {match.group()} (the role has no {vars_file})")
            elif match.group(2) not in names:
                wrong.append(f"{relative(path)}: {match.group()} (no such name)")
        if path.suffix == ".j2" and attribute.search(text.replace(importing, "")):
            if importing not in text or relative(path.with_name("vocabulary.j2")) not in GENERATED:
                wrong.append(f"{relative(path)}: uses vocabulary.* without importing vocabulary.j2")
            wrong += [
                f"{relative(path)}: vocabulary.{key} (no such name)"
                for key in attribute.findall(text)
                if key not in names
            ]
    assert not wrong, "\n".join(wrong)
