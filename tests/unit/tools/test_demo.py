"""The README's first command, end to end: `bash tests/tools/demo.sh` shows both halves.

The demo runs once for the module (on a node in a temporary directory); each test checks one
claim in what it printed, and where possible in what it left behind (the simulated driver's
ops log, the plugin's log, the processes still running).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
DEMO = REPO / "tests" / "tools" / "demo.sh"
# The demo takes 3-5 minutes on a loaded 2-core machine (three playbook runs, the venv check);
# a hung one fails here, with its output, before pytest-timeout would kill it without.
DEMO_TIMEOUT = 900

pytestmark = [pytest.mark.slow, pytest.mark.timeout(DEMO_TIMEOUT + 120)]
STEP = re.compile(r"^\[demo \d\d:\d\d:\d\d\] (\d+)/(\d+) ", re.MULTILINE)
RECAP = re.compile(r"^ +recap: localhost ok=\d+ +changed=(\d+) +unreachable=0 +failed=(\d+)", re.M)
GRANT = re.compile(
    r"the plugin chose \(.*\): card=(?P<card>\S+) placement=(?P<placement>\d+:\d+) "
    r"profile=(?P<profile>\S+) uuid=(?P<uuid>[0-9a-f-]{36})$",
    re.MULTILINE,
)
PROBE = re.compile(
    r"^ +device 0 kind=partition pci=(?P<pci>\S+) cu_count=(?P<cus>\d+) "
    r"memory_mib=(?P<mib>\d+) mig_uuid=(?P<uuid>[0-9a-f-]{36}) ",
    re.MULTILINE,
)
SLICE_GRANT = re.compile(
    r"^ +pod demo/(?P<pod>\S+) \(hygon\.com/dcu\.sliced\.memory-mib: (?P<asked>\d+)\): the "
    r"plugin created vdev (?P<vdev>\d+) on card (?P<card>\S+), (?P<cus>\d+) compute units, "
    r"(?P<mib>\d+) MiB$",
    re.MULTILINE,
)
VDEV_PROBE = re.compile(
    r"^ +device 0 kind=vdev pci=(?P<pci>\S+) cu_count=(?P<cus>\d+) memory_mib=(?P<mib>\d+) "
    r"vdev_id=(?P<vdev>\d+) card=(?P<card>\d+)$",
    re.MULTILINE,
)
LGI_HEADER = re.compile(r"^ +GPU +GI_ID +PROFILE_ID +PROFILE +PLACEMENT$", re.MULTILINE)
LGI_ROW = re.compile(r"^ +\d+ +\d+ +\d+ +\S+ +\d+:\d+$", re.MULTILINE)


@dataclass
class Run:
    returncode: int
    output: str
    node: Path

    def step(self, number: int) -> str:
        """The output of step NUMBER (its header line up to the next step's header)."""
        starts = [(int(m.group(1)), m.start()) for m in STEP.finditer(self.output)]
        for i, (n, start) in enumerate(starts):
            if n == number:
                end = starts[i + 1][1] if i + 1 < len(starts) else len(self.output)
                return self.output[start:end]
        raise AssertionError(f"no step {number} in the demo's output:\n{self.output}")

    @property
    def granted(self) -> re.Match[str]:
        match = GRANT.search(self.step(5))
        assert match, self.step(5)
        return match


def run_demo(node: Path) -> Run:
    process = subprocess.Popen(
        ["bash", str(DEMO)],
        cwd=REPO,
        env={**os.environ, "HYGON_DCU_DEMO_NODE": str(node)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        output, _ignored = process.communicate(timeout=DEMO_TIMEOUT)
    except subprocess.TimeoutExpired:
        # SIGTERM, not SIGKILL: the demo's trap then stops what it started.
        process.send_signal(signal.SIGTERM)
        output, _ignored = process.communicate(timeout=60)
        pytest.fail(f"demo.sh took over {DEMO_TIMEOUT}s:\n{output}")
    return Run(process.returncode, output, node)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return run_demo(tmp_path_factory.mktemp("demo") / "node")


def test_the_demo_succeeds_through_its_numbered_steps(demo: Run) -> None:
    assert demo.returncode == 0, demo.output
    steps = [(int(m.group(1)), int(m.group(2))) for m in STEP.finditer(demo.output)]
    assert steps == [(n, 12) for n in range(1, 13)], demo.output
    assert "demo finished" in demo.output.splitlines()[-1]


def test_enable_changes_the_node_and_a_second_run_changes_nothing(demo: Run) -> None:
    first, second = RECAP.findall(demo.step(1)), RECAP.findall(demo.step(2))
    assert len(first) == 1 and len(second) == 1, demo.output
    assert int(first[0][0]) >= 1 and first[0][1] == "0", first
    assert second[0] == ("0", "0"), second
    # Before the plugin: mode on, no instance, and a workload sees no device.
    step3 = demo.step(3)
    assert LGI_HEADER.search(step3) and not LGI_ROW.search(step3), step3
    assert "No HIP GPUs are available" in step3


def test_the_real_plugin_registers_with_the_kubelet(demo: Run) -> None:
    step4 = demo.step(4)
    # Two c3000-bw cards of four 1-slice placements each.
    assert re.search(r"^ +hygon\.com/dcu\.partitioned: 8$", step4, re.MULTILINE), step4
    assert re.search(r"^ +hygon\.com/dcu\.partitioned\.mig-2g\.15gb: 8$", step4, re.M), step4
    assert f'host_root: "{demo.node}"' in step4 and f'answer_root: "{demo.node}"' in step4


def test_allocate_carves_the_partition_the_plugin_chose(demo: Run) -> None:
    step5, grant = demo.step(5), demo.granted
    assert grant["profile"] == "2g.15gb"
    assert f"env DMI_MIG_VISIBLE_DEVICE=MIG-{grant['uuid']}" in step5
    rows = LGI_ROW.findall(step5)
    assert len(rows) == 1 and " 2g.15gb " in rows[0], step5
    assert rows[0].split()[-1] == grant["placement"], (rows, grant)
    # The driver's own log: the plugin created exactly this compute instance.
    ops = (demo.node / ".sim" / "ops.log").read_text()
    assert f"uuid={grant['uuid']}" in ops, ops


def test_the_workload_sees_exactly_the_granted_partition(demo: Run) -> None:
    step6, grant = demo.step(6), demo.granted
    devices = [line for line in step6.splitlines() if line.lstrip().startswith("device ")]
    assert len(devices) == 1, step6
    probe = PROBE.search(step6)
    assert probe, step6
    assert probe["uuid"] == grant["uuid"]
    assert probe["pci"] == grant["card"]
    assert (probe["cus"], probe["mib"]) == ("20", "16380")
    if os.geteuid() == 0:
        assert "minirun container-spec.json -- dcu-probe" in step6


def test_the_plugin_reclaims_the_partition_when_the_pod_ends(demo: Run) -> None:
    step7, uuid = demo.step(7), demo.granted["uuid"]
    assert f"partition reclaimed uuid={uuid} (pod Succeeded)" in step7, step7
    assert LGI_HEADER.search(step7) and not LGI_ROW.search(step7), step7
    assert "device plugin stopped (SIGTERM, exit 0)" in step7
    # The driver's log: that instance's GPU instance destroyed after its create (step 7 showed
    # it gone before disable_mig ran), and the plugin's log: by the reclaimer.
    ops = (demo.node / ".sim" / "ops.log").read_text().splitlines()
    created = next(i for i, line in enumerate(ops) if f"uuid={uuid}" in line)
    card, gpu_instance = ops[created].split()[1:3]
    assert f"destroy_gi {card} {gpu_instance}" in ops[created:], ops
    plugin_log = Path(f"{demo.node}.logs", "plugin.log").read_text()
    assert '"msg": "partition reclaimed"' in plugin_log and uuid in plugin_log


def test_disable_runs_and_the_mode_is_off(demo: Run) -> None:
    step8 = demo.step(8)
    recaps = RECAP.findall(step8)
    assert len(recaps) == 1 and int(recaps[0][0]) >= 1 and recaps[0][1] == "0", step8
    assert "MIG mode: Disabled" in step8
    assert not (demo.node / "etc" / "dmi_mig_config").exists()


def test_every_process_the_demo_started_is_gone(demo: Run) -> None:
    state = re.search(r'device_plugin_dir: "(/tmp/hygon-demo\.[^/]+)/', demo.step(4))
    assert state, demo.step(4)
    assert not Path(state[1]).exists()
    left = []
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if state[1] in cmdline or str(demo.node) in cmdline:
            left.append(f"{proc.name}: {cmdline}")
    assert not left, left


def test_with_the_mode_off_the_plugin_serves_whole_cards_and_slices(demo: Run) -> None:
    step9 = demo.step(9)
    assert re.search(r"^ +hygon\.com/dcu: 2$", step9, re.MULTILINE), step9
    assert re.search(r"^ +hygon\.com/dcu\.sliced: 8$", step9, re.MULTILINE), step9
    assert re.search(r"^ +hygon\.com/dcu\.partitioned: 0$", step9, re.MULTILINE), step9


def test_two_slices_share_one_card_and_each_container_sees_only_its_own(demo: Run) -> None:
    grants = {m["pod"]: m for m in SLICE_GRANT.finditer(demo.step(10))}
    assert set(grants) == {"notebook-a", "notebook-b"}, demo.step(10)
    assert len({g["card"] for g in grants.values()}) == 1
    assert {g["asked"] for g in grants.values()} == {g["mib"] for g in grants.values()}
    assert "/etc/vdev/docker/vdev" in demo.step(10)
    probes = list(VDEV_PROBE.finditer(demo.step(11)))
    assert len(probes) == 2, demo.step(11)
    seen = {(p["vdev"], p["cus"], p["mib"], p["pci"]) for p in probes}
    assert seen == {(g["vdev"], g["cus"], g["mib"], g["card"]) for g in grants.values()}


def test_the_slices_go_when_their_pods_end(demo: Run) -> None:
    step12 = demo.step(12)
    assert step12.count("slice reclaimed vdev=") == 2, step12
    assert "(pod Succeeded)" in step12
    assert "device plugin stopped (SIGTERM, exit 0)" in step12
    # The driver's own record: no vdev left.
    assert (demo.node / ".sim" / "vdevs").read_text().strip() == ""
