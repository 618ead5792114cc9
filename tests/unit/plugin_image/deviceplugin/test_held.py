"""Which listed ids stand for which grant (held.held_tokens), pure: grants on disk, a listed
pod set as the kubelet's PodResources List returns it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from hygon_dcu_plugin.deviceplugin.grants import Grant, GrantStore
from hygon_dcu_plugin.deviceplugin.held import held_tokens
from hygon_dcu_plugin.deviceplugin.podresources import ListedContainer, ListedPod, PodResourcesError
from hygon_dcu_plugin.vocabulary import FAMILY, PROFILE_PREFIX
from sample_grant import sample_grant

FOUR_G = PROFILE_PREFIX + "4g.31gb"


def grant(pod: str, family_id: str, uuid: str) -> Grant:
    """A 4g grant of `pod`'s container `main`, given `family_id` by the kubelet."""
    made: Grant = sample_grant(
        uuid=uuid,
        profile="4g.31gb",
        placement_size=2,
        pod_name=pod,
        pod_uid=f"uid-{pod}",
        device_ids=(family_id,),
    )
    return made


class Listed:
    def __init__(self, pods: list[ListedPod]) -> None:
        self.pods = pods

    def list(self) -> list[ListedPod]:
        return self.pods


def pod(name: str, devices: dict[str, tuple[str, ...]]) -> ListedPod:
    return ListedPod("ns", name, (ListedContainer("main", devices),))


def store_with(tmp_path: Path, *grants: Grant) -> GrantStore:
    store = GrantStore(str(tmp_path / "grants"))
    store.create("a test")
    for g in grants:
        store.write(g)
    return store


def test_an_id_of_a_terminating_pod_without_a_grant_does_not_stand_for_a_new_grant(
    tmp_path: Path,
) -> None:
    # `leaving` is still listed with its ids; its partition is already reclaimed (no grant).
    # `next` was just carved by the family Allocate; its profile id is not given yet.
    store = store_with(tmp_path, grant("next", "partition-001", "u-next"))
    listed = Listed(
        [
            pod("leaving", {FAMILY: ("partition-000",), FOUR_G: ("4g.31gb-000",)}),
            pod("next", {}),
        ]
    )
    in_use, unlisted = held_tokens(store, listed)
    assert in_use[FOUR_G] == {"4g.31gb-000"}
    assert in_use[FAMILY] == {"partition-000", "partition-001"}
    assert unlisted == {FOUR_G: 1}


def test_a_grant_listed_with_its_profile_id_needs_no_spare(tmp_path: Path) -> None:
    store = store_with(tmp_path, grant("running", "partition-000", "u-run"))
    listed = Listed([pod("running", {FAMILY: ("partition-000",), FOUR_G: ("4g.31gb-003",)})])
    assert held_tokens(store, listed)[1] == {}


def test_a_profile_id_given_before_the_family_allocate_counts_for_its_grant(
    tmp_path: Path,
) -> None:
    # The kubelet admitted the profile resource first; the family id is not listed yet.
    store = store_with(tmp_path, grant("next", "partition-001", "u-next"))
    listed = Listed([pod("next", {FOUR_G: ("4g.31gb-002",)})])
    assert held_tokens(store, listed)[1] == {}


def test_a_same_named_terminating_pod_does_not_stand_for_the_new_one(tmp_path: Path) -> None:
    store = store_with(tmp_path, grant("web-0", "partition-001", "u-new"))
    listed = Listed(
        [
            pod("web-0", {FAMILY: ("partition-000",), FOUR_G: ("4g.31gb-000",)}),  # the old one
            pod("web-0", {}),
        ]
    )
    assert held_tokens(store, listed)[1] == {FOUR_G: 1}


def test_init_and_app_container_sharing_the_family_id_are_one_grant(tmp_path: Path) -> None:
    two = dataclasses.replace(
        grant("job", "partition-000", "u-job"), containers=("prepare", "main")
    )
    store = store_with(tmp_path, two)
    listed = Listed(
        [
            ListedPod(
                "ns",
                "job",
                (
                    ListedContainer("prepare", {FAMILY: ("partition-000",)}),
                    ListedContainer("main", {FAMILY: ("partition-000",), FOUR_G: ("4g.31gb-000",)}),
                ),
            )
        ]
    )
    assert held_tokens(store, listed)[1] == {}


def test_without_the_kubelet_every_grant_keeps_a_spare(tmp_path: Path) -> None:
    class Down:
        def list(self) -> list[ListedPod]:
            raise PodResourcesError("connection refused")

    store = store_with(
        tmp_path, grant("a", "partition-000", "u-a"), grant("b", "partition-001", "u-b")
    )
    in_use, unlisted = held_tokens(store, Down())
    assert in_use == {FAMILY: {"partition-000", "partition-001"}}
    assert unlisted == {FOUR_G: 2}
