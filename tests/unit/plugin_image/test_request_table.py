"""One table of container requests, read by both readers, which must agree.

Each row is one container's limits and the verdict written out by hand: the profile it is
granted, or the Reason it is refused for. The webhook reads the row through ``check_pod`` on a
pod holding that container; the allocator through its limits reader (``request_for``) and
through ``Allocate`` itself on a simulated node (a pod created while the webhook was down).

A request by size is written in terms of the simulated node's own profiles (read from
``harness.node.cards()``, ordered by size here), and its verdict is which of them, counted
from the smallest, an idle node grants.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import pytest
from ansible_collections.hygon.dcu.plugins.module_utils.cards import Profile
from hygon_dcu_plugin.deviceplugin.allocator import request_for
from hygon_dcu_plugin.deviceplugin.refused import RequestRefused
from hygon_dcu_plugin.kube import ContainerSpec
from hygon_dcu_plugin.pod_rules import check_pod
from hygon_dcu_plugin.request import PartitionRequest, ProfileRequest, Reason, SizeRequest
from plugin_harness import Harness

FAMILY = "hygon.com/dcu.partitioned"
P2G = FAMILY + ".mig-2g.15gb"
P4G = FAMILY + ".mig-4g.31gb"
MEMORY = FAMILY + ".memory-mib"
CU = FAMILY + ".compute-units"
WHOLE = "hygon.com/dcu"
CONTAINER = "main"

Figure = Callable[[list[Profile]], int]


@dataclass(frozen=True)
class Size:
    """A size request on the node's profiles (smallest first): ``memory`` MiB and maybe
    ``cu`` compute units, each written with ``spell``."""

    memory: Figure
    cu: Figure | None = None
    spell: Callable[[int], object] = str

    def figures(self, profiles: list[Profile]) -> SizeRequest:
        return SizeRequest(self.memory(profiles), None if self.cu is None else self.cu(profiles))

    def limits(self, profiles: list[Profile]) -> dict[str, Any]:
        wanted = self.figures(profiles)
        limits: dict[str, Any] = {FAMILY: "1", MEMORY: self.spell(wanted.memory_mib)}
        if wanted.min_cu is not None:
            limits[CU] = self.spell(wanted.min_cu)
        return limits


@dataclass(frozen=True)
class Nth:
    """The node's profile number ``index``, smallest first."""

    index: int


@dataclass(frozen=True)
class Row:
    id: str
    limits: dict[str, Any] | Size
    # The profile granted (by name, or by size on the node), or why the container is refused.
    verdict: str | Nth | Reason


