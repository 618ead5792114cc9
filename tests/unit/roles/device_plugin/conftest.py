from __future__ import annotations

from pathlib import Path

import pytest

from .render import RoleRun, run_role


@pytest.fixture(scope="session")
def default_render(tmp_path_factory: pytest.TempPathFactory) -> RoleRun:
    """The role with its defaults, rendered once per session."""
    run = run_role(tmp_path_factory.mktemp("render") / "out")
    assert run.returncode == 0, run.output
    return run


@pytest.fixture
def render_dir(tmp_path: Path) -> Path:
    return tmp_path / "out"
