"""Each benchmark script (bench/README.md runs them by path) starts as a plain script, outside
pytest: it sets up its own import roots (pytest's come from pyproject.toml and would hide a
missing one). ``--help`` imports everything the script needs and measures nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
# The modules that run as scripts.
SCRIPTS = sorted(
    path.name
    for path in (REPO / "bench").glob("*.py")
    if 'if __name__ == "__main__":' in path.read_text()
)


def test_the_scripts_are_found() -> None:
    assert len(SCRIPTS) >= 4, SCRIPTS


@pytest.mark.parametrize("script", SCRIPTS)
def test_the_script_starts_outside_pytest(script: str, tmp_path: Path) -> None:
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / script), "--help"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage:" in done.stdout
