"""Smoke and soundness tests for the slice placement benchmark (tiny sizes, nothing timed)."""

from __future__ import annotations

import pytest

from bench import slice_quality
from bench.slice_quality import BASELINE, OURS, POLICIES, SliceModel, Tally, replay, slice_model
from bench.tables import discover
from bench.workload import Request


def _model(cus: int, mib: int) -> SliceModel:
    # The BW card table (for the streams' profile names) with card sizes chosen here.
    return SliceModel(discover("c3000-bw"), cus, mib, {"2g.15gb": 1000, "4g.31gb": 30000})


def test_card_sizes_and_profile_memory_are_read_from_the_simulated_driver() -> None:
    bw = slice_model("c3000-bw")
    # The measured BW card (docs/dev/hardware.md), as the node layer reads it.
    assert (bw.compute_units, bw.memory_mib) == (80, 65520)
    assert bw.profile_memory == {"2g.15gb": 16380, "4g.31gb": 32760, "8g.63gb": 65520}


def test_the_fifth_slice_of_a_card_is_refused_with_room_and_its_memory_stranded() -> None:
    # 8 cards x 4 slices: the 33rd small slice finds every card's slots used while nearly all
    # memory and compute units are free, so it is refused "with room" for 2 time units.
    model = _model(80, 64000)
    requests = [Request(i, 0.0, 10.0, "2g.15gb", 1) for i in range(32)]
    requests.append(Request(32, 1.0, 3.0, "2g.15gb", 1))
    tally = Tally()
    replay(model, requests, POLICIES["first-fit"], tally)
    assert (tally.accepted, tally.refused_with_room) == (32, 1)
    assert tally.stranded_memory_time == pytest.approx(1000 * 2.0)
    assert tally.offered_memory_time == pytest.approx(32 * 1000 * 10.0 + 1000 * 2.0)


def test_ours_keeps_a_slot_for_a_large_slice_that_the_baseline_strands() -> None:
    # One long large slice (30,000 MiB, 38 CUs) on card 0, then three small ones (1,000 MiB,
    # 2 CUs). The baseline puts all three on the fullest card, card 0, whose four slots are
    # then used with 31,000 MiB left that no slice can have. Ours puts two there and the third,
    # which would take card 0's last slot, on card 1. Then 15 large slices: cards 1-7 take two
    # each under both policies (14), and only ours still has a slot for one more on card 0.
    model = _model(80, 64000)
    requests = [Request(0, 0.0, 100.0, "4g.31gb", 2)]
    requests += [Request(1 + i, 1.0 + i, 100.0, "2g.15gb", 1) for i in range(3)]
    requests += [Request(4 + i, 10.0 + i, 100.0, "4g.31gb", 2) for i in range(15)]
    ours, baseline = Tally(), Tally()
    replay(model, requests, POLICIES[OURS], ours)
    replay(model, requests, POLICIES[BASELINE], baseline)
    assert ours.accepted == baseline.accepted + 1


def test_a_quick_run_prints_every_model_mix_and_policy() -> None:
    text = slice_quality.run(quick=True)
    assert text.startswith("== slice placement ==")
    for model in slice_quality.MODELS:
        for policy in POLICIES:
            assert f"{model} uniform | {policy}" in text
    assert text.count("baseline (") == len(slice_quality.MODELS) * 4
