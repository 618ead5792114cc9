"""The mig_node role run for real (ansible-playbook) against simulated nodes, Kubernetes off.

Each test is one to three playbook runs: check mode, the failure paths (a /dev/kfd
holder that never leaves, hy-smi refusing, an instance held during disable) and what the
failure message says about the node afterwards, checked against the simulator's own state.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import simnode
import yaml

from .runner import REPO, PlaybookRun, node_vars, run_playbook

VENDOR_BUSY = "Error: Set system level mig mode failed. The device is exist and may be in use."


def hy_smi(node: simnode.SimNode, *args: str) -> str:
    """The simulator's hy-smi, used to set a node up without going through the role."""
    proc = subprocess.run(
        [str(simnode.HY_SMI_PATH), *args],
        env=node.env(),
        capture_output=True,
        text=True,
        check=True,
    )
    return proc.stdout


def task_result(run: PlaybookRun, task: str) -> str:
    """The result line ansible printed for the first task named ``task``."""
    lines = run.output.splitlines()
    for index, line in enumerate(lines):
        if line.startswith("TASK [") and f": {task}]" in line:
            for result in lines[index + 1 :]:
                if result.startswith(("ok:", "changed:", "skipping:", "fatal:")):
                    return result
    raise AssertionError(f"task {task!r} not found in:\n{run.output}")


def final_failure(run: PlaybookRun) -> str:
    messages = run.failure_messages()
    assert messages, run.output
    return messages[-1]


@pytest.mark.floor
def test_check_mode_predicts_the_change_and_leaves_the_node_alone(
    sim_node: simnode.SimNode,
) -> None:
    # Every value as a string: that is how AWX survey answers and -e key=value arrive.
    as_strings = {
        key: value if isinstance(value, dict) else str(value).lower()
        for key, value in node_vars(
            sim_node, hygon_dcu_holders_timeout=5, hygon_dcu_serial=1
        ).items()
    }
    assert as_strings["hygon_dcu_manage_kubernetes"] == "false"

    check = run_playbook("enable_mig", "--check", extra_vars=as_strings)
    assert check.returncode == 0, check.output
    assert task_result(check, "Switch the partition mode with hy-smi").startswith("changed:")
    status = sim_node.status()
    assert status.mode == 0
    assert sim_node.ops() == []
    assert not sim_node.registry_dir.exists()

    real = run_playbook("enable_mig", extra_vars=as_strings)
    assert real.returncode == 0, real.output
    assert real.changed == check.changed
    assert sim_node.status().mode == 1
    # The set_stats summary (AWX job artifacts), printed with ANSIBLE_SHOW_CUSTOM_STATS.
    stats = real.output.split("CUSTOM STATS:", 1)[1]
    assert '"mode_before": "disabled"' in stats
    assert '"mode_after": "enabled"' in stats
    assert '"outcome": "changed"' in stats
    assert sim_node.registry_dir.is_dir()

    # The fleet playbook (entry point main, mode from the variable) now has nothing to do.
    again = run_playbook(
        "converge", "--check", extra_vars={**as_strings, "hygon_dcu_mig_state": "enabled"}
    )
    assert again.returncode == 0, again.output
    assert again.changed == 0
    assert "partition mode is already enabled; nothing to do" in again.output


def test_a_kfd_holder_that_never_leaves_times_out_with_the_node_described(
    sim_node: simnode.SimNode, kfd_holder: Callable[[Path], Any]
) -> None:
    holder = kfd_holder(sim_node.kfd)

    run = run_playbook("enable_mig", extra_vars=node_vars(sim_node, hygon_dcu_holders_timeout=2))

    assert run.returncode != 0
    message = final_failure(run)
    assert "stage 'wait for /dev/kfd holders' failed" in message
    assert f"pid {holder.pid}" in message
    assert "NODE STATE: partition mode disabled" in message
    assert "was disabled before the run" in message
    assert "device plugin not managed" in message
    assert "The mode is consistent" in message
    assert sim_node.status().mode == 0
    assert sim_node.ops() == []