ROWS = [
    Row("1", {FAMILY: "1", P2G: "1"}, "2g.15gb"),
    Row("1000m", {FAMILY: "1000m", P2G: "1000m"}, "2g.15gb"),
    Row("1.0", {FAMILY: "1.0", P2G: "1.0"}, "2g.15gb"),
    Row("01", {FAMILY: "01", P2G: "01"}, "2g.15gb"),
    Row("1e0", {FAMILY: "1e0", P2G: "1"}, "2g.15gb"),
    Row("int", {FAMILY: 1, P2G: 1}, "2g.15gb"),
    Row("other-profile", {FAMILY: "1", P4G: "1"}, "4g.31gb"),
    Row("2", {FAMILY: "2", P2G: "1"}, Reason.QUANTITY_NOT_ONE),
    Row("profile-2", {FAMILY: "1", P2G: "2"}, Reason.QUANTITY_NOT_ONE),
    Row("0", {FAMILY: "1", P2G: "0"}, Reason.QUANTITY_NOT_ONE),
    Row("-1", {FAMILY: "-1", P2G: "1"}, Reason.QUANTITY_NOT_ONE),
    Row("1Ki", {FAMILY: "1Ki", P2G: "1"}, Reason.QUANTITY_NOT_ONE),
    Row("int-2", {FAMILY: 2, P2G: 1}, Reason.QUANTITY_NOT_ONE),
    Row("500m", {FAMILY: "500m", P2G: "1"}, Reason.QUANTITY_NOT_WHOLE),
    Row("1e9999", {FAMILY: "1e9999", P2G: "1"}, Reason.QUANTITY_NOT_WHOLE),
    Row(
        "1000.0000000000000000000000001m",
        {FAMILY: "1000.0000000000000000000000001m", P2G: "1"},
        Reason.QUANTITY_NOT_WHOLE,
    ),
    Row("5000-digit-string", {FAMILY: "7" * 5000, P2G: "1"}, Reason.QUANTITY_NOT_WHOLE),
    Row("5000-digit-int", {FAMILY: 10**4999, P2G: "1"}, Reason.QUANTITY_NOT_WHOLE),
    Row("arabic-indic-one", {FAMILY: "\u0661", P2G: "1"}, Reason.QUANTITY_NOT_WHOLE),
    Row("json-list", {FAMILY: ["1"], P2G: "1"}, Reason.QUANTITY_NOT_WHOLE),
    Row("json-bool", {FAMILY: True, P2G: "1"}, Reason.QUANTITY_NOT_WHOLE),
    Row("two-profiles", {FAMILY: "1", P2G: "1", P4G: "1"}, Reason.TWO_PROFILES),
    Row("family-only", {FAMILY: "1"}, Reason.FAMILY_WITHOUT_PROFILE),
    Row("profile-only", {P2G: "1"}, Reason.PROFILE_WITHOUT_FAMILY),
    Row(
        "whole-card-and-partition",
        {WHOLE: "1", FAMILY: "1", P2G: "1"},
        Reason.MIXED_WITH_PARTITIONS,
    ),
    Row(
        "unknown-partitioned-xyz",
        {FAMILY: "1", P2G: "1", FAMILY + ".xyz": "1"},
        Reason.UNKNOWN_PARTITION_RESOURCE,
    ),
    Row(
        "unknown-partitioned-xyz-only",
        {FAMILY: "1", FAMILY + ".xyz": "1"},
        Reason.UNKNOWN_PARTITION_RESOURCE,
    ),
    # Requests by size: the smallest profile that covers memory and compute units.
    Row("size-1-mib", Size(lambda ps: 1), Nth(0)),
    Row("size-smallest-memory", Size(lambda ps: ps[0].memory_mib), Nth(0)),
    Row("size-smallest-memory-int", Size(lambda ps: ps[0].memory_mib, spell=int), Nth(0)),
    Row(
        "size-smallest-memory-milli",
        Size(lambda ps: ps[0].memory_mib, spell=lambda n: f"{n}000m"),
        Nth(0),
    ),
    Row("size-one-mib-more", Size(lambda ps: ps[0].memory_mib + 1), Nth(1)),
    Row(
        "size-cu-of-the-smallest",
        Size(lambda ps: ps[0].memory_mib, lambda ps: ps[0].cu_count),
        Nth(0),
    ),
    Row("size-one-cu-more", Size(lambda ps: 1, lambda ps: ps[0].cu_count + 1), Nth(1)),
    Row("size-cu-of-the-largest", Size(lambda ps: 1, lambda ps: ps[-1].cu_count), Nth(-1)),
    Row("size-largest-memory", Size(lambda ps: ps[-1].memory_mib), Nth(-1)),
    Row("size-and-profile", {FAMILY: "1", P2G: "1", MEMORY: "1"}, Reason.SIZE_WITH_PROFILE),
    Row("cu-without-memory", {FAMILY: "1", CU: "1"}, Reason.COMPUTE_UNITS_WITHOUT_MEMORY),
    Row("memory-0", {FAMILY: "1", MEMORY: "0"}, Reason.SIZE_OUT_OF_RANGE),
    Row("memory-negative", {FAMILY: "1", MEMORY: "-1"}, Reason.SIZE_OUT_OF_RANGE),
    Row("memory-16Ti-and-1", {FAMILY: "1", MEMORY: str((1 << 24) + 1)}, Reason.SIZE_OUT_OF_RANGE),
    Row("cu-0", {FAMILY: "1", MEMORY: "1", CU: "0"}, Reason.SIZE_OUT_OF_RANGE),
    Row("cu-4097", {FAMILY: "1", MEMORY: "1", CU: "4097"}, Reason.SIZE_OUT_OF_RANGE),
    Row("memory-500m", {FAMILY: "1", MEMORY: "500m"}, Reason.QUANTITY_NOT_WHOLE),
    Row("memory-json-list", {FAMILY: "1", MEMORY: ["1"]}, Reason.QUANTITY_NOT_WHOLE),
    Row("size-family-2", {FAMILY: "2", MEMORY: "1"}, Reason.QUANTITY_NOT_ONE),
    Row("size-without-family", {MEMORY: "1"}, Reason.PROFILE_WITHOUT_FAMILY),
]


def _profiles(harness: Harness) -> list[Profile]:
    """The node's profiles, smallest first, once each; the size rows need each one to be
    bigger than the last in both memory and compute units."""
    by_name = {p.name: p for c in harness.node.cards() for p in c.profiles}
    profiles = sorted(by_name.values(), key=lambda p: (p.slices, p.memory_mib, p.cu_count))
    assert len(profiles) >= 3
    for small, big in pairwise(profiles):
        assert small.memory_mib < big.memory_mib and small.cu_count < big.cu_count, profiles
    return profiles


def _limits(row: Row, profiles: list[Profile]) -> dict[str, Any]:
    return row.limits.limits(profiles) if isinstance(row.limits, Size) else row.limits


