"""A size no node offers is refused at creation, from the geometry the nodes publish.

The profile tables are the simulator's (the ones its library reports for each model); the
geometry texts go through the real codec, and the verdict through the real HTTPS server.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import hygon_dcu_plugin.webhook.offered as offered_module
import pytest
import simnode
from hygon_dcu_plugin import geometry
from hygon_dcu_plugin.pod_rules import check_pod
from hygon_dcu_plugin.request import Reason
from hygon_dcu_plugin.vocabulary import (
    GEOMETRY_SELECTOR,
    SLICE_COMPUTE_UNITS,
    SLICE_MEMORY_MIB,
    SLICED,
)
from hygon_dcu_plugin.webhook.offered import OfferedProfiles, lease_lister
from hygon_dcu_plugin.webhook.server import start_offered
from in_cluster import NAMESPACE, InCluster, in_cluster
from model_geometry import node_text
from webhook_pod_cases import FAMILY, container, pod
from webhook_support import Authority, admission_review, serving

MEMORY = FAMILY + ".memory-mib"
CU = FAMILY + ".compute-units"


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


# The real lister, paged, against the fake API server over TLS ----------------------------
@pytest.fixture
def api_server(
    tmp_path: Path, authority: Authority, monkeypatch: pytest.MonkeyPatch
) -> Iterator[InCluster]:
    with in_cluster(tmp_path, authority) as cluster:
        cluster.enter(monkeypatch)
        yield cluster


def names(profiles: OfferedProfiles) -> set[str]:
    return {p.name for p in profiles.profiles() or ()}


def model_names(*models: str) -> set[str]:
    return {p.name for m in models for p in simnode.MODELS[m].profiles}


def put_nodes(cluster: InCluster, model: str, count: int, first: int = 0) -> None:
    for index in range(first, first + count):
        cluster.put_lease(f"node-{index:04d}", node_text(model))


def test_the_lister_reads_a_page_at_a_time_and_keeps_each_profile_once(
    api_server: InCluster,
) -> None:
    put_nodes(api_server, "c3000-bw", 150)
    put_nodes(api_server, "hypo-x8", 60, first=150)
    profiles = OfferedProfiles(lease_lister(NAMESPACE, GEOMETRY_SELECTOR))
    profiles.refresh()
    assert names(profiles) == model_names("c3000-bw", "hypo-x8")
    assert len(profiles.profiles() or ()) == len(model_names("c3000-bw", "hypo-x8"))
    pages = api_server.lease_lists()
    # 210 Leases: three pages of at most 100, each asked with the token of the one before.
    assert [(q.get("limit"), q.get("continue")) for q in pages] == [
        ("100", None),
        ("100", "100"),
        ("100", "200"),
    ]
    assert all(q["labelSelector"] == GEOMETRY_SELECTOR for q in pages)


def test_an_expired_continue_token_starts_the_list_again_once(
    api_server: InCluster, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=offered_module.__name__)
    put_nodes(api_server, "c3000-bw", 150)
    put_nodes(api_server, "hypo-x8", 1, first=150)  # on the second page only
    api_server.expire_continues(1)
    profiles = OfferedProfiles(lease_lister(NAMESPACE, GEOMETRY_SELECTOR))
    profiles.refresh()
    assert names(profiles) == model_names("c3000-bw", "hypo-x8")
    assert [q.get("continue") for q in api_server.lease_lists()] == [None, "100", None, "100"]
    (restarted,) = [r for r in caplog.records if r.getMessage() == "geometry_list_restarted"]
    assert "410" in restarted.__dict__["error"]
    assert not [r for r in caplog.records if r.getMessage() == "geometry_list_failed"]


def test_a_list_expired_twice_keeps_the_last_answer(
    api_server: InCluster, caplog: pytest.LogCaptureFixture
) -> None:
    put_nodes(api_server, "c3000-bw", 150)
    profiles = OfferedProfiles(lease_lister(NAMESPACE, GEOMETRY_SELECTOR))
    profiles.refresh()
    assert names(profiles) == model_names("c3000-bw")
    # A node of a larger model joins, but its page is never read whole.
    put_nodes(api_server, "hypo-x8", 1, first=150)
    api_server.expire_continues(2)
    profiles.refresh()
    assert names(profiles) == model_names("c3000-bw")
    (failed,) = [r for r in caplog.records if r.getMessage() == "geometry_list_failed"]
    assert "410" in failed.__dict__["error"]
    profiles.refresh()  # the next list works again
    assert names(profiles) == model_names("c3000-bw", "hypo-x8")


def test_a_page_over_its_byte_bound_fails_the_list_and_keeps_the_last_answer(
    api_server: InCluster, caplog: pytest.LogCaptureFixture
) -> None:
    put_nodes(api_server, "c3000-bw", 3)
    profiles = OfferedProfiles(lease_lister(NAMESPACE, GEOMETRY_SELECTOR))
    profiles.refresh()
    # Leases carrying far more than a geometry (each under the API server's 256 KiB).
    bulky = "x" * (offered_module.MAX_PAGE_BYTES // 50)
    for index in range(60):
        api_server.put_lease(f"bulky-{index:02d}", bulky)
    put_nodes(api_server, "hypo-x8", 1, first=100)
    profiles.refresh()
    assert names(profiles) == model_names("c3000-bw")
    (failed,) = [r for r in caplog.records if r.getMessage() == "geometry_list_failed"]
    assert f"over {offered_module.MAX_PAGE_BYTES} bytes" in failed.__dict__["error"]
    for index in range(60):
        api_server.delete_lease(f"bulky-{index:02d}")
    profiles.refresh()  # and the next list works again
    assert names(profiles) == model_names("c3000-bw", "hypo-x8")


def _with_profiles(sizes: list[tuple[int, int]]) -> str:
    """A one-card geometry whose profiles have these (memory MiB, compute units)."""
    profiles = tuple(
        geometry.GeoProfile(f"p{memory}x{cu}", 1, memory, cu, (geometry.GeoPlacement(0, 1),))
        for memory, cu in sizes
    )
    card = geometry.GeoCard("0000:03:00.0", 1, profiles, frozenset())
    return geometry.encode(geometry.Geometry(1, (card,)))


def test_past_its_bound_only_the_profiles_no_other_covers_are_kept() -> None:
    kept = offered_module.MAX_KEPT
    # Many distinct profiles, each covered by the largest (more memory and compute units).
    texts = [
        _with_profiles([(1000 + i * 8 + k, 1 + k) for k in range(geometry.MAX_PROFILES)])
        for i in range(kept // geometry.MAX_PROFILES + 8)
    ]
    texts.append(_with_profiles([(200_000, 500)]))
    profiles = OfferedProfiles(lambda: texts)
    profiles.refresh()
    held = profiles.profiles()
    assert held is not None and len(held) <= kept
    # The same verdicts as with every profile, and the same largest one named.
    assert check_pod(size_pod(150_000, 400), held) == []
    (violation,) = check_pod(size_pod(200_001), held)
    assert "p200000x500 with 200000 MiB and 500 compute units" in violation.message
    # Over the bound even after that (no profile covers another): the last answer is kept.
    spread = [
        _with_profiles([(10_000 + n, 4000 - n) for n in range(i, i + geometry.MAX_PROFILES)])
        for i in range(0, kept + geometry.MAX_PROFILES, geometry.MAX_PROFILES)
    ]
    texts[:] = spread
    profiles.refresh()
    assert profiles.profiles() == held


# logical slices ----------------------------------------------------------------------------
def sliced_text(*sizes: tuple[int, int]) -> str:
    """A mode-off node's geometry: one card offered for slices per (compute units, MiB)."""
    cards = tuple(
        geometry.GeoSliceCard(f"0000:{index + 9:02x}:00.0", cus, mib, 4, False)
        for index, (cus, mib) in enumerate(sizes)
    )
    return geometry.encode(geometry.Geometry(0, (), cards))


