"""`simnode reboot` then restart."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import simnode
from hygon_dcu_plugin.deviceplugin.refused import RequestRefused
from hygon_dcu_plugin.vocabulary import FAMILY, SLICED, WHOLE_CARD
from plugin_harness import Harness


def test_stale_grants_are_refused_never_resolved_and_reclaimed_when_pods_go(
    bw_node: simnode.SimNode, short_tmp: Path
) -> None:
    before = Harness(bw_node, short_tmp)
    before.admit("a")
    before.admit("b", "4g.31gb")
    stale = {r.pod_name: r for r in before.runtime.store.load()}
    token_a = stale["a"].device_ids[0]
    subprocess.run(
        [str(simnode.SIMNODE_PATH), "reboot", str(bw_node.root)], check=True, capture_output=True
    )

    after = Harness(bw_node, short_tmp)
    after.kube = before.kube  # the same API server: the pods still exist
    after.runtime.kube = after.runtime.allocator.kube = after.runtime.reclaimer.kube = before.kube
    after.kubelet = before.kubelet
    after.runtime.lister = after.runtime.allocator.lister = before.kubelet
    assert after.node.instances() == []
    # Grants of live pods are kept (their pods still run, as far as anyone knows)...
    after.reclaimer.run_pass()
    assert {r.pod_name for r in after.runtime.store.load()} == {"a", "b"}
    # ...a new pod gets the very ids the stale grant names (same card, GI 3, slot 0)...
    after.admit("c")
    (fresh,) = after.node.instances()
    assert (fresh.pci, fresh.gpu_instance_id) == (stale["a"].card_pci, stale["a"].gpu_instance_id)
    # ...and a retried Allocate for a's container is refused, not answered with c's instance.
    after.kubelet.pods["default/a"]["main"] = {}
    with pytest.raises(RequestRefused, match="no longer exists"):
        after.allocator.allocate(FAMILY, [token_a])
    # Counts = held + what still fits; a and b still hold their tokens in the kubelet, so the
    # scheduler's free view (count - requests of the 3 pods) is exactly what fits: 31 / 15.
    counts = after.counts()
    assert counts[FAMILY] == 3 + 31
    assert counts["hygon.com/dcu.partitioned.mig-2g.15gb"] == 2 + 31
    assert counts["hygon.com/dcu.partitioned.mig-4g.31gb"] == 1 + 15
    # The pods go: stale grants are dropped, c's instance (same ids, other uuid) survives.
    after.finish("a")
    after.finish("b")
    report = after.reclaimer.run_pass()
    assert sorted(report.stale) == sorted([stale["a"].uuid, stale["b"].uuid])
    assert report.destroyed == []
    assert [i.uuid for i in after.node.instances()] == [fresh.uuid]
    assert [r.pod_name for r in after.runtime.store.load()] == ["c"]


def test_a_mode_change_is_picked_up_on_restart(bw_node: simnode.SimNode, short_tmp: Path) -> None:
    on = Harness(bw_node, short_tmp)
    assert on.counts()[FAMILY] == 32
    result = subprocess.run(
        [str(simnode.HY_SMI_PATH), "-mig", "0"],
        env=bw_node.env(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    # The running plugin keeps its resource set (the driver does not tell it)...
    assert on.runtime.resources[:3] == [WHOLE_CARD, FAMILY, SLICED]
    assert len(on.runtime.resources) == 6
    off = Harness(bw_node, short_tmp)
    # ...the restarted one serves whole cards and slices, and no partition.
    assert off.runtime.resources == [WHOLE_CARD, FAMILY, SLICED]
    assert off.counts() == {WHOLE_CARD: 8, FAMILY: 0, SLICED: 32}


def test_after_a_reboot_every_card_has_its_address_and_serves(
    bw_node: simnode.SimNode, short_tmp: Path
) -> None:
    # With the mode on the driver recreates dev<N> as the mode comes up: no card waits for a
    # create to get its address.
    bw_node.reboot()
    harness = Harness(bw_node, short_tmp)
    assert all(card.pci for card in harness.node.cards())
    assert harness.counts()[FAMILY] == 32
    harness.admit("a")
    assert len(harness.node.instances()) == 1


def test_a_card_whose_address_is_missing_is_not_offered(
    bw_node: simnode.SimNode, short_tmp: Path
) -> None:
    # A damaged registry (dev0 gone while the mode is on): the card's lock, grants and
    # reclaim all key on its address, so it is left out rather than served by index.
    (bw_node.registry_dir / "dev0").unlink()
    harness = Harness(bw_node, short_tmp)
    assert harness.counts()[FAMILY] == 28
    harness.admit("a")  # pack would pick card 0 of eight empty ones
    assert [i.card_index for i in harness.node.instances()] == [1]