def test_hy_smi_refusing_leaves_the_mode_and_says_so(sim_node: simnode.SimNode) -> None:
    # The vendor refusal seen when a holder hides from /proc (e.g. another PID namespace).
    sim_node.hysmi_output(VENDOR_BUSY, exit_code=1)

    run = run_playbook("enable_mig", extra_vars=node_vars(sim_node))

    assert run.returncode != 0
    message = final_failure(run)
    assert "stage 'switch mode' failed" in message
    assert "NODE STATE: partition mode disabled" in message
    assert "The mode is consistent" in message
    assert sim_node.status().mode == 0


def test_a_switch_that_reports_an_error_but_happened_is_described_as_happened(
    sim_node: simnode.SimNode,
) -> None:
    sim_node.hysmi_output("Error: unexpected driver answer", exit_code=1, apply=True)

    run = run_playbook("enable_mig", extra_vars=node_vars(sim_node))

    assert run.returncode != 0
    message = final_failure(run)
    assert sim_node.status().mode == 1
    assert "stage 'switch mode' failed" in message
    assert "NODE STATE: partition mode enabled" in message
    assert "was disabled before the run" in message


def test_an_instance_held_during_disable_is_reported_and_kept(
    sim_node: simnode.SimNode, kfd_holder: Callable[[Path], Any]
) -> None:
    hy_smi(sim_node, "-mig", "1")
    hy_smi(sim_node, "mig", "-cgi", "2g.15gb", "-C", "-i", "0")
    (instance,) = sim_node.status().compute_instances
    # A workload uses its partition through the conf file (the simulator's IN_USE rule).
    kfd_holder(sim_node.ci_conf(instance.card, instance.gpu_instance_id))

    run = run_playbook("disable_mig", extra_vars=node_vars(sim_node, hygon_dcu_instances_timeout=2))

    assert run.returncode != 0
    message = final_failure(run)
    assert "stage 'destroy instances' failed" in message
    assert "NODE STATE: partition mode enabled" in message
    assert "1 instance(s) remain" in message
    assert instance.uuid in message
    assert "still in use after 2 s" in message
    # One pass per poll, each printed.
    assert (
        run.output.count("FAILED - RETRYING: [localhost]: Destroy every instance on the node") == 2
    )
    assert sim_node.status().mode == 1
    assert [ci.uuid for ci in sim_node.status().compute_instances] == [instance.uuid]


def test_enable_destroys_leftover_slices_before_the_switch_and_check_mode_predicts_it(
    sim_node: simnode.SimNode,
) -> None:
    for card, cus, mib in ((0, "20,20", "16384,8192"), (1, "40", "32768")):
        assert sim_node.create_vdevs(card, cus, mib).returncode == 0
    assert len(sim_node.status().vdevs) == 3

    check = run_playbook("enable_mig", "--check", extra_vars=node_vars(sim_node))
    assert check.returncode == 0, check.output
    assert task_result(check, "Destroy every logical slice on the node").startswith("changed:")
    # The slices are still there in check mode, so mig_mode would refuse: the run has
    # predicted its change already and skips it, as it does for instances.
    assert task_result(check, "Switch the partition mode with hy-smi").startswith("skipping:")
    assert len(sim_node.status().vdevs) == 3 and sim_node.status().mode == 0

    real = run_playbook("enable_mig", extra_vars=node_vars(sim_node))
    assert real.returncode == 0, real.output
    assert task_result(real, "Destroy every logical slice on the node").startswith("changed:")
    assert task_result(real, "Switch the partition mode with hy-smi").startswith("changed:")
    assert sim_node.status().vdevs == [] and sim_node.status().mode == 1
    assert not (sim_node.root / "etc/vdev/vdev0.conf").exists()
    stats = real.output.split("CUSTOM STATS:", 1)[1]
    assert "logical slices destroyed" in stats

    again = run_playbook("enable_mig", extra_vars=node_vars(sim_node))
    assert again.returncode == 0 and again.changed == 0, again.output


