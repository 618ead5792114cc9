"""What an operator's first runs meet: a target that names no host, a renamed variable, a node
Python that is too old, the per-node summary and the progress of a long wait."""

from __future__ import annotations

import glob
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import simnode

from .runner import node_vars, run_playbook

NODE_PLAYBOOKS = ["enable_mig", "disable_mig", "reboot_recovery", "converge", "label_nodes"]


def final_failure(output_messages: list[str], output: str) -> str:
    assert output_messages, output
    return output_messages[-1]


@pytest.mark.parametrize("playbook", NODE_PLAYBOOKS)
def test_a_target_that_names_no_host_fails_and_names_it(playbook: str) -> None:
    run = run_playbook(playbook, extra_vars={"target": "nosuchhost"})

    assert run.returncode != 0, run.output
    message = final_failure(run.failure_messages(), run.output)
    assert "target 'nosuchhost' matches no host" in message
    assert f"hygon.dcu.{playbook}" in message


def test_a_target_outside_the_limit_fails_and_names_both() -> None:
    run = run_playbook(
        "enable_mig",
        "--limit",
        "gpu-node-8",
        inventory="localhost,gpu-node-8,",
        extra_vars={"target": "localhost"},
    )

    assert run.returncode != 0, run.output
    assert "target 'localhost' matches no host" in run.output
    assert "(localhost,gpu-node-8,) within --limit 'gpu-node-8'" in run.output


def test_converge_refuses_an_inventory_without_its_default_group(tmp_path: Path) -> None:
    inventory = tmp_path / "hosts.ini"
    inventory.write_text("[gpu_nodes]\nlocalhost\n")

    run = run_playbook("converge", inventory=str(inventory))

    assert run.returncode != 0, run.output
    assert "target 'hygon_dcu_nodes' matches no host" in run.failure_messages()[-1]


def test_running_nothing_takes_an_explicit_variable() -> None:
    run = run_playbook(
        "enable_mig", extra_vars={"target": "!all", "hygon_dcu_allow_no_hosts": "true"}
    )

    assert run.returncode == 0, run.output
    assert "matches no host and hygon_dcu_allow_no_hosts is true: nothing to do" in run.output


def test_the_old_namespace_variable_is_refused_with_its_new_name(
    sim_node: simnode.SimNode,
) -> None:
    run = run_playbook(
        "enable_mig",
        extra_vars=node_vars(sim_node, hygon_dcu_plugin_namespace="dcu-system"),
    )

    assert run.returncode != 0, run.output
    message = run.failure_messages()[-1]
    assert (
        "hygon_dcu_plugin_namespace is set ('dcu-system') but was renamed hygon_dcu_namespace"
        in (" ".join(message.split()))
    )
    assert sim_node.status().mode == 0


def _python38() -> str | None:
    found = sorted(glob.glob(str(Path.home() / ".pyenv/versions/3.8.*/bin/python3.8")))
    return found[0] if found else None


@pytest.mark.skipif(_python38() is None, reason="no Python 3.8 interpreter (pyenv) on this machine")
def test_a_node_python_older_than_the_floor_is_refused_in_one_line(
    sim_node: simnode.SimNode,
) -> None:
    python38 = _python38()
    run = run_playbook(
        "enable_mig", extra_vars=node_vars(sim_node, ansible_python_interpreter=python38)
    )

    assert run.returncode != 0, run.output
    message = run.failure_messages()[-1]
    assert message.startswith("localhost: node Python 3.8.")
    assert f"({python38}) is older than 3.9" in message
    assert "Traceback" not in run.output and "ABCMeta" not in run.output
    assert sim_node.status().mode == 0
    assert sim_node.ops() == []


def test_the_per_node_summary_is_printed_without_custom_stats(sim_node: simnode.SimNode) -> None:
    run = run_playbook("enable_mig", extra_vars=node_vars(sim_node), show_custom_stats=False)

    assert run.returncode == 0, run.output
    assert "CUSTOM STATS" not in run.output
    assert (
        "localhost: changed, mode disabled -> enabled (requested enabled); changes: mode enabled;"
        in (" ".join(run.output.split()))
    )


def test_a_long_wait_for_kfd_holders_prints_each_poll(
    sim_node: simnode.SimNode, kfd_holder: Callable[[Path], Any]
) -> None:
    kfd_holder(sim_node.kfd)

    run = run_playbook("enable_mig", extra_vars=node_vars(sim_node, hygon_dcu_holders_timeout=3))

    assert run.returncode != 0
    polls = [
        line
        for line in run.output.splitlines()
        if line.startswith("FAILED - RETRYING: [localhost]: Wait until no process holds /dev/kfd")
    ]
    assert len(polls) == 3, run.output
    assert "still hold /dev/kfd after 3 s" in run.failure_messages()[-1]
