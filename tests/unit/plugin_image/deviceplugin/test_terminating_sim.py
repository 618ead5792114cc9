"""Counts while a pod whose partition was already reclaimed is still terminating, against the
simulated node: the kubelet keeps that pod's ids listed and counted as in use until it is gone,
and admits the next pod's two resources one at a time, in either order
(docs/dev/kubernetes.md, "Scheduling")."""

from __future__ import annotations

from pathlib import Path

import pytest
import simnode
from hygon_dcu_plugin.vocabulary import PROFILE_PREFIX
from plugin_harness import Harness, make_node

FOUR_G = "4g.31gb"


@pytest.fixture
def two_cards(
    simulator_build: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, short_tmp: Path
) -> Harness:
    node = make_node(tmp_path / "node", cards=2)
    monkeypatch.setenv(simnode.ROOT_ENV, str(node.root))
    return Harness(node, short_tmp)


@pytest.mark.parametrize("profile_first", [True, False], ids=["profile-first", "family-first"])
def test_a_partition_freed_by_a_terminating_pod_admits_the_next_pod(
    two_cards: Harness, profile_first: bool
) -> None:
    harness = two_cards
    for name in ("a", "b", "c", "d"):  # 2 cards x 2 placements of 4g: the node is full
        harness.admit(name, FOUR_G)
    harness.kube.mark_deleting("default", "a")  # the kubelet still lists a, with its ids
    assert len(harness.reclaimer.run_pass().destroyed) == 1
    # Where the kubelet failed the pod (UnexpectedAdmissionError, Available: 0) the harness
    # finds no free token and raises.
    harness.admit("next", FOUR_G, profile_first=profile_first)
    assert len(harness.live()) == 4
    # Full again: no fifth 4g may look placeable while a's ids are still counted.
    with pytest.raises(AssertionError, match="no free"):
        harness.free_token(PROFILE_PREFIX + FOUR_G)
    harness.finish("a")  # gone: its ids leave the kubelet's list
    assert harness.counts()[PROFILE_PREFIX + FOUR_G] == 4