def test_a_slice_held_during_enable_is_reported_and_kept_and_nothing_switched(
    sim_node: simnode.SimNode, kfd_holder: Callable[[Path], Any]
) -> None:
    assert sim_node.create_vdevs(1, "40", "32768").returncode == 0
    (vdev,) = sim_node.status().vdevs
    holder = kfd_holder(sim_node.root / f"etc/vdev/vdev{vdev.id}.conf")

    run = run_playbook("enable_mig", extra_vars=node_vars(sim_node, hygon_dcu_instances_timeout=2))

    assert run.returncode != 0
    message = final_failure(run)
    assert "stage 'destroy logical slices' failed" in message
    assert f"vdev {vdev.id} on card 1 (40 CUs, 32768 MiB" in message
    assert "still in use after 2 s" in message
    assert "1 logical slice(s) remain" in message
    assert "NODE STATE: partition mode disabled" in message
    assert "The mode is consistent" in message
    assert [v.id for v in sim_node.status().vdevs] == [vdev.id]
    assert sim_node.status().mode == 0
    holder.release()


def test_slices_that_cannot_be_listed_are_refused_in_preflight(sim_node: simnode.SimNode) -> None:
    assert sim_node.create_vdevs(0, "20", "16384").returncode == 0
    (sim_node.root / "opt/hyhal/lib/libhydmi.so").unlink()

    run = run_playbook("enable_mig", extra_vars=node_vars(sim_node))

    assert run.returncode != 0
    message = final_failure(run)
    assert "the logical slices cannot be listed (" in message
    assert "LIBRARY_NOT_FOUND" in message and "/etc/vdev/vdev0.conf exist" in message
    assert "Nothing was changed" in message
    assert sim_node.status().mode == 0 and len(sim_node.status().vdevs) == 1


def test_recover_sweeps_poison_and_fails_on_a_mode_the_inventory_does_not_want(
    sim_node: simnode.SimNode,
) -> None:
    hy_smi(sim_node, "-mig", "1")
    # What a container runtime leaves when asked to bind a conf file that does not exist.
    poison = sim_node.ci_dir / "dev0gi4ci0.conf"
    poison.mkdir(parents=True)

    run = run_playbook(
        "reboot_recovery", extra_vars=node_vars(sim_node, hygon_dcu_mig_state="disabled")
    )

    assert run.returncode != 0
    assert not poison.exists()
    message = final_failure(run)
    assert "partition mode is enabled but the inventory wants disabled" in message
    assert "Nothing was switched" in message
    # The playbooks by the names an installed collection runs them with.
    assert "Run the playbook hygon.dcu.converge (or hygon.dcu.enable_mig" in message
    assert sim_node.status().mode == 1


@pytest.mark.floor
def test_recover_sweeps_only_empty_poison_keeps_instances_and_predicts_in_check_mode(
    sim_node: simnode.SimNode,
) -> None:
    hy_smi(sim_node, "-mig", "1")
    hy_smi(sim_node, "mig", "-cgi", "2g.15gb", "-C", "-i", "0")
    (instance,) = sim_node.status().compute_instances
    empty = sim_node.ci_dir / "dev0gi4ci0.conf"
    empty.mkdir()
    full = sim_node.ci_dir / "dev1gi5ci0.conf"
    full.mkdir()
    (full / "left-by-hand").write_text("x")
    variables = node_vars(sim_node, hygon_dcu_mig_state="enabled")

    check = run_playbook("reboot_recovery", "--check", extra_vars=variables)
    real = run_playbook("reboot_recovery", extra_vars=variables)

    for run in (check, real):
        assert run.returncode != 0, run.output
        message = final_failure(run)
        assert "1 poison director(ies) could not be removed" in message
        assert "/etc/dmi_mig_config/ci/dev1gi5ci0.conf (directory is not empty" in message
    assert task_result(check, "Sweep poison directories out of the registry").startswith("changed:")
    assert not empty.exists() and (full / "left-by-hand").exists()
    # Only poison is swept: the instance a pod may be using stays.
    assert [ci.uuid for ci in sim_node.status().compute_instances] == [instance.uuid]
    assert not [op for op in sim_node.ops() if op.startswith("destroy_")]

    (full / "left-by-hand").unlink()
    swept = run_playbook("reboot_recovery", extra_vars=variables)
    assert swept.returncode == 0, swept.output
    assert "actions: swept 1 poison director(ies)." in swept.output
    assert not full.exists()
    again = run_playbook("reboot_recovery", extra_vars=variables)
    assert again.returncode == 0, again.output
    assert again.changed == 0
    assert "actions: none." in again.output


