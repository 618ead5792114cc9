"""The Node's mode-switch state and capability labels on the real cluster, as a watch sees
them: a disable_mig that fails half-way (a site task fails right before the switch), then
one that succeeds, then an enable_mig.

Starts from what the molecule scenario left (partition mode on). Leaves: partition mode on,
the Node labelled success.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from e2e_support import Kube, Playbooks, SimNode

STATE = "hygon.com/dcu.mig.config.state"
MODE = "hygon.com/dcu.mig.mode"


def watch_state(kube: Kube) -> subprocess.Popen[str]:
    """kubectl's watch of the Node, printing the state label at every change of the object."""
    path = "{.metadata.labels." + STATE.replace(".", "\\.") + '}{"\\n"}'
    return subprocess.Popen(
        [
            kube.kubectl,
            "--kubeconfig",
            kube.kubeconfig,
            "get",
            "node",
            kube.node,
            "--watch",
            "-o",
            f"jsonpath={path}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )


def seen(watch: subprocess.Popen[str]) -> list[str]:
    """The values the watch printed, each run of equal values once."""
    watch.terminate()
    output, _ignored = watch.communicate(timeout=30)
    values: list[str] = []
    for line in output.splitlines():
        if line and (not values or values[-1] != line):
            values.append(line)
    return values


def test_the_state_label_follows_each_switch(
    kube: Kube, playbooks: Playbooks, cluster_sim: SimNode, tmp_path: Path
) -> None:
    assert cluster_sim.mode_on()
    assert kube.node_object()["metadata"]["labels"][STATE] == "success"
    failing = tmp_path / "fail_before_switch.yml"
    failing.write_text(
        "- name: Fail on purpose (the test's induced error)\n"
        "  ansible.builtin.fail:\n"
        "    msg: induced by test_22\n"
    )
    watch = watch_state(kube)
    try:
        broken = playbooks.run(
            "hygon.dcu.disable_mig",
            "-e",
            f"target={kube.node}",
            "-e",
            f"hygon_dcu_before_switch_tasks={failing}",
            check=False,
        )
        assert broken.returncode != 0
        assert "stage 'site tasks before the switch' failed" in broken.output
        labels = kube.node_object()["metadata"]["labels"]
        assert (labels[STATE], labels[MODE]) == ("failed", "on")
        assert cluster_sim.mode_on()

        playbooks.run("hygon.dcu.disable_mig", "-e", f"target={kube.node}")
        labels = kube.node_object()["metadata"]["labels"]
        assert (labels[STATE], labels[MODE]) == ("success", "off")

        playbooks.run("hygon.dcu.enable_mig", "-e", f"target={kube.node}")
    finally:
        values = seen(watch)
    labels = kube.node_object()["metadata"]["labels"]
    assert (labels[STATE], labels[MODE]) == ("success", "on")
    assert values == ["success", "pending", "failed", "pending", "success", "pending", "success"]
