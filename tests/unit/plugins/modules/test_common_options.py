"""The options the node modules share: one spec, one hy-smi lookup, the same answer everywhere."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from ansible_collections.hygon.dcu.plugins.modules import mig_info, mig_mode
from simnode import SimNode

if TYPE_CHECKING:
    from collections.abc import Callable

    ModuleRunner = Callable[..., dict[str, Any]]


def write_tool(path: Path, mode: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(mode)
    return path


@pytest.mark.parametrize(
    ("configured", "found", "error"),
    [
        (None, "{bin}/hy-smi", None),
        ("hy-smi", "{bin}/hy-smi", None),
        ("other-smi", "{bin}/other-smi", None),
        ("no-such-smi", None, "no-such-smi was not found on PATH"),
        ("{bin}/other-smi", "{bin}/other-smi", None),
        ("{bin}/plain-file", None, "hy_smi_path {bin}/plain-file is not an executable file"),
        ("{bin}/missing", None, "hy_smi_path {bin}/missing is not an executable file"),
    ],
)
def test_mig_info_reports_the_hy_smi_mig_mode_would_run(
    sim_node: SimNode,
    run_module: ModuleRunner,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    configured: str | None,
    found: str | None,
    error: str | None,
) -> None:
    tools = tmp_path / "tools"
    for name in ("hy-smi", "other-smi"):
        write_tool(tools / name, 0o755)
    write_tool(tools / "plain-file", 0o644)
    monkeypatch.setenv("PATH", f"{tools}{os.pathsep}/usr/bin{os.pathsep}/bin")
    args: dict[str, Any] = {"host_root": str(sim_node.root)}
    if configured:
        args["hy_smi_path"] = configured.format(bin=tools)

    info = run_module(mig_info, args)["mig_info"]["hy_smi"]

    assert info["path"] == (found.format(bin=tools) if found else None)
    if error is None:
        assert info["error"] is None
    else:
        assert info["error"].startswith(error.format(bin=tools))
    # mig_mode refuses with the same words, in check mode as in a real run.
    switch = run_module(mig_mode, {"state": "enabled", **args}, check_mode=True)
    if error is None:
        assert "failed" not in switch and switch["changed"] is True
    else:
        assert switch["failed"] is True and switch["msg"] == info["error"]
