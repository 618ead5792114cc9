"""The runner: sections by name, the holder-scan script wired in."""

from __future__ import annotations

import pytest

from bench import run


def test_unknown_section_is_refused() -> None:
    with pytest.raises(SystemExit) as exit_info:
        run.main(["nonsense"])
    assert exit_info.value.code == 2


def test_holder_scan_is_run_through_the_runner() -> None:
    text = run.holders(quick=True)
    assert text.startswith("== holder scan ==")
    # Either its table, or its own message saying which tool is missing.
    assert "module scan" in text or "is not installed" in text, text