def _pod(limits: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {
            "containers": [
                {
                    "name": CONTAINER,
                    "image": "registry.example/train:1",
                    "resources": {"limits": limits},
                }
            ]
        },
    }


def _webhook(limits: dict[str, Any]) -> str | Reason:
    """ "admitted" (the webhook grants nothing), or the reason of its first violation, which
    must be about this container."""
    violations = check_pod(_pod(limits))
    if not violations:
        return "admitted"
    assert {violation.container for violation in violations} == {CONTAINER}, violations
    return violations[0].reason


def _refusal(refused: RequestRefused) -> Reason:
    assert refused.request_reason is not None, f"refused without a request reason: {refused}"
    return refused.request_reason


def _limits_reader(limits: dict[str, Any]) -> str | SizeRequest | Reason:
    """The profile a profile request names, the size of a size request, or the reason."""
    try:
        request: PartitionRequest = request_for(ContainerSpec(CONTAINER, limits))
    except RequestRefused as refused:
        return _refusal(refused)
    return request.profile if isinstance(request, ProfileRequest) else request


def _create(harness: Harness, limits: dict[str, Any]) -> None:
    """A pod the webhook never saw, listed by the kubelet as it admits it."""
    harness.kube.add_pod("default", "p", {CONTAINER: limits})
    harness.kubelet.pods["default/p"] = {CONTAINER: {}}


def _allocate(harness: Harness, limits: dict[str, Any]) -> str | Reason:
    """Allocate on the family, as the kubelet calls it for the container."""
    _create(harness, limits)
    try:
        harness.allocator.allocate(FAMILY, [harness.free_token()])
    except RequestRefused as refused:
        assert harness.node.instances() == []
        return _refusal(refused)
    (grant,) = harness.runtime.store.load().grants
    assert grant.containers == (CONTAINER,)
    (instance,) = harness.node.instances()
    # The grant names the profile the driver carved, not the one asked for.
    assert instance.profile is not None and instance.profile.name == grant.profile
    profile: str = grant.profile
    return profile


def test_the_table_covers_every_reason_of_a_containers_limits() -> None:
    assert len({row.id for row in ROWS}) == len(ROWS)
    # The two requests-vs-limits reasons need requests, which the allocator never reads;
    # the rest are about where a container sits in its pod.
    per_container = set(Reason) - {
        Reason.REQUESTS_LIMITS_DISAGREE,
        Reason.REQUESTS_WITHOUT_LIMITS,
        Reason.PARTITION_IN_SIDECAR,
        Reason.PARTITION_IN_INIT_CONTAINER,
        Reason.EPHEMERAL_CONTAINER_RESOURCE,
        Reason.MALFORMED_POD,
        # Decided against what the nodes publish (test_webhook_offered.py).
        Reason.SIZE_NOT_OFFERED,
        # A slice's own reasons: test_slice_request.py (the allocator serves no slice yet).
        Reason.UNKNOWN_SLICE_RESOURCE,
        Reason.SLICE_WITHOUT_MEMORY,
        Reason.SLICE_SIZE_WITHOUT_SLICE,
        Reason.SLICE_WITH_WHOLE_CARD,
        Reason.SLICE_IN_INIT_CONTAINER,
        # A pod's UPDATE by the product's accounts (webhook/test_webhook_pod_writes.py).
        Reason.WRITE_BEYOND_OWN_KEYS,
    }
    assert {row.verdict for row in ROWS if isinstance(row.verdict, Reason)} == per_container


@pytest.mark.parametrize("row", ROWS, ids=lambda row: row.id)
def test_webhook_and_allocator_agree(harness: Harness, row: Row) -> None:
    profiles = _profiles(harness)
    limits = _limits(row, profiles)
    webhook = _webhook(limits)
    reader = _limits_reader(limits)
    if FAMILY in limits:
        allocated = _allocate(harness, limits)
    else:
        # The kubelet calls the family's Allocate only for a container that requests the
        # family: Allocate finds no container to serve, and only the limits reader speaks.
        _create(harness, limits)
        with pytest.raises(RequestRefused) as refused:
            harness.allocator.allocate(FAMILY, [harness.free_token()])
        assert refused.value.reason == "unidentified"
        allocated = reader if isinstance(reader, Reason) else "nothing"
    verdict = profiles[row.verdict.index].name if isinstance(row.verdict, Nth) else row.verdict
    refused_for = verdict if isinstance(verdict, Reason) else None
    read = row.limits.figures(profiles) if isinstance(row.limits, Size) else verdict
    assert {"webhook": webhook, "limits reader": reader, "Allocate": allocated} == {
        "webhook": refused_for or "admitted",
        "limits reader": read,
        "Allocate": verdict,
    }
