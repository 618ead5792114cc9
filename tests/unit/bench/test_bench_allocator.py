"""Smoke tests for the allocator benchmark: the real gRPC path on the simulator, tiny sizes.
Nothing here asserts on how long anything took."""

from __future__ import annotations

import pytest
from ansible_collections.hygon.dcu.plugins.module_utils.hydmi import HydmiLibrary
from hygon_dcu_plugin.deviceplugin.runtime import Runtime
from hygon_dcu_plugin.vocabulary import FAMILY, profile_resource

from bench import allocator_cost
from bench.instrument import Ledger, MissingMethod
from bench.plugin_stack import PluginStack


def test_ledger_attributes_library_calls_to_the_allocate_that_made_them() -> None:
    original = HydmiLibrary.__dict__["call"]
    ledger = Ledger()
    with ledger.installed(), PluginStack("c3000-bw", cards=2) as stack:
        profile = stack.profiles[0][0]
        (token,) = stack.free_tokens(1)
        stack.new_pod(profile)
        response = stack.allocate(token)
        assert response.envs["DMI_MIG_VISIBLE_DEVICE"].startswith("MIG-")
        (((resource, ids), cost),) = ledger.allocates
        assert (resource, list(ids)) == (FAMILY, [token])
        assert cost.library_calls > 0
        assert 0 < cost.library < cost.total
        assert cost.kubelet > 0  # Allocate asks the kubelet who is being admitted
        assert [kind for kind, _ignored in ledger.changes] == ["create"]
        stack.finish_all()
        report = stack.runtime.reclaimer.run_pass()
        assert len(report.destroyed) == 1
        assert (
            stack.kubelet.counts()[profile_resource(profile)]
            == stack.idle[profile_resource(profile)]
        )
    assert HydmiLibrary.__dict__["call"] is original  # the wrapper is gone again


def test_allocator_benchmark_runs_at_a_tiny_size() -> None:
    tiny = allocator_cost.Scale(
        callers=(1, 4), rounds=1, grants=(3, 12), passes=1, watch_rounds=1, cards=2
    )
    text = allocator_cost.run(scale=tiny)
    for heading in ("Allocate (", "where the slowest 1%", "reclaim pass", "ListAndWatch delay"):
        assert heading in text
    # 12 grants on a node that holds 8 partitions: 8 destroyed, 4 stale grants dropped.
    assert "8+4" in text


def test_a_wrapped_method_that_is_gone_fails_the_install_by_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The ledger wraps methods by name; a rename must not leave their time silently uncounted.
    original = HydmiLibrary.__dict__["call"]
    monkeypatch.delattr(Runtime, "refresh")
    wanted = r"hygon_dcu_plugin\.deviceplugin\.runtime\.Runtime\.refresh, but"
    with pytest.raises(MissingMethod, match=wanted), Ledger().installed():
        pass
    assert HydmiLibrary.__dict__["call"] is original  # what it had wrapped first is put back
