"""A size no node offers is refused at creation, from the geometry the nodes publish.

The profile tables are the simulator's (the ones its library reports for each model); the
geometry texts go through the real codec, and the verdict through the real HTTPS server.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
import simnode
from hygon_dcu_plugin import geometry
from hygon_dcu_plugin.request import Reason
from hygon_dcu_plugin.webhook.offered import OfferedProfiles
from hygon_dcu_plugin.webhook.rules import check_pod
from hygon_dcu_plugin.webhook.server import start_offered
from webhook_pod_cases import FAMILY, container, pod
from webhook_support import Authority, admission_review, serving

MEMORY = FAMILY + ".memory-mib"
CU = FAMILY + ".compute-units"


def node_text(model: str) -> str:
    spec = simnode.MODELS[model]
    profiles = tuple(
        geometry.GeoProfile(
            p.name,
            p.slices,
            p.memory_mib,
            p.cu_count,
            tuple(geometry.GeoPlacement(s, p.slices) for s in p.starts),
        )
        for p in spec.profiles
    )
    card = geometry.GeoCard(spec.pci_addresses[0], spec.slices, profiles, frozenset())
    return geometry.encode(geometry.Geometry(1, (card,)))


def largest(model: str) -> simnode.ProfileSpec:
    return max(simnode.MODELS[model].profiles, key=lambda p: p.memory_mib)


def offered(*models: str) -> OfferedProfiles:
    profiles = OfferedProfiles(lambda: [node_text(m) for m in models])
    profiles.refresh()
    return profiles


def size_pod(memory: int, cu: int | None = None) -> dict[str, Any]:
    limits = {FAMILY: "1", MEMORY: str(memory)}
    if cu is not None:
        limits[CU] = str(cu)
    return pod(container("train", limits))


def test_a_size_above_every_nodes_largest_profile_is_refused_naming_the_largest() -> None:
    bw = largest("c3000-bw")
    (violation,) = check_pod(size_pod(bw.memory_mib + 1), offered("c3000-bw").profiles())
    assert violation.reason is Reason.SIZE_NOT_OFFERED
    assert f"{bw.name} with {bw.memory_mib} MiB" in violation.message


def test_a_size_one_node_model_covers_is_admitted() -> None:
    bw, x8 = largest("c3000-bw"), largest("hypo-x8")
    assert x8.memory_mib > bw.memory_mib
    both = offered("c3000-bw", "hypo-x8").profiles()
    assert check_pod(size_pod(bw.memory_mib + 1), both) == []
    assert [v.reason for v in check_pod(size_pod(x8.memory_mib + 1), both)] == [
        Reason.SIZE_NOT_OFFERED
    ]


def test_compute_units_count_too() -> None:
    bw = largest("c3000-bw")
    profiles = offered("c3000-bw").profiles()
    assert check_pod(size_pod(1, bw.cu_count), profiles) == []
    assert [v.reason for v in check_pod(size_pod(1, bw.cu_count + 1), profiles)] == [
        Reason.SIZE_NOT_OFFERED
    ]


def test_without_evidence_the_size_is_not_checked_against_the_nodes() -> None:
    huge = size_pod(10**6)
    assert check_pod(huge, None) == []
    assert check_pod(huge, offered().profiles()) == []  # no node publishes yet


def test_unreadable_geometry_is_skipped_and_a_failing_list_keeps_the_last_until_stale() -> None:
    now = [0.0]
    texts: list[str] = [node_text("c3000-bw"), '{"v": 2}']

    def lister() -> list[str]:
        if not texts:
            raise OSError("the API server is down")
        return texts

    profiles = OfferedProfiles(lister, fresh_seconds=60, clock=lambda: now[0])
    assert profiles.profiles() is None  # never listed
    profiles.refresh()
    names = {p.name for p in profiles.profiles() or ()}
    assert names == {p.name for p in simnode.MODELS["c3000-bw"].profiles}
    texts.clear()
    now[0] = 30.0
    profiles.refresh()
    assert {p.name for p in profiles.profiles() or ()} == names
    now[0] = 61.0
    assert profiles.profiles() is None


def test_the_https_server_refuses_with_the_published_profiles(
    tmp_path: Path, authority: Authority
) -> None:
    bw = largest("c3000-bw")
    published = offered("c3000-bw")
    with serving(tmp_path, authority, offered=published.profiles) as running:
        status, answer = running.review(admission_review(size_pod(bw.memory_mib * 2)))
        assert status == 200
        assert answer["response"]["allowed"] is False
        assert "no node offers" in answer["response"]["status"]["message"]
        status, answer = running.review(admission_review(size_pod(bw.memory_mib)))
        assert answer["response"]["allowed"] is True


@pytest.mark.parametrize("memory", [0, -5])
def test_a_size_out_of_range_is_refused_for_its_shape_first(memory: int) -> None:
    (violation,) = check_pod(size_pod(memory), offered("c3000-bw").profiles())
    assert violation.reason is Reason.SIZE_OUT_OF_RANGE


def test_without_a_service_account_the_webhook_serves_without_the_check(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # The real in-cluster loader, outside a pod: no service host, no token. Crash-looping
    # behind failurePolicy Fail would refuse every partition pod; the check is skipped instead.
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_PORT", raising=False)
    caplog.set_level(logging.ERROR, logger="hygon_dcu_plugin.webhook.server")
    assert start_offered("hygon-dcu-system", 30.0) is None
    (record,) = [r for r in caplog.records if r.getMessage() == "geometry_check_off"]
    assert "automountServiceAccountToken" in record.__dict__["fix"]
    assert start_offered("", 30.0) is None  # not asked: nothing logged
    assert len([r for r in caplog.records if r.getMessage() == "geometry_check_off"]) == 1
