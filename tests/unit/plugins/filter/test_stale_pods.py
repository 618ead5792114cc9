"""stale_pods: pods whose partition grant names an instance that no longer exists."""

from __future__ import annotations

import json
from typing import Any

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.hygon.dcu.plugins.filter.stale_pods import FilterModule, stale_pods

PREFIX = "hygon.com/dcu.partition."


def grant(uuid: str, container: str | None = None) -> str:
    value = {"card": "0", "profile": "2g.15gb", "placement": "0:1", "uuid": uuid}
    if container is not None:
        value["container"] = container
    return json.dumps(value)


def pod(
    name: str, annotations: dict[str, str], *, phase: str = "Running", deleting: bool = False
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"namespace": "ml", "name": name, "annotations": annotations}
    if deleting:
        metadata["deletionTimestamp"] = "2024-05-01T10:00:00Z"
    return {"metadata": metadata, "status": {"phase": phase}}


def test_a_grant_for_an_instance_that_is_gone_makes_the_pod_stale() -> None:
    pods = [
        pod("trainer", {PREFIX + "main": grant("gone", "main"), PREFIX + "log": grant("live")}),
        pod("infer", {PREFIX + "main": grant("live", "main")}),
    ]

    assert stale_pods(pods, ["live"], PREFIX) == [
        {"namespace": "ml", "name": "trainer", "containers": ["main"]}
    ]


def test_the_container_name_comes_from_the_value_and_else_from_the_key() -> None:
    # The key holds a digest when the container's name does not fit in it.
    pods = [
        pod("p", {PREFIX + "7f3a9c": grant("gone", "a-very-long-name"), PREFIX + "b": grant("x")})
    ]

    (stale,) = stale_pods(pods, [], PREFIX)

    assert stale["containers"] == ["a-very-long-name", "b"]


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
def test_finished_pods_are_not_stale(phase: str) -> None:
    assert stale_pods([pod("done", {PREFIX + "c": grant("gone")}, phase=phase)], [], PREFIX) == []


def test_pods_being_deleted_are_not_stale() -> None:
    assert (
        stale_pods([pod("going", {PREFIX + "c": grant("gone")}, deleting=True)], [], PREFIX) == []
    )


def test_annotations_outside_the_prefix_are_ignored() -> None:
    pods = [pod("other", {"example.com/uuid": grant("gone"), "hygon.com/dcu.partitionx": "x"})]
    assert stale_pods(pods, [], PREFIX) == []


def test_a_grant_that_names_no_uuid_grants_nothing_that_exists() -> None:
    pods = [pod("odd", {PREFIX + "a": json.dumps(["not", "an", "object"]), PREFIX + "b": "{}"})]

    (stale,) = stale_pods(pods, ["live"], PREFIX)

    assert stale["containers"] == ["a", "b"]


def test_a_grant_that_is_not_json_names_the_pod_and_the_key() -> None:
    with pytest.raises(AnsibleFilterError, match=r"pod ml/broken: annotation .*\.main is not JSON"):
        stale_pods([pod("broken", {PREFIX + "main": "{not json"})], [], PREFIX)


def test_pods_without_annotations_or_status_are_not_stale() -> None:
    bare = {"metadata": {"namespace": "ml", "name": "bare"}}
    assert (
        stale_pods([bare, {"metadata": {**bare["metadata"], "annotations": None}}], [], PREFIX)
        == []
    )


def test_the_plugin_exposes_the_filter_by_its_name() -> None:
    assert FilterModule().filters() == {"stale_pods": stale_pods}
