"""The Allocate answer applied the way a container runtime applies it (tests/simulator/minirun):
the workload's dcu-probe sees exactly the granted partition, and nothing without its conf."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import simnode
from plugin_harness import Harness, root_only

pytestmark = root_only


def run_in_container(harness: Harness, spec: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(simnode.MINIRUN_PATH), str(spec), "--", "dcu-probe"],
        env=harness.sim.env(),
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("profile", "cus", "mib"), [("2g.15gb", 20, 16380), ("4g.31gb", 40, 32760)]
)
def test_probe_sees_exactly_the_granted_partition(
    harness: Harness, tmp_path: Path, profile: str, cus: int, mib: int
) -> None:
    harness.admit("other", "2g.15gb")  # a second live partition the container must not see
    response = harness.admit("a", profile)
    uuid = response.envs["DMI_MIG_VISIBLE_DEVICE"].removeprefix("MIG-")
    result = run_in_container(harness, harness.spec_file(response, tmp_path / "spec.json"))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 1, lines
    assert "kind=partition" in lines[0]
    assert f"cu_count={cus} memory_mib={mib} mig_uuid={uuid}" in lines[0]


def test_probe_sees_nothing_without_the_conf_mount(harness: Harness, tmp_path: Path) -> None:
    response = harness.admit("a", "2g.15gb")
    conf = [m for m in response.mounts if m.container_path.startswith("/etc/dmi_mig_config/")]
    assert len(conf) == 1
    response.mounts.remove(conf[0])
    result = run_in_container(harness, harness.spec_file(response, tmp_path / "spec.json"))
    assert result.stdout.strip() == "No HIP GPUs are available"
    assert result.returncode == 1


def test_each_slice_container_sees_only_its_own_slice(
    slice_harness: Harness, tmp_path: Path
) -> None:
    first = slice_harness.admit_slice("a", 16 * 1024)
    second = slice_harness.admit_slice("b", 24 * 1024)
    seen = []
    for name, response in (("a", first), ("b", second)):
        spec = slice_harness.spec_file(response, tmp_path / f"{name}.json")
        result = run_in_container(slice_harness, spec)
        assert result.returncode == 0, result.stderr
        lines = result.stdout.splitlines()
        assert len(lines) == 1 and "kind=vdev" in lines[0], lines
        seen.append(lines[0])
    grants = {g.pod_name: g for g in slice_harness.runtime.store.load().slices}
    for line, pod in zip(seen, ("a", "b"), strict=True):
        grant = grants[pod]
        assert (
            f"cu_count={grant.compute_units} memory_mib={grant.memory_mib} "
            f"vdev_id={grant.vdev_id} card=0"
        ) in line
    assert grants["a"].memory_mib == 16 * 1024 and grants["b"].memory_mib == 24 * 1024
