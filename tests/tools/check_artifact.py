"""Check what the built collection tarball ships: the product, nothing a build or venv left."""

from __future__ import annotations

import sys
import tarfile

REQUIRED = (
    "MANIFEST.json",
    "FILES.json",
    "README.md",
    "meta/runtime.yml",
    "meta/execution-environment.yml",
    "plugins/modules/",
    "plugins/module_utils/",
    "plugins/filter/",
    "roles/mig_node/",
    "roles/device_plugin/",
    "playbooks/",
    "plugin_image/Containerfile",
    "plugin_image/src/hygon_dcu_plugin/",
    "docs/",
    "LICENSE",
    "awx/surveys/",
    "roles/device_plugin/templates/monitoring/",
    "tools/static_manifests.sh",
)
FORBIDDEN_PARTS = (
    ".venv/",
    ".build/",
    "__pycache__/",
    ".mypy_cache/",
    ".ruff_cache/",
    ".pytest_cache/",
    ".hypothesis/",
    "tests/output/",
    "tests/simulator/build/",
    ".git/",
    ".tar.gz",
)


def main(path: str) -> int:
    with tarfile.open(path) as tar:
        names = [m.name + ("/" if m.isdir() else "") for m in tar.getmembers()]
    problems = []
    for wanted in REQUIRED:
        if not any(n == wanted or n.startswith(wanted) for n in names):
            problems.append(f"missing from the artifact: {wanted}")
    for name in names:
        for part in FORBIDDEN_PARTS:
            if part in name or name.endswith(".pyc"):
                problems.append(f"must not ship: {name}")
                break
    for line in problems:
        print(line)
    print(f"{path}: {len(names)} entries, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
