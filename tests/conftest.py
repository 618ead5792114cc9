"""Shared pytest fixtures: the simulated Hygon node (tests/simulator) and real holder processes.

- ``sim_build``: builds the simulator once per session (``make -C tests/simulator``).
- ``sim_node``: a fresh ``simnode init`` node (c3000-bw, 2 cards) in tmp_path, with
  HYDMI_SIM_ROOT pointing at it for the test.
- ``sim_node_factory``: the same with model / cards / virtualization options.
- ``kfd_holder``: ``kfd_holder(path)`` starts a real process holding ``path`` open (killed at
  teardown, or earlier with ``.release()``).
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import simnode

_HOLD_SCRIPT = (
    "import os, sys\n"
    "fd = os.open(sys.argv[1], os.O_RDONLY)\n"
    "print('ready', flush=True)\n"
    "sys.stdin.read()\n"
)


@dataclass(frozen=True)
class SimBuild:
    build_dir: Path
    library: Path
    hy_smi: Path
    dcu_probe: Path
    minirun: Path
    simnode: Path


@pytest.fixture(scope="session")
def sim_build() -> SimBuild:
    # Several pytest sessions may share the tree: one make at a time (a read-only checkout
    # with a finished build just runs make, which then has nothing to do).
    try:
        simnode.BUILD_DIR.mkdir(parents=True, exist_ok=True)
        lock = open(simnode.BUILD_DIR / ".make.lock", "a")  # noqa: SIM115 -- held across make
    except OSError:
        simnode.build()
    else:
        with lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            simnode.build()
    return SimBuild(
        build_dir=simnode.BUILD_DIR,
        library=simnode.LIB_PATH,
        hy_smi=simnode.HY_SMI_PATH,
        dcu_probe=simnode.PROBE_PATH,
        minirun=simnode.MINIRUN_PATH,
        simnode=simnode.SIMNODE_PATH,
    )


SimNodeFactory = Callable[..., simnode.SimNode]


@pytest.fixture
def sim_node_factory(
    sim_build: SimBuild, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> SimNodeFactory:
    """``factory(model="c3000-bw", cards=2, virtualization=True, name=None, set_env=True)``."""
    made: list[int] = [0]

    def factory(
        model: str = "c3000-bw",
        cards: int = 2,
        virtualization: bool = True,
        name: str | None = None,
        set_env: bool = True,
    ) -> simnode.SimNode:
        made[0] += 1
        root = tmp_path / (name or f"node{made[0]}")
        node = simnode.init(root, model=model, cards=cards, virtualization=virtualization)
        if set_env:
            monkeypatch.setenv(simnode.ROOT_ENV, str(node.root))
        return node

    return factory


@pytest.fixture
def sim_node(sim_node_factory: SimNodeFactory) -> simnode.SimNode:
    return sim_node_factory()


@dataclass
class Holder:
    """A real process holding ``path`` open (visible in /proc/<pid>/fd)."""

    path: Path
    process: subprocess.Popen[str]

    @property
    def pid(self) -> int:
        return self.process.pid

    def release(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        if self.process.stdin:
            self.process.stdin.close()
        if self.process.stdout:
            self.process.stdout.close()


@pytest.fixture
def kfd_holder() -> Iterator[Callable[[str | os.PathLike[str]], Holder]]:
    holders: list[Holder] = []

    def hold(path: str | os.PathLike[str]) -> Holder:
        proc = subprocess.Popen(
            [sys.executable, "-c", _HOLD_SCRIPT, os.fspath(path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        holder = Holder(Path(path), proc)
        holders.append(holder)
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if line.strip() != "ready":
            holder.release()
            raise RuntimeError(f"holder for {path} did not start (got {line!r})")
        return holder

    yield hold
    for holder in holders:
        holder.release()