def write_site_tasks(path: Path, log: Path, node: simnode.SimNode, fail: bool = False) -> str:
    """A site's task file: appends its name and the simulator's mode at that moment to ``log``."""
    tasks = [
        {
            "name": f"Record {path.stem}",
            "ansible.builtin.shell": (
                f'printf "%s mode=%s\\n" {path.stem} "$(cat {node.sim_dir / "mode"})" >> {log}'
            ),
            "changed_when": True,
        }
    ]
    if fail:
        tasks.append({"name": "Refuse", "ansible.builtin.fail": {"msg": "the site says no"}})
    path.write_text(yaml.safe_dump(tasks, sort_keys=False))
    return str(path)


def test_site_tasks_run_right_before_and_right_after_the_switch(
    sim_node: simnode.SimNode, tmp_path: Path
) -> None:
    log = tmp_path / "site.log"
    before = write_site_tasks(tmp_path / "before.yml", log, sim_node)
    after = write_site_tasks(tmp_path / "after.yml", log, sim_node)
    hooks = {"hygon_dcu_before_switch_tasks": before, "hygon_dcu_after_switch_tasks": after}

    run = run_playbook("enable_mig", extra_vars=node_vars(sim_node, **hooks))

    assert run.returncode == 0, run.output
    # The simulator's mode as each file saw it: off right before the switch, on right after.
    assert log.read_text().splitlines() == ["before mode=0", "after mode=1"]
    tasks = [line for line in run.output.splitlines() if line.startswith("TASK [")]
    order = [
        next(i for i, line in enumerate(tasks) if f": {name}]" in line)
        for name in (
            "Wait until no process holds /dev/kfd",
            "Record before",
            "Switch the partition mode with hy-smi",
            "Record after",
            "Print the run's summary",
        )
    ]
    assert order == sorted(order), tasks

    # Already enabled: nothing is switched, so neither file runs.
    again = run_playbook("enable_mig", extra_vars=node_vars(sim_node, **hooks))
    assert again.returncode == 0, again.output
    assert again.changed == 0
    assert len(log.read_text().splitlines()) == 2

    # An empty value runs nothing there.
    off = run_playbook(
        "disable_mig", extra_vars=node_vars(sim_node, hygon_dcu_after_switch_tasks=after)
    )
    assert off.returncode == 0, off.output
    assert task_result(off, "Run the site's tasks before the switch").startswith("skipping:")
    assert log.read_text().splitlines()[2:] == ["after mode=0"]
    assert sim_node.status().mode == 0


def test_a_failing_site_task_before_the_switch_stops_the_run_with_the_node_as_it_was(
    sim_node: simnode.SimNode, tmp_path: Path
) -> None:
    log = tmp_path / "site.log"
    hooks = {
        "hygon_dcu_before_switch_tasks": write_site_tasks(
            tmp_path / "before.yml", log, sim_node, fail=True
        ),
        "hygon_dcu_after_switch_tasks": write_site_tasks(tmp_path / "after.yml", log, sim_node),
    }

    run = run_playbook("enable_mig", extra_vars=node_vars(sim_node, **hooks))

    assert run.returncode != 0
    message = final_failure(run)
    assert "stage 'site tasks before the switch' failed in task 'Refuse': the site says no" in (
        message
    )
    assert "NODE STATE: partition mode disabled, was disabled before the run" in message
    assert "The mode was not switched" in message
    assert "The mode is consistent" in message
    assert log.read_text().splitlines() == ["before mode=0"]
    assert "Switch the partition mode with hy-smi" not in run.output
    assert sim_node.status().mode == 0
    assert sim_node.ops() == []
    assert not sim_node.registry_dir.exists()


