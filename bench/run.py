"""Run the benchmarks: `.venv/bin/python bench/run.py [--quick] [placement|allocator|holders]`."""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# The same import roots pytest gets from pyproject.toml, so the bench runs outside pytest.
for extra in ("tests/simulator", "plugin_image/src", ".venv/collections", "."):
    path = str(REPO / extra)
    if path not in sys.path:
        sys.path.insert(0, path)

SECTIONS = ("placement", "slices", "allocator", "holders")
MODULES = {
    "placement": "bench.placement_quality",
    "slices": "bench.slice_quality",
    "allocator": "bench.allocator_cost",
}


def holders(quick: bool) -> str:
    """The holder-scan benchmark lives in its own script (bench/holder_scan.py)."""
    script = REPO / "bench" / "holder_scan.py"
    if not script.exists():
        return "== holder scan ==\nbench/holder_scan.py is not there yet: skipped"
    # Its own defaults are the full size; --quick shrinks the synthetic process load.
    small = ["--processes", "200", "--fds", "5", "--repeat", "1"]
    argv = [sys.executable, str(script)] + (small if quick else [])
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    text = done.stdout.rstrip()
    if done.returncode != 0:
        text += f"\nbench/holder_scan.py exited {done.returncode}:\n{done.stderr.rstrip()}"
    return "== holder scan ==\n" + text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="tiny sizes (smoke test, < 30 s)")
    parser.add_argument(
        "sections",
        nargs="*",
        metavar="SECTION",
        help=f"any of {', '.join(SECTIONS)} (default: all)",
    )
    args = parser.parse_args(argv)
    unknown = [s for s in args.sections if s not in SECTIONS]
    if unknown:
        parser.error(f"unknown section(s) {', '.join(unknown)}; choose from {', '.join(SECTIONS)}")
    for section in args.sections or SECTIONS:
        started = time.monotonic()
        if section == "holders":
            text = holders(args.quick)
        else:
            # Imported only when asked for: the allocator section pulls in grpc and the plugin.
            module = importlib.import_module(MODULES[section])
            text = module.run(args.quick)
        print(text)
        print(f"({section}: {time.monotonic() - started:.1f} s)\n", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
