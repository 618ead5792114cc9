"""Run a module's main() in-process, the way ansible-core 2.19 feeds it arguments."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from ansible.module_utils import basic
from ansible.module_utils.common import warnings as ansible_warnings

try:  # ansible-core 2.19: a warning raised where the controller is loaded goes to its display
    from ansible.module_utils import _internal as module_internals
except ImportError:  # pragma: no cover - older cores route every warning to the result
    module_internals = None

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
        # A module process is never the controller, even when this test process has imported
        # controller code (the filter plugins' tests, on the same xdist worker).
        if module_internals is not None:
            monkeypatch.setattr(module_internals, "is_controller", False, raising=False)
        capsys.readouterr()
        with pytest.raises(SystemExit):
            module.main()
        out = capsys.readouterr().out
        result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
        return result

    return run


@pytest.fixture
def run_module_as() -> Callable[..., dict[str, Any]]:
    """``run_module_as(uid, module, args, check_mode=False)``: the module's main() in a forked
    child that first drops to ``uid`` (and gid ``uid``, no groups), as a node task run by a user
    who is not root would be. Needs root."""

    def run(
        uid: int, module: ModuleType, args: dict[str, Any], check_mode: bool = False
    ) -> dict[str, Any]:
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:  # child: never returns into pytest
            status = 1
            try:
                os.close(read_fd)
                sys.stdout = os.fdopen(write_fd, "w")
                os.setgroups([])
                os.setresgid(uid, uid, uid)
                os.setresuid(uid, uid, uid)
                payload = dict(args, _ansible_check_mode=check_mode, _ansible_diff=False)
                basic._ANSIBLE_ARGS = json.dumps({"ANSIBLE_MODULE_ARGS": payload}).encode()
                basic._ANSIBLE_PROFILE = "legacy"
                for name in ("_global_warnings", "_global_deprecations"):
                    setattr(ansible_warnings, name, type(getattr(ansible_warnings, name))())
                if module_internals is not None:
                    module_internals.is_controller = False
                try:
                    module.main()
                except SystemExit:
                    status = 0
            finally:
                sys.stdout.flush()
                os._exit(status)
        os.close(write_fd)
        with os.fdopen(read_fd) as pipe:
            out = pipe.read()
        _pid, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, out
        result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
        return result

    return run


COLLECTIONS = Path(__file__).resolve().parents[4] / ".venv" / "collections"


@pytest.fixture
def run_module_fresh(tmp_path: Path) -> ModuleRunner:
    """``run_module_fresh(module, args, check_mode=False)``: the module run as ansible-core runs
    it, in a new interpreter, for what a loaded library would hide in this process (dlopen
    answers a later request by soname once a library with that soname is loaded)."""

    def run(module: ModuleType, args: dict[str, Any], check_mode: bool = False) -> dict[str, Any]:
        arguments = tmp_path / f"{module.__name__.rsplit('.', 1)[-1]}-args.json"
        payload = dict(args, _ansible_check_mode=check_mode)
        arguments.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": payload}))
        completed = subprocess.run(
            [sys.executable, "-m", module.__name__, str(arguments)],
            env={**os.environ, "PYTHONPATH": str(COLLECTIONS), "LD_LIBRARY_PATH": ""},
            capture_output=True,
            text=True,
            check=False,
        )
        result: dict[str, Any] = json.loads(completed.stdout.strip().splitlines()[-1])
        return result

    return run
