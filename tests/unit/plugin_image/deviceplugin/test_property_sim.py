"""Random allocate/release sequences against a reference model."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import pytest
import simnode
from hygon_dcu_plugin.deviceplugin.refused import RequestRefused
from hygon_dcu_plugin.vocabulary import FAMILY, PROFILE_PREFIX, SLICED, WHOLE_CARD
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from plugin_harness import Harness, make_node

# The reference knows the BW table from docs/dev/hardware.md, independently of the plugin's
# discovery.
BW = {"2g.15gb": (1, (0, 1, 2, 3)), "4g.31gb": (2, (0, 2)), "8g.63gb": (4, (0,))}
CARDS = 2


def fits(profile: str, taken: set[int]) -> list[set[int]]:
    size, starts = BW[profile]
    spans = [set(range(s, s + size)) for s in starts]
    return [span for span in spans if not span & taken]


def most(profile: str, taken: set[int]) -> int:
    """Brute force: the largest set of pairwise disjoint free placements."""
    free = fits(profile, taken)
    for k in range(len(free), 0, -1):
        for combo in itertools.combinations(free, k):
            if all(not a & b for a, b in itertools.combinations(combo, 2)):
                return k
    return 0


def expected_counts(live: dict[str, tuple[int, set[int], str]]) -> dict[str, int]:
    taken = {card: set[int]() for card in range(CARDS)}
    for card, span, _ignored in live.values():
        taken[card] |= span
    counts = {
        WHOLE_CARD: 0,
        SLICED: 0,
        FAMILY: len(live) + sum(max(most(p, taken[c]) for p in BW) for c in taken),
    }
    for profile in BW:
        held = sum(1 for _card, _span, p in live.values() if p == profile)
        counts[PROFILE_PREFIX + profile] = held + sum(most(profile, taken[c]) for c in taken)
    return counts


operations = st.lists(
    st.one_of(
        st.tuples(st.just("allocate"), st.sampled_from(sorted(BW))),
        st.tuples(st.just("release"), st.integers(min_value=0, max_value=50)),
    ),
    min_size=1,
    max_size=14,
)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=operations)
def test_random_sequences_match_the_reference(
    simulator_build: Path, short_tmp: Path, ops: list[tuple[str, object]]
) -> None:
    example = short_tmp / f"ex{len(list(short_tmp.iterdir()))}"
    node = make_node(example / "node", cards=CARDS)
    # Not monkeypatch: hypothesis runs the body many times within one fixture scope.
    previous = os.environ.get(simnode.ROOT_ENV)
    os.environ[simnode.ROOT_ENV] = str(node.root)
    try:
        check_sequence(Harness(node, example / "state"), node, ops)
    finally:
        if previous is None:
            os.environ.pop(simnode.ROOT_ENV, None)
        else:
            os.environ[simnode.ROOT_ENV] = previous


def check_sequence(harness: Harness, node: simnode.SimNode, ops: list[tuple[str, object]]) -> None:
    pci_to_card = {node.pci(i): i for i in range(CARDS)}
    live: dict[str, tuple[int, set[int], str]] = {}  # pod -> (card, slices, profile)
    for number, (op, arg) in enumerate(ops):
        if op == "allocate":
            profile = str(arg)
            taken = {c: set[int]() for c in range(CARDS)}
            for card, span, _ignored in live.values():
                taken[card] |= span
            possible = any(fits(profile, taken[c]) for c in taken)
            name = f"pod{number}"
            # What the scheduler sees: a free token of both the family and the profile.
            schedulable = all(
                any(d.healthy and d.id not in harness.kubelet.held(resource) for d in devices)
                for resource, devices in harness.runtime.plan().items()
                if resource in (FAMILY, PROFILE_PREFIX + profile)
            )
            assert schedulable == possible, f"counts disagree on whether {profile} fits"
            if not possible:
                # Even if a pod got here, the plugin refuses it.
                harness.kube.add_pod(
                    "default", name, {"main": {FAMILY: "1", PROFILE_PREFIX + profile: "1"}}
                )
                harness.kubelet.pods[f"default/{name}"] = {"main": {}}
                with pytest.raises(RequestRefused) as refused:
                    harness.allocator.allocate(FAMILY, ["partition-999"])
                assert refused.value.reason == "no_capacity"
                harness.finish(name)
                continue
            harness.admit(name, profile)
            (grant,) = [r for r in harness.runtime.store.load() if r.pod_name == name]
            span = set(range(grant.placement_start, grant.placement_start + grant.placement_size))
            card = pci_to_card[grant.card_pci]
            assert not span & taken[card], "overlapping partition"
            live[name] = (card, span, profile)
        elif live:
            name = sorted(live)[int(str(arg)) % len(live)]
            harness.finish(name)
            harness.reclaimer.run_pass()
            del live[name]
        # The driver agrees with the model: same slices, no overlap anywhere.
        driver = sorted(
            (pci_to_card[i.pci or ""], i.placement.start, i.placement.size)
            for i in harness.node.instances()
        )
        model = sorted((c, min(s), len(s)) for c, s, _ignored in live.values())
        assert driver == model
        assert harness.counts() == expected_counts(live)
