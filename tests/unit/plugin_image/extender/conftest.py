"""Fixtures for the extender tests: a test CA, the fake API server, and real geometries read
from simulated nodes (the profile tables are the simulator's, never written here)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# The webhook tests' CA helpers (webhook_support) are reused: pytest puts that directory on
# sys.path only for its own tests.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "webhook"))

from webhook_support import Authority, make_authority

from .fake_cluster import FakeCluster
from .support import Geometries


@pytest.fixture(scope="session")
def authority() -> Authority:
    return make_authority("hygon-dcu extender test CA")


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    fake = FakeCluster()
    with fake:  # serving on 127.0.0.1 until the test ends
        yield fake


@pytest.fixture(scope="session")
def geometries(simulator_build: Path, tmp_path_factory: pytest.TempPathFactory) -> Geometries:
    return Geometries(tmp_path_factory.mktemp("sim-nodes"))
