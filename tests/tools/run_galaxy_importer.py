"""Run galaxy-importer on the built tarball offline and fail on any error or lint finding.

galaxy-importer logs problems instead of exiting non-zero for most of them, so its log is read:
any ERROR or WARNING line, and any ansible-lint finding it relays, fails the stage.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile
import tempfile

CONFIG = """\
[galaxy-importer]
RUN_ANSIBLE_TEST = False
RUN_ANSIBLE_LINT = True
OFFLINE_ANSIBLE_LINT = True
RUN_ANSIBLE_DOC = True
RUN_FLAKE8 = False
CHECK_CHANGELOG = True
LOG_LEVEL_MAIN = INFO
"""
PROBLEM = re.compile(
    r"(^ERROR|\bERROR:|ImporterError|^WARNING|\[E\d+\]|"
    r"\b[a-z-]+\[[a-z-]+\]: |:\d+:\d+: [EFW]\d+)"
)


# The molecule scenarios import this collection's own playbooks by name; the importer's
# ansible-lint cannot resolve them because the collection is not installed where it looks (seen
# on a fresh machine). Such a line is not a finding when the playbook is in the tarball.
OWN_PLAYBOOK = re.compile(r"Failed to find hygon\.dcu\.(\w+) playbook")


def _shipped_playbooks(tarball: str) -> set[str]:
    with tarfile.open(tarball) as archive:
        return {
            os.path.basename(name)[: -len(".yml")]
            for name in archive.getnames()
            if name.startswith("playbooks/") and name.endswith(".yml")
        }


def main(tarball: str) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        config = os.path.join(tmp, "galaxy-importer.cfg")
        with open(config, "w", encoding="utf-8") as handle:
            handle.write(CONFIG)
        # ansible-doc, flake8 and ansible-lint are found on PATH: use the venv's.
        bindir = os.path.dirname(sys.executable)
        env = dict(
            os.environ,
            GALAXY_IMPORTER_CONFIG=config,
            PATH=bindir + os.pathsep + os.environ.get("PATH", ""),
        )
        result = subprocess.run(
            [sys.executable, "-m", "galaxy_importer.main", os.path.abspath(tarball)],
            env=env,
            cwd=tmp,  # the importer writes importer_result.json into its working directory
            capture_output=True,
            text=True,
            check=False,
        )
    output = result.stdout + result.stderr
    print(output)
    shipped = _shipped_playbooks(tarball)
    problems = [
        line
        for line in output.splitlines()
        if PROBLEM.search(line)
        and not ((own := OWN_PLAYBOOK.search(line)) and own.group(1) in shipped)
    ]
    if result.returncode != 0:
        problems.append(f"galaxy-importer exited {result.returncode}")
    for line in problems:
        print(f"problem: {line}")
    print(f"galaxy-importer: {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
