"""The release notes `antsibull-changelog release` writes from the fragments, on a copy of the
collection: while no version was ever released, they read as a first release (a summary, known
issues and every role, playbook, module and filter as a new object), not as fixes and breaking
changes to a version nobody had."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from playbook_runner import ansible_env

REPO = Path(__file__).resolve().parents[3]
BIN = Path(sys.executable).parent
FIRST_RELEASE_SECTIONS = {
    "Release Summary",
    "Known Issues",
    "New Plugins",
    "New Modules",
    "New Playbooks",
    "New Roles",
}
SECTION = re.compile(r"^(.+)\n-{3,}$", re.M)
ENTRY = re.compile(r"^- hygon\.dcu\.(\w+) - ", re.M)

pytestmark = pytest.mark.slow


def released_notes(tmp_path: Path) -> str:
    root = tmp_path / "ansible_collections" / "hygon" / "dcu"
    shutil.copytree(
        REPO,
        root,
        ignore=shutil.ignore_patterns(".venv", ".build", ".git", "tests", "plugin_image", "bench"),
    )
    env = ansible_env(ANSIBLE_COLLECTIONS_PATH=str(tmp_path))
    proc = subprocess.run(
        [str(BIN / "antsibull-changelog"), "release", "--version", "0.1.0", "--date", "2026-12-05"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return (root / "CHANGELOG.rst").read_text()


def names_in(notes: str, section: str) -> set[str]:
    after = notes.split(f"\n{section}\n", 1)[1]
    body = SECTION.split(after, 1)[0]
    return set(ENTRY.findall(body))


def test_the_unreleased_collection_reads_as_a_first_release(tmp_path: Path) -> None:
    changelog = yaml.safe_load((REPO / "changelogs" / "changelog.yaml").read_text())
    if changelog.get("releases"):
        pytest.skip("a version was released: later notes list changes to it")
    notes = released_notes(tmp_path)
    assert set(SECTION.findall(notes)) == FIRST_RELEASE_SECTIONS
    assert names_in(notes, "New Roles") == {path.name for path in (REPO / "roles").iterdir()}
    assert names_in(notes, "New Playbooks") == {
        path.stem for path in (REPO / "playbooks").glob("*.yml")
    }
    for section, folder in (("New Modules", "modules"), ("New Plugins", "filter")):
        files = {path.stem for path in (REPO / "plugins" / folder).glob("*.py")} - {"__init__"}
        assert files, folder
        assert names_in(notes, section) == files, section
