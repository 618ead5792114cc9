"""Run a module's main() in-process, the way ansible-core 2.19 feeds it arguments."""

from __future__ import annotations

import json
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest
from ansible.module_utils import basic
from ansible.module_utils.common import warnings as ansible_warnings

ModuleRunner = Callable[..., dict[str, Any]]


@pytest.fixture
def run_module(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> ModuleRunner:
    """``run_module(module, args, check_mode=False, diff=False)`` -> the module's result dict.

    ``result["failed"]`` is true when the module called fail_json.
    """

    def run(
        module: ModuleType, args: dict[str, Any], check_mode: bool = False, diff: bool = False
    ) -> dict[str, Any]:
        payload = dict(args, _ansible_check_mode=check_mode, _ansible_diff=diff)
        monkeypatch.setattr(
            basic, "_ANSIBLE_ARGS", json.dumps({"ANSIBLE_MODULE_ARGS": payload}).encode()
        )
        # ansible-core 2.19 reads the serialization profile from here; 2.18 has none.
        monkeypatch.setattr(basic, "_ANSIBLE_PROFILE", "legacy", raising=False)
        # Warnings are process-global in ansible-core: each in-process run starts with none,
        # as a real module process does (a list in 2.18, a dict from 2.19).
        for name in ("_global_warnings", "_global_deprecations"):
            monkeypatch.setattr(ansible_warnings, name, type(getattr(ansible_warnings, name))())
        capsys.readouterr()
        with pytest.raises(SystemExit):
            module.main()
        out = capsys.readouterr().out
        result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
        return result

    return run
