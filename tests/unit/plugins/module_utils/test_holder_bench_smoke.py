"""Smoke test for bench/holder_scan.py on a tiny load: it runs, and all four methods agree.

The speed targets are the benchmark's business (run it by hand); nothing here is timed.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[4] / "bench" / "holder_scan.py"


@pytest.mark.skipif(
    shutil.which("lsof") is None or shutil.which("fuser") is None,
    reason="the benchmark compares with lsof and fuser",
)
def test_benchmark_runs_on_a_tiny_load() -> None:
    completed = subprocess.run(
        [
            sys.executable,
            str(BENCH),
            "--processes",
            "12",
            "--fds",
            "3",
            "--holders",
            "2",
            "--repeat",
            "1",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert "all methods agree: yes" in completed.stdout
    assert "runbook/module" in completed.stdout
