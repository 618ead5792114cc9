"""accelerator_pods: which pods leave a node before its partition mode switches."""

from __future__ import annotations

from typing import Any

import pytest
from ansible_collections.hygon.dcu.plugins.filter.accelerator_pods import (
    FilterModule,
    accelerator_pods,
)

PREFIX = "hygon.com/"


def pod(
    name: str,
    *,
    requests: dict[str, str] | None = None,
    limits: dict[str, str] | None = None,
    init: bool = False,
    phase: str = "Running",
    owner: str | None = None,
) -> dict[str, Any]:
    container = {"name": "c", "resources": {"requests": requests or {}, "limits": limits or {}}}
    metadata: dict[str, Any] = {"namespace": "ml", "name": name}
    if owner:
        metadata["ownerReferences"] = [{"kind": owner, "name": "x"}]
    spec = (
        {"containers": [{"name": "sidecar"}], "initContainers": [container]}
        if init
        else {"containers": [container]}
    )
    return {"metadata": metadata, "spec": spec, "status": {"phase": phase}}


def names(entries: list[dict[str, Any]]) -> list[str]:
    return [f"{entry['namespace']}/{entry['name']}" for entry in entries]


def test_a_request_a_limit_or_an_init_container_under_the_prefix_is_chosen() -> None:
    pods = [
        pod("requests", requests={"hygon.com/dcu.partitioned.mig-2g.15gb": "1"}),
        pod("limits", limits={"hygon.com/dcu": "1"}),
        pod("init", init=True, limits={"hygon.com/dcu.partitioned": "1"}),
        pod("cpu-only", requests={"cpu": "1"}, limits={"memory": "1Gi"}),
        pod("other-vendor", limits={"example.com/gpu": "1"}),
    ]

    chosen = accelerator_pods(pods, PREFIX)

    assert names(chosen["evict"]) == ["ml/requests", "ml/limits", "ml/init"]
    assert chosen["daemonset"] == []


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
def test_finished_pods_are_left_alone(phase: str) -> None:
    assert accelerator_pods([pod("done", limits={"hygon.com/dcu": "1"}, phase=phase)], PREFIX) == {
        "evict": [],
        "daemonset": [],
    }


@pytest.mark.parametrize("phase", ["Running", "Pending", "Unknown", ""])
def test_pods_that_have_not_finished_are_chosen(phase: str) -> None:
    chosen = accelerator_pods([pod("live", limits={"hygon.com/dcu": "1"}, phase=phase)], PREFIX)
    assert names(chosen["evict"]) == ["ml/live"]


def test_daemonset_pods_are_listed_apart() -> None:
    pods = [
        pod("exporter", limits={"hygon.com/dcu": "1"}, owner="DaemonSet"),
        pod("trainer", limits={"hygon.com/dcu": "1"}, owner="ReplicaSet"),
    ]

    chosen = accelerator_pods(pods, PREFIX)

    assert chosen == {
        "evict": [{"namespace": "ml", "name": "trainer"}],
        "daemonset": [{"namespace": "ml", "name": "exporter"}],
    }


def test_pods_without_spec_status_or_resources_are_read_as_empty() -> None:
    bare = {"metadata": {"namespace": "ml", "name": "bare"}}
    nulls = {
        "metadata": {"namespace": "ml", "name": "nulls", "ownerReferences": None},
        "spec": {"containers": [{"name": "c", "resources": None}], "initContainers": None},
        "status": None,
    }
    assert accelerator_pods([bare, nulls], PREFIX) == {"evict": [], "daemonset": []}


def test_the_prefix_is_the_callers() -> None:
    pods = [pod("a", limits={"example.com/gpu": "1"}), pod("b", limits={"hygon.com/dcu": "1"})]
    assert names(accelerator_pods(pods, "example.com/")["evict"]) == ["ml/a"]


def test_the_plugin_exposes_the_filter_by_its_name() -> None:
    assert FilterModule().filters() == {"accelerator_pods": accelerator_pods}
