"""Device lists and counts, pure."""

from __future__ import annotations

from hygon_dcu_plugin.deviceplugin.advertise import (
    healthy_count,
    partition_plan,
    token_devices,
    whole_card_plan,
)
from hygon_dcu_plugin.placement import CardView
from hygon_dcu_plugin.vocabulary import FAMILY, SLICED, WHOLE_CARD
from profile_tables import BW


def card(index: int, occupied: set[int]) -> CardView:
    return CardView(index, f"pci{index}", 4, BW, frozenset(occupied))


def test_idle_eight_card_bw_node() -> None:
    plan = partition_plan([card(i, set()) for i in range(8)], {})
    counts = {r: healthy_count(d) for r, d in plan.items()}
    assert counts == {
        WHOLE_CARD: 0,
        SLICED: 0,
        FAMILY: 32,
        "hygon.com/dcu.partitioned.mig-2g": 32,
        "hygon.com/dcu.partitioned.mig-4g": 16,
        "hygon.com/dcu.partitioned.mig-8g": 8,
    }


def test_held_tokens_stay_healthy_and_free_ones_are_withheld() -> None:
    devices = token_devices(FAMILY, 8, {"partition-005", "partition-006"}, free=1)
    healthy = {d.id for d in devices if d.healthy}
    assert healthy == {"partition-000", "partition-005", "partition-006"}
    assert len(devices) == 8


def test_a_held_token_outside_the_pool_stays_healthy() -> None:
    devices = token_devices(FAMILY, 2, {"partition-007"}, free=0)
    assert [(d.id, d.healthy) for d in devices] == [
        ("partition-000", False),
        ("partition-001", False),
        ("partition-007", True),
    ]


def test_pool_grows_when_stale_holdings_would_hide_free_capacity() -> None:
    devices = token_devices(FAMILY, 2, {"partition-000", "partition-001"}, free=2)
    assert healthy_count(devices) == 4


def test_unlisted_holdings_are_counted_until_the_kubelet_lists_them() -> None:
    cards = [card(0, {0}), card(1, set())]
    plan = partition_plan(cards, {}, unlisted={"hygon.com/dcu.partitioned.mig-2g": 1})
    assert healthy_count(plan[FAMILY]) == 3 + 4
    assert healthy_count(plan["hygon.com/dcu.partitioned.mig-2g"]) == 1 + 3 + 4


def test_whole_card_plan() -> None:
    plan = whole_card_plan({"0000:0c:00.0": False, "0000:09:00.0": True})
    assert [(d.id, d.healthy) for d in plan[WHOLE_CARD]] == [
        ("0000:09:00.0", True),
        ("0000:0c:00.0", False),
    ]
    assert plan[FAMILY] == []
