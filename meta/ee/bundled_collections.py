"""The EE's Ansible collections without Galaxy: they come from PyPI's `ansible` package.

  bundled_collections.py extract REQUIREMENTS DEST   (builder stage)
      pip-installs the `ansible` package (the index is the build's pip configuration, see
      execution-environment.yml) into a scratch directory and copies out only the collections
      REQUIREMENTS (meta/ee-collections.yml, Galaxy's requirements format) lists, into
      DEST/ansible_collections/. The rest of the package (~90 collections) stays out of the image.
  bundled_collections.py check REQUIREMENTS          (final stage)
      fails unless `ansible-galaxy collection list` shows every listed collection at a version
      its requirement accepts, and hygon.dcu.

The `ansible` release is the newest pip finds, bounded by ANSIBLE_PACKAGE (build arg, default
"ansible>=11").
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml
from packaging.specifiers import SpecifierSet
from packaging.version import Version


def requirements(path: str) -> dict[str, SpecifierSet]:
    wanted = {}
    for entry in yaml.safe_load(Path(path).read_text())["collections"]:
        # Galaxy writes ">=5.0.0" or ">=1,<2" or "*"; packaging reads the same.
        spec = str(entry.get("version", "*")).replace(" ", "")
        wanted[entry["name"]] = SpecifierSet("" if spec == "*" else spec)
    return wanted


def check_version(name: str, version: str, spec: SpecifierSet) -> None:
    if Version(version) not in spec:
        sys.exit(f"{name} {version} does not satisfy {spec} (meta/ee-collections.yml)")


def extract(req_path: str, dest: str) -> None:
    wanted = requirements(req_path)
    package = os.environ.get("ANSIBLE_PACKAGE") or "ansible>=11"
    with tempfile.TemporaryDirectory() as scratch:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "-q",
                "--no-cache-dir",
                "--no-deps",
                "--target",
                scratch,
                package,
            ],
            check=True,
        )
        for name, spec in wanted.items():
            namespace, collection = name.split(".")
            source = Path(scratch, "ansible_collections", namespace, collection)
            manifest = source / "MANIFEST.json"
            if not manifest.is_file():
                sys.exit(f"{package} does not bundle {name}")
            version = json.loads(manifest.read_text())["collection_info"]["version"]
            check_version(name, version, spec)
            target = Path(dest, "ansible_collections", namespace, collection)
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(source, target)
            print(f"{name} {version} from {package}")


def check(req_path: str) -> None:
    wanted = requirements(req_path)
    wanted["hygon.dcu"] = SpecifierSet()
    listed = json.loads(
        subprocess.run(
            ["ansible-galaxy", "collection", "list", "--format", "json"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    )
    found = {name: info["version"] for path in listed.values() for name, info in path.items()}
    for name, spec in wanted.items():
        if name not in found:
            sys.exit(f"{name} is not installed in the EE")
        check_version(name, found[name], spec)
        print(f"{name} {found[name]}")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "extract":
        extract(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 3 and sys.argv[1] == "check":
        check(sys.argv[2])
    else:
        sys.exit(__doc__)
