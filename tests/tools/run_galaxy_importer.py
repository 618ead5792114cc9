"""Run galaxy-importer on the built tarball offline and fail on any error or lint finding.

galaxy-importer logs problems instead of exiting non-zero for most of them, so its log is read:
any ERROR or WARNING line, and any ansible-lint finding it relays, fails the stage.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
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
    problems = [line for line in output.splitlines() if PROBLEM.search(line)]
    if result.returncode != 0:
        problems.append(f"galaxy-importer exited {result.returncode}")
    for line in problems:
        print(f"problem: {line}")
    print(f"galaxy-importer: {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
