"""The runner: sections by name, every section at --quick size, the holder-scan script wired in."""

from __future__ import annotations

import pytest

from bench import run


def test_unknown_section_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        run.main(["nonsense"])
    assert exit_info.value.code == 2
    assert "unknown section(s) nonsense" in capsys.readouterr().err


def test_quick_run_prints_every_section(capsys: pytest.CaptureFixture[str]) -> None:
    assert run.main(["--quick"]) == 0
    out = capsys.readouterr().out
    for heading in (
        "== placement quality ==",
        "== slice placement ==",
        "== allocator cost ==",
        "== holder scan ==",
    ):
        assert heading in out
    # Either the holder scan's table, or its own message naming the missing tool.
    assert "module scan" in out or "is not installed" in out, out
