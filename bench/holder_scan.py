"""Holder-scan benchmark: who holds a device file, on a node with thousands of processes.

Starts a synthetic load (by default 2,000 processes holding 20 open files each, a few of them
also holding the target file), then times four ways of finding the target's holders:

- the node layer's scan (``holders.find_holders``, what ``hygon.dcu.kfd_holders_info`` runs);
- the runbook's shell loop (``for p in /proc/*/fd; do ls -l $p | grep ...; done``);
- ``lsof -t FILE``;
- ``fuser FILE``.

All four must name the same pids; the script prints each time and the ratios to the module's
scan. Target: at least 20x faster than the runbook loop and faster than lsof and fuser.
Run as root to see every process's fds (the load is the script's own children either way).

    python3 bench/holder_scan.py [--processes 2000] [--fds 20] [--holders 5] [--repeat 5]
"""

from __future__ import annotations

import argparse
import atexit
import importlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def _import_find_holders() -> Callable[..., list[Any]]:
    """The collection's real module_utils, imported by its collection name."""
    name = "ansible_collections.hygon.dcu.plugins.module_utils.holders"
    try:
        holders = importlib.import_module(name)
    except ImportError:
        dev_collections = REPO / ".venv" / "collections"
        if (dev_collections / "ansible_collections" / "hygon" / "dcu").exists():
            sys.path.insert(0, str(dev_collections))
        else:
            # No dev venv: expose the repository under its collection name for this run.
            link_root = Path(tempfile.mkdtemp(prefix="holder-bench-import-"))
            atexit.register(shutil.rmtree, link_root, True)
            (link_root / "ansible_collections" / "hygon").mkdir(parents=True)
            (link_root / "ansible_collections" / "hygon" / "dcu").symlink_to(REPO)
            sys.path.insert(0, str(link_root))
        holders = importlib.import_module(name)
    find_holders: Callable[..., list[Any]] = holders.find_holders
    return find_holders


@contextmanager
def synthetic_load(
    workdir: Path, processes: int, fds: int, holders: int, target: Path
) -> Iterator[set[int]]:
    """``processes`` sleeping children, each holding ``fds`` files; ``holders`` of them also
    hold ``target``. Yields the holder pids; kills every child on exit."""
    files = []
    for index in range(fds):
        path = workdir / f"file{index}"
        path.write_bytes(b"")
        files.append(os.open(path, os.O_RDONLY))
    target_fd = os.open(target, os.O_RDONLY)
    children: list[subprocess.Popen[bytes]] = []
    holder_pids: set[int] = set()
    try:
        for index in range(processes):
            holds_target = index % max(processes // max(holders, 1), 1) == 0 and (
                len(holder_pids) < holders
            )
            passed = [*files, target_fd] if holds_target else files
            child = subprocess.Popen(
                ["sleep", "3600"],
                pass_fds=passed,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            children.append(child)
            if holds_target:
                holder_pids.add(child.pid)
        # Only the children may hold the target while it is scanned for.
        os.close(target_fd)
        target_fd = -1
        yield holder_pids
    finally:
        for child in children:
            child.kill()
        for child in children:
            child.wait()
        for fd in files:
            os.close(fd)
        if target_fd >= 0:
            os.close(target_fd)


def runbook_loop(target: Path) -> set[int]:
    # The runbook's loop, as an operator types it: one ls and one grep per process.
    script = (
        "for p in /proc/*/fd; do "
        'if ls -l "$p" 2>/dev/null | grep -q -- "$1"; then echo "$p"; fi; '
        "done"
    )
    output = subprocess.run(
        ["bash", "-c", script, "runbook", str(target)],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    return {int(line.split("/")[2]) for line in output.split() if line.startswith("/proc/")}


def lsof(target: Path) -> set[int]:
    output = subprocess.run(
        ["lsof", "-t", "--", str(target)], capture_output=True, text=True, check=False
    ).stdout
    return {int(word) for word in output.split()}


def fuser(target: Path) -> set[int]:
    output = subprocess.run(
        ["fuser", str(target)], capture_output=True, text=True, check=False
    ).stdout
    return {int(word) for word in output.split() if word.isdigit()}


def timed(function: Callable[[], set[int]], repeat: int) -> tuple[float, set[int]]:
    best = float("inf")
    found: set[int] = set()
    for _attempt in range(repeat):
        started = time.perf_counter()
        found = function()
        best = min(best, time.perf_counter() - started)
    return best, found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=2000)
    parser.add_argument("--fds", type=int, default=20)
    parser.add_argument("--holders", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=5, help="runs per fast method (best kept)")
    args = parser.parse_args(argv)
    for tool in ("lsof", "fuser", "bash", "sleep"):
        if shutil.which(tool) is None:
            print(f"{tool} is not installed; install it to run this benchmark", file=sys.stderr)
            return 2
    find_holders = _import_find_holders()

    with tempfile.TemporaryDirectory(prefix="holder-bench-") as directory:
        workdir = Path(directory)
        target = workdir / "kfd"
        target.write_bytes(b"")
        started = time.perf_counter()
        with synthetic_load(workdir, args.processes, args.fds, args.holders, target) as expected:
            print(
                f"load: {args.processes} processes x {args.fds} fds, {len(expected)} holding "
                f"{target.name} (started in {time.perf_counter() - started:.1f} s); "
                f"{len(os.listdir('/proc'))} /proc entries"
            )

            def module_scan() -> set[int]:
                return {holder.pid for holder in find_holders(str(target))}

            results = {
                "module scan": timed(module_scan, args.repeat),
                "runbook loop": timed(lambda: runbook_loop(target), 1),
                "lsof": timed(lambda: lsof(target), args.repeat),
                "fuser": timed(lambda: fuser(target), args.repeat),
            }
    base = results["module scan"][0]
    print(f"{'method':<14}{'seconds':>10}{'x module':>10}  agrees")
    ok = True
    for name, (seconds, found) in results.items():
        agrees = found == expected
        ok &= agrees
        print(f"{name:<14}{seconds:>10.4f}{seconds / base:>10.1f}  {'yes' if agrees else 'NO'}")
    runbook_ratio = results["runbook loop"][0] / base
    lsof_ratio = results["lsof"][0] / base
    fuser_ratio = results["fuser"][0] / base
    print(
        f"ratios: runbook/module {runbook_ratio:.1f} (target >= 20), lsof/module "
        f"{lsof_ratio:.1f} (target > 1), fuser/module {fuser_ratio:.1f} (target > 1)"
    )
    met = runbook_ratio >= 20 and lsof_ratio > 1 and fuser_ratio > 1
    print(f"targets {'met' if met else 'NOT met'}; all methods agree: {'yes' if ok else 'NO'}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
