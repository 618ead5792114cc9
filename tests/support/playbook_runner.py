"""The one way the suite runs Ansible: the venv's own ansible-playbook (and its sibling tools) as
a subprocess, the way operators run it, with one environment and one reading of the PLAY RECAP.

The role tests (tests/unit/roles/*) and the cluster tier (tests/cluster/e2e) build on this; each
keeps only what is its own (the device_plugin role's rendered manifests, the simulated nodes'
variables, the report's inventory).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
# The venv under test is the one running pytest: its tools, and its collections directory (the
# link to this repository) when it has one, as tests/tools/floor_test.sh sets up.
BIN = Path(sys.executable).parent
_VENV_COLLECTIONS = Path(sys.prefix) / "collections"
COLLECTIONS = (
    _VENV_COLLECTIONS
    if (_VENV_COLLECTIONS / "ansible_collections" / "hygon" / "dcu").exists()
    else REPO / ".venv" / "collections"
)
# A host name that needs no quoting or pattern syntax in an inventory or a --limit.
HOST_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
# One line of the PLAY RECAP: host, changed, failed.
RECAP = re.compile(r"^(\S+)\s*:\s*ok=\d+\s+changed=(\d+)\s+unreachable=\d+\s+failed=(\d+)", re.M)


def ansible_env(*, show_custom_stats: bool = False, **more: str) -> dict[str, str]:
    """The environment of every Ansible command of the suite: this checkout's collection, plain
    output, no retry files, the venv's tools first on PATH."""
    return {
        **os.environ,
        "ANSIBLE_COLLECTIONS_PATH": str(COLLECTIONS),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
        "ANSIBLE_LOCALHOST_WARNING": "0",
        "ANSIBLE_INVENTORY_UNPARSED_WARNING": "0",
        "ANSIBLE_RETRY_FILES_ENABLED": "0",
        "ANSIBLE_HOST_KEY_CHECKING": "0",
        "ANSIBLE_SHOW_CUSTOM_STATS": "1" if show_custom_stats else "0",
        "ANSIBLE_PIPELINING": "1",
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        **more,
    }


def recap(output: str) -> dict[str, tuple[int, int]]:
    """host -> (changed, failed), from the PLAY RECAP of an ansible-playbook run."""
    return {m.group(1): (int(m.group(2)), int(m.group(3))) for m in RECAP.finditer(output)}


@dataclass
class PlaybookRun:
    returncode: int
    output: str
    hosts: dict[str, tuple[int, int]]

    @property
    def changed(self) -> int | None:
        """changed= of localhost, None without a recap line for it."""
        return self.hosts["localhost"][0] if "localhost" in self.hosts else None

    @property
    def failed(self) -> int | None:
        return self.hosts["localhost"][1] if "localhost" in self.hosts else None

    @property
    def changed_total(self) -> int:
        """changed= summed over every host."""
        return sum(changed for changed, _failed in self.hosts.values())

    def failure_messages(self, host: str = "localhost") -> list[str]:
        """The ``msg`` of every task that failed on ``host`` (printed as JSON after ``=>``)."""
        messages = []
        for line in self.output.splitlines():
            if line.startswith(f"fatal: [{host}]: FAILED! => "):
                payload = json.loads(line.split("=> ", 1)[1])
                messages.append(str(payload.get("msg", "")))
        return messages


def run_playbook(
    args: Sequence[str],
    *,
    extra_vars: dict[str, Any] | None = None,
    env: dict[str, str] | None = None,
    cwd: Path = REPO,
    timeout: float | None = None,
) -> PlaybookRun:
    """``ansible-playbook ARGS [-e EXTRA_VARS as JSON]`` with :func:`ansible_env` unless ``env``
    is given; never raises for the playbook's own failure."""
    argv = [str(BIN / "ansible-playbook"), *args]
    if extra_vars:
        argv += ["-e", json.dumps(extra_vars)]
    proc = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        env=env if env is not None else ansible_env(),
        cwd=cwd,
        check=False,
        timeout=timeout,
    )
    output = proc.stdout + proc.stderr
    return PlaybookRun(returncode=proc.returncode, output=output, hosts=recap(output))


def run_playbook_on_hosts(
    args: Sequence[str],
    hosts: Mapping[str, Mapping[str, Any]],
    *,
    inventory: Path,
    extra_vars: dict[str, Any] | None = None,
    env: dict[str, str] | None = None,
    cwd: Path = REPO,
    timeout: float | None = None,
) -> PlaybookRun:
    """``ansible-playbook -i INVENTORY ARGS`` once for many cases: ``inventory`` (a ``.json``
    file) is written with one host per entry of ``hosts`` (on this machine, with the venv's
    Python, as the implicit localhost), the entry's variables as its host vars. Read each case
    back by its host: :attr:`PlaybookRun.hosts`, :meth:`PlaybookRun.failure_messages`. The play
    must target them (``hosts: all``, or its hosts variable in ``extra_vars``).

    ``extra_vars`` are for what every host shares: they override host vars, so a name given
    both ways is refused rather than silently taking the extra var's value."""
    for name in hosts:
        if not HOST_NAME.fullmatch(name):
            raise ValueError(f"{name!r} is not a plain host name ({HOST_NAME.pattern})")
    overridden = {var for variables in hosts.values() for var in variables} & set(extra_vars or {})
    if overridden:
        raise ValueError(f"extra vars would override the hosts' own: {sorted(overridden)}")
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    host_vars = {name: {**local, **variables} for name, variables in hosts.items()}
    # JSON is YAML the inventory plugin reads, and keeps each value's type exactly.
    inventory.write_text(json.dumps({"all": {"hosts": host_vars}}))
    return run_playbook(
        ["-i", str(inventory), *args], extra_vars=extra_vars, env=env, cwd=cwd, timeout=timeout
    )
