"""Prepare ansible-test to bootstrap pip without reaching its download host.

ansible-test builds one venv per sanity test and fetches a pip bootstrap script from a host our
machines (and air-gapped sites) cannot reach. It first looks for that script in its cache, so we
put a stand-in there that installs pip from the matching pip wheel, taken from the PyPI mirror.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

STAND_IN = '''\
"""Offline stand-in for the pip bootstrap script (written by hygon.dcu's test tooling)."""
import sys

sys.path.insert(0, {wheel!r})
from pip._internal.cli.main import main  # noqa: E402

args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
sys.exit(main(["install", "--no-index", "--find-links", {wheel_dir!r}, *args]))
'''


def required_pip_version() -> str:
    requirements = importlib.import_module("ansible_test._internal.python_requirements")
    config = type("Python", (), {"version": f"{sys.version_info.major}.{sys.version_info.minor}"})
    return str(requirements.get_venv_packages(config)["pip"])


def main() -> int:
    version = required_pip_version()
    cache = Path.home() / ".ansible" / "test" / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    wheel = cache / f"pip-{version}-py3-none-any.whl"
    if not wheel.exists():
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--only-binary=:all:",
                "--dest",
                str(cache),
                f"pip=={version}",
            ],
            check=True,
        )
    script = cache / f"get_pip_{version.replace('.', '_')}.py"
    script.write_text(STAND_IN.format(wheel=str(wheel), wheel_dir=str(cache)))
    print(f"ansible-test pip bootstrap: {script} -> {wheel.name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
