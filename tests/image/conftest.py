"""The image stage: build the device-plugin image and run it against a simulated node.

Run it as its own stage with tests/image/run.sh (installs podman/buildah when absent, builds the
image, then runs these tests); `pytest tests/image` alone builds the image first too.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CONTAINERS_CONF = REPO / "plugin_image" / "containers.conf"
BUILD_SCRIPT = REPO / "plugin_image" / "tools" / "build_image.sh"
IMAGE = os.environ.get("HYGON_DCU_TEST_IMAGE", "localhost/hygon-dcu-plugin:test")
# The kubelet emulator lives with the device plugin's protocol tests.
sys.path.insert(0, str(REPO / "tests" / "unit" / "plugin_image"))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "image: builds or runs the container image (own stage)")


def podman_env() -> dict[str, str]:
    return {
        **os.environ,
        "CONTAINERS_CONF": os.environ.get("CONTAINERS_CONF", str(CONTAINERS_CONF)),
    }


def podman(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        ["podman", *args],
        env=podman_env(),
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    if check and result.returncode != 0:
        raise AssertionError(
            f"podman {' '.join(args)}: {result.returncode}\n{result.stdout}\n{result.stderr}"
        )
    return result


@pytest.fixture(scope="session")
def image() -> str:
    if os.geteuid() != 0:
        pytest.skip("the image stage runs podman as root (see tests/image/run.sh)")
    if shutil.which("podman") is None:
        pytest.fail("podman is not installed: run tests/image/run.sh, which installs it")
    # run.sh has just built it; otherwise build now (layers are cached, so an unchanged tree
    # costs seconds) rather than test an image made from other files.
    if os.environ.get("HYGON_DCU_TEST_IMAGE_BUILT") != IMAGE:
        base = os.environ.get("HYGON_DCU_BASE_IMAGE", "local")
        subprocess.run(
            [str(BUILD_SCRIPT), "--tag", IMAGE, "--base", base],
            env=podman_env(),
            check=True,
            timeout=1800,
        )
    return IMAGE