def test_a_driver_without_virtualization_support_is_refused_before_anything_happens(
    sim_node_factory: Callable[..., simnode.SimNode],
) -> None:
    node = sim_node_factory(virtualization=False)

    run = run_playbook("enable_mig", extra_vars=node_vars(node))

    assert run.returncode != 0
    message = final_failure(run)
    assert "installed without virtualization support" in message
    assert "Nothing was changed" in message
    assert node.status().mode == 0
    assert node.ops() == []


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"hygon_dcu_poll_interval": "0"}, "hygon_dcu_poll_interval must be at least 1"),
        ({"hygon_dcu_full_drain": "maybe"}, "hygon_dcu_full_drain"),
        (
            {"hygon_dcu_before_switch_tasks": "site/before.yml"},
            "hygon_dcu_before_switch_tasks is 'site/before.yml': set it to the absolute path",
        ),
        (
            {"hygon_dcu_after_switch_tasks": "/no/such/after.yml"},
            "hygon_dcu_after_switch_tasks is '/no/such/after.yml': set it to the absolute path",
        ),
    ],
)
def test_bad_survey_answers_are_refused_before_anything_happens(
    sim_node: simnode.SimNode, overrides: dict[str, str], expected: str
) -> None:
    run = run_playbook("enable_mig", extra_vars=node_vars(sim_node, **overrides))

    assert run.returncode != 0
    assert expected in run.output
    assert sim_node.status().mode == 0


@pytest.mark.parametrize("hy_smi_path", ["{root}/opt/hyhal/bin/no-hy-smi", "no-such-hy-smi"])
def test_a_missing_hy_smi_is_refused_before_anything_happens(
    sim_node: simnode.SimNode, hy_smi_path: str
) -> None:
    run = run_playbook(
        "enable_mig",
        extra_vars=node_vars(
            sim_node, hygon_dcu_hy_smi_path=hy_smi_path.format(root=sim_node.root)
        ),
    )

    assert run.returncode != 0
    message = final_failure(run)
    assert "stage 'preflight' failed in task 'Require hy-smi'" in message
    assert "hy-smi was not found" in message
    assert "hygon_dcu_hy_smi_path" in message
    assert "Nothing was changed" in message
    assert sim_node.status().mode == 0


def test_converge_refuses_a_host_without_a_desired_mode(sim_node: simnode.SimNode) -> None:
    run = run_playbook("converge", extra_vars=node_vars(sim_node))

    assert run.returncode != 0
    assert "set it to 'enabled' or 'disabled'" in final_failure(run)
    assert sim_node.status().mode == 0


def test_a_missing_target_is_refused_with_the_fix(sim_node: simnode.SimNode) -> None:
    variables = node_vars(sim_node)
    del variables["target"]

    run = run_playbook("enable_mig", extra_vars=variables)

    assert run.returncode != 0
    assert "-e target=HOST_OR_GROUP" in final_failure(run)
    assert sim_node.status().mode == 0


def test_nothing_waits_for_a_person() -> None:
    # No prompts, no untimed pauses: AWX runs these unattended.
    files = [
        REPO / "playbooks" / f"{name}.yml"
        for name in ("enable_mig", "disable_mig", "reboot_recovery", "converge")
    ]
    files += sorted((REPO / "roles" / "mig_node").rglob("*.yml"))
    for path in files:
        text = path.read_text()
        assert "vars_prompt" not in text, path
        assert "pause" not in text, path
