"""Fixtures for the device-plugin tests: a simulated node with partition mode on, and the
plugin's runtime wired to it with a fake API server and an in-memory kubelet view."""

from __future__ import annotations

import logging
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import simnode
from plugin_harness import Harness, make_node


@pytest.fixture(autouse=True)
def root_logging() -> Iterator[None]:
    """The programs' main() configure the root logger (logs.setup): put it back after every
    test, so no test's log capture depends on which tests ran before it."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.fixture(scope="session")
def simulator_build() -> Path:
    return simnode.build()


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A short directory: unix socket paths must stay under 108 bytes."""
    path = Path(tempfile.mkdtemp(prefix="hdp", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def bw_node(
    simulator_build: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> simnode.SimNode:
    node: simnode.SimNode = make_node(tmp_path / "node")
    monkeypatch.setenv(simnode.ROOT_ENV, str(node.root))
    return node


@pytest.fixture
def harness(bw_node: simnode.SimNode, short_tmp: Path) -> Harness:
    # State in a short directory: the plugin's unix sockets live under it.
    return Harness(bw_node, short_tmp)


@pytest.fixture
def off_node(
    simulator_build: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> simnode.SimNode:
    """Eight cards with the partition mode off: whole cards and logical slices."""
    node: simnode.SimNode = make_node(tmp_path / "node", mode_on=False)
    monkeypatch.setenv(simnode.ROOT_ENV, str(node.root))
    return node


@pytest.fixture
def slice_harness(off_node: simnode.SimNode, short_tmp: Path) -> Harness:
    return Harness(off_node, short_tmp)
