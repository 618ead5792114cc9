"""The Kubernetes objects the mig_node role creates or patches, rendered by Ansible from the
role's own templates, validated against the Kubernetes 1.28-1.37 schemas (strict: unknown
fields are errors), plus the pod choices the role makes from a node's pod list."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import pytest
from fake_api_server.patching import merge_patch  # what kubernetes.core.k8s merge_type=merge sends
from playbook_runner import run_playbook

from .runner import ROLE

VERSIONS = [f"1.{minor}.0" for minor in range(28, 38)]
NODE = "gpu-node-7.example.com"
LIVE_UUID = "3b2a1c9e-7f00-4c1d-9a55-0123456789ab"
GONE_UUID = "9e1c44b0-1d2b-4c4e-8f1a-2b3c4d5e6f70"


def pod(
    name: str,
    *,
    limits: dict[str, str] | None = None,
    init_requests: dict[str, str] | None = None,
    phase: str = "Running",
    owner: str = "ReplicaSet",
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "nodeName": NODE,
        "containers": [
            {
                "name": "main",
                "image": "registry.local/app:1",
                "resources": {"limits": limits} if limits else {},
            }
        ],
    }
    if init_requests:
        spec["initContainers"] = [
            {
                "name": "warmup",
                "image": "registry.local/app:1",
                "resources": {"requests": init_requests},
            }
        ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "ml",
            "uid": f"uid-{name}",
            "annotations": annotations or {},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": owner,
                    "name": f"{name}-owner",
                    "uid": f"owner-{name}",
                }
            ],
        },
        "spec": spec,
        "status": {"phase": phase},
    }


def grant(uuid: str) -> dict[str, str]:
    return {
        "hygon.com/dcu.partition.main": json.dumps(
            {"card": "0000:09:00.0", "profile": "2g.15gb", "placement": "0:1", "uuid": uuid}
        )
    }


PODS = [
    pod(
        "trainer",
        limits={
            "hygon.com/dcu.partitioned": "1",
            "hygon.com/dcu.partitioned.mig-2g.15gb": "1",
            "cpu": "2",
        },
        annotations=grant(GONE_UUID),
    ),
    pod("whole-card", limits={"hygon.com/dcu": "1"}),
    pod("init-only", init_requests={"hygon.com/dcu.partitioned": "1"}),
    pod(
        "healthy-partition", limits={"hygon.com/dcu.partitioned": "1"}, annotations=grant(LIVE_UUID)
    ),
    pod("web", limits={"cpu": "1", "nvidia.com/gpu": "1"}),
    pod("finished", limits={"hygon.com/dcu": "1"}, phase="Succeeded", annotations=grant(GONE_UUID)),
    pod("exporter", limits={"hygon.com/dcu": "1"}, owner="DaemonSet"),
]


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("mig_node_k8s") / "rendered.json"
    variables = {
        "role_dir": str(ROLE),
        "out": str(out),
        "node_name": NODE,
        "pods": PODS,
        "live_uuids": [LIVE_UUID],
    }
    run = run_playbook(
        [
            str(Path(__file__).with_name("render_k8s.yml")),
            "-i",
            "localhost,",
            "-c",
            "local",
            "-e",
            f"ansible_python_interpreter={sys.executable}",
        ],
        extra_vars=variables,
    )
    assert run.returncode == 0, run.output
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def live_node() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": NODE,
            "labels": {"hygon.com/dcu.present": "true", "hygon.com/dcu.device-plugin": "parked"},
        },
        "spec": {"unschedulable": True},
        "status": {"allocatable": {"hygon.com/dcu.partitioned": "8", "cpu": "64"}},
    }


def validate_everywhere(obj: dict[str, Any]) -> None:
    for version in VERSIONS:
        kubernetes_validate.validate(obj, version, strict=True)


@pytest.mark.parametrize("name", ["cordon", "uncordon", "park", "unpark"])
def test_node_patches_are_valid_nodes_and_stay_valid_once_applied(
    rendered: dict[str, Any], name: str
) -> None:
    patch = rendered[name]
    assert patch["kind"] == "Node"
    assert patch["metadata"]["name"] == NODE
    validate_everywhere(patch)
    validate_everywhere(merge_patch(live_node(), patch))


def test_strict_validation_rejects_an_unknown_field() -> None:
    # Guards the guard: a misspelt field must not pass as "valid".
    bad = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": NODE},
        "spec": {"unschedulabel": True},
    }
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, VERSIONS[0], strict=True)


def test_cordon_and_uncordon_set_unschedulable(rendered: dict[str, Any]) -> None:
    assert merge_patch(live_node(), rendered["cordon"])["spec"]["unschedulable"] is True
    assert merge_patch(live_node(), rendered["uncordon"])["spec"]["unschedulable"] is False


def test_park_sets_the_label_the_daemonset_excludes_and_unpark_removes_it(
    rendered: dict[str, Any],
) -> None:
    unparked = merge_patch(live_node(), rendered["unpark"])
    assert "hygon.com/dcu.device-plugin" not in unparked["metadata"]["labels"]
    assert unparked["metadata"]["labels"]["hygon.com/dcu.present"] == "true"
    parked = merge_patch(unparked, rendered["park"])
    assert parked["metadata"]["labels"]["hygon.com/dcu.device-plugin"] == "parked"


def test_pods_requesting_any_hygon_resource_are_chosen_for_eviction(
    rendered: dict[str, Any],
) -> None:
    chosen = [entry["name"] for entry in rendered["selection"]["evict"]]
    # Limits or init-container requests on any hygon.com/ resource; never finished pods,
    # other vendors' pods or DaemonSet pods (the cordon does not keep those away).
    assert chosen == ["trainer", "whole-card", "init-only", "healthy-partition"]
    assert [entry["name"] for entry in rendered["selection"]["daemonset"]] == ["exporter"]


def test_eviction_marks_are_valid_pod_patches_for_exactly_the_chosen_pods(
    rendered: dict[str, Any],
) -> None:
    marks = rendered["marks"]
    assert [(m["metadata"]["namespace"], m["metadata"]["name"]) for m in marks] == [
        ("ml", "trainer"),
        ("ml", "whole-card"),
        ("ml", "init-only"),
        ("ml", "healthy-partition"),
    ]
    by_name = {p["metadata"]["name"]: p for p in PODS}
    for mark in marks:
        assert mark["metadata"]["labels"] == {"hygon.com/dcu.evict": "true"}
        validate_everywhere(mark)
        validate_everywhere(merge_patch(by_name[mark["metadata"]["name"]], mark))


def test_only_running_pods_whose_partition_is_gone_are_stale(rendered: dict[str, Any]) -> None:
    assert rendered["stale"] == [{"namespace": "ml", "name": "trainer", "containers": ["main"]}]