def slice_pod(memory: int, cu: int | None = None) -> dict[str, Any]:
    limits = {SLICED: "1", SLICE_MEMORY_MIB: str(memory)}
    if cu is not None:
        limits[SLICE_COMPUTE_UNITS] = str(cu)
    return pod(container("notebook", limits))


def slice_offer(*texts: str) -> OfferedProfiles:
    found = OfferedProfiles(lambda: list(texts))
    found.refresh()
    return found


def test_a_slice_no_card_can_hold_is_refused_naming_the_largest() -> None:
    cards = slice_offer(
        sliced_text((80, 65520)), sliced_text((64, 32768), (80, 65520))
    ).slice_cards()
    assert cards is not None and len(cards) == 1  # the smaller card holds nothing more
    (violation,) = check_pod(slice_pod(65521), slice_cards=cards)
    assert violation.reason is Reason.SIZE_NOT_OFFERED
    assert "65520 MiB and 80 compute units" in violation.message
    assert check_pod(slice_pod(65520), slice_cards=cards) == []
    assert [v.reason for v in check_pod(slice_pod(1024, 81), slice_cards=cards)] == [
        Reason.SIZE_NOT_OFFERED
    ]
    assert check_pod(slice_pod(1024, 80), slice_cards=cards) == []


def test_the_cards_kept_are_those_no_other_covers() -> None:
    cards = slice_offer(sliced_text((80, 32768), (40, 65520), (40, 32768))).slice_cards() or ()
    # Neither of the first two covers the other; the third is covered by both.
    assert sorted((c.compute_units, c.memory_mib) for c in cards) == [(40, 65520), (80, 32768)]
    assert check_pod(slice_pod(60000, 40), slice_cards=cards) == []
    assert check_pod(slice_pod(30000, 80), slice_cards=cards) == []
    assert check_pod(slice_pod(60000, 80), slice_cards=cards) != []


def test_without_evidence_a_slice_is_not_checked_against_the_nodes() -> None:
    assert check_pod(slice_pod(10**6), slice_cards=None) == []
    assert check_pod(slice_pod(10**6), slice_cards=slice_offer().slice_cards()) == []


def test_the_https_server_refuses_a_slice_no_card_can_hold(
    tmp_path: Path, authority: Authority
) -> None:
    published = slice_offer(sliced_text((80, 65520)))
    with serving(tmp_path, authority, slice_cards=published.slice_cards) as running:
        status, answer = running.review(admission_review(slice_pod(70000)))
        assert status == 200 and answer["response"]["allowed"] is False
        assert "which no card of any node can hold" in answer["response"]["status"]["message"]
        status, answer = running.review(admission_review(slice_pod(16384)))
        assert answer["response"]["allowed"] is True
