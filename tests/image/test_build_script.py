"""plugin_image/tools/build_image.sh as a site runs it: the report it prints, and the archive
it writes for nodes without registry access (docs/image.md)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import tarfile
from pathlib import Path

import pytest

from .conftest import BUILD_SCRIPT, podman_env

pytestmark = pytest.mark.image


def test_build_prints_size_and_packages_and_saves_an_importable_archive(
    image: str, tmp_path: Path
) -> None:
    archive = tmp_path / "hygon-dcu-plugin.tar"
    base = os.environ.get("HYGON_DCU_BASE_IMAGE", "local")
    result = subprocess.run(
        [str(BUILD_SCRIPT), "--tag", image, "--base", base, "--save", str(archive)],
        env=podman_env(),
        capture_output=True,
        text=True,
        check=False,
        timeout=1800,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    size = re.search(rf"^image {re.escape(image)}: size (\d+) bytes \(\d+ MiB\)$", out, re.M)
    assert size and int(size.group(1)) > 0, out[:2000]
    debian = out.split("Debian packages in", 1)[1].split("Python distributions in", 1)[0]
    python = out.split("Python distributions in", 1)[1]
    assert re.search(r"^  python3 \S+$", debian, re.M)
    assert not re.search(r"^  (gcc|python3-pip|python3-venv) ", debian, re.M)
    for distribution in ("hygon-dcu-plugin", "grpcio", "kubernetes"):
        assert re.search(rf"^  {distribution} \S+$", python, re.M), distribution
    assert not re.search(r"^  pip ", python, re.M)

    # ctr -n k8s.io images import takes the name from the index's ref.name annotation
    with tarfile.open(archive) as tar:
        member = tar.extractfile("index.json")
        assert member is not None
        index = json.load(member)
    (manifest,) = index["manifests"]
    assert manifest["annotations"]["org.opencontainers.image.ref.name"] == image
