"""What each Kubernetes version accepts: strict schemas for 1.28-1.37, the 1.20 API for 1.20,
and the webhook's scope where the server has no matchConditions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml
from role_render import HostOutcome, RoleRun, run_role, run_role_on_hosts

from .conftest import RENDERED_VERSIONS
from .schema_1_20 import fields_missing_in_1_20

SCOPE_LABEL = "hygon.com/dcu.admission"


@pytest.mark.parametrize("version", [v for v in RENDERED_VERSIONS if v != "1.20"])
def test_rendering_validates_strictly_for_its_version(
    renders_by_version: dict[str, RoleRun], default_render: RoleRun, version: str
) -> None:
    objects = renders_by_version[version].objects()
    # the same objects for every version (test_manifests.py lists them), only their fields differ
    assert [(o["kind"], o["metadata"]["name"]) for o in objects] == [
        (o["kind"], o["metadata"]["name"]) for o in default_render.objects()
    ]
    for obj in objects:
        kubernetes_validate.validate(obj, version, strict=True)


def test_1_20_rendering_has_only_fields_1_20_declares(
    renders_by_version: dict[str, RoleRun],
) -> None:
    # Checks every object's apiVersion/kind is served by 1.20 and every field, at any depth,
    # is declared by 1.20's OpenAPI definition of that kind (values are not checked).
    for obj in renders_by_version["1.20"].objects():
        assert fields_missing_in_1_20(obj) == [], obj["kind"]


def test_the_1_20_check_finds_what_1_20_lacks(renders_by_version: dict[str, RoleRun]) -> None:
    # the newest rendering carries matchConditions and policy/v1, both unknown to 1.20
    found = [
        missing
        for obj in renders_by_version["1.37"].objects()
        for missing in fields_missing_in_1_20(obj)
    ]
    assert found == [
        "policy/v1/PodDisruptionBudget: not served by Kubernetes 1.20",
        "ValidatingWebhookConfiguration.webhooks[0].matchConditions",
        "ValidatingWebhookConfiguration.webhooks[1].matchConditions",
    ]


def _webhooks(run: RoleRun) -> tuple[dict[str, Any], dict[str, Any]]:
    """The pod CREATE webhook and the pod UPDATE guard."""
    creates, writes = run.find("ValidatingWebhookConfiguration")["webhooks"]
    assert creates["failurePolicy"] == writes["failurePolicy"] == "Fail"
    return creates, writes


def _webhook(run: RoleRun) -> dict[str, Any]:
    return _webhooks(run)[0]


def test_pod_disruption_budget_version(renders_by_version: dict[str, RoleRun]) -> None:
    versions = {
        version: run.find("PodDisruptionBudget")["apiVersion"]
        for version, run in renders_by_version.items()
    }
    assert versions == {
        "1.20": "policy/v1beta1",
        "1.28": "policy/v1",
        "1.31": "policy/v1",
        "1.34": "policy/v1",
        "1.37": "policy/v1",
    }


def test_match_conditions_only_where_they_are_ga(renders_by_version: dict[str, RoleRun]) -> None:
    for version, run in renders_by_version.items():
        webhook = _webhook(run)
        selector = webhook["namespaceSelector"]["matchExpressions"]
        if version in ("1.20", "1.28"):
            # nothing tells a partition pod from another before the call: opt-in namespaces only
            assert "matchConditions" not in webhook, version
            assert selector[0] == {"key": SCOPE_LABEL, "operator": "In", "values": ["enabled"]}
        else:
            assert [c["name"] for c in webhook["matchConditions"]] == ["requests-hygon-resource"]
            assert selector[0] == {
                "key": SCOPE_LABEL,
                "operator": "NotIn",
                "values": ["excluded"],
            }


def test_pod_updates_reach_the_guard_from_the_two_accounts_only_where_they_can_be_told_apart(
    renders_by_version: dict[str, RoleRun],
) -> None:
    for version, run in renders_by_version.items():
        writes = _webhooks(run)[1]
        # every namespace: a stolen token could aim at any
        assert "namespaceSelector" not in writes, version
        if version in ("1.20", "1.28"):
            assert "matchConditions" not in writes, version
        else:
            (condition,) = writes["matchConditions"]
            # the users the server checks are the users the API server sends
            args = run.find("Deployment", "hygon-dcu-admission")["spec"]["template"]["spec"][
                "containers"
            ][0]["args"]
            users = [
                arg.split("=", 1)[1]
                for flag in ("--plugin-user=", "--extender-user=")
                for arg in args
                if arg.startswith(flag)
            ]
            assert condition["expression"] == f"request.userInfo.username in {json.dumps(users)}"
            # and the first is the account the device plugin's pods run as
            plugin = run.find("DaemonSet")["spec"]["template"]["spec"]["serviceAccountName"]
            namespace = run.find("Namespace")["metadata"]["name"]
            assert users[0] == f"system:serviceaccount:{namespace}:{plugin}"


def test_namespace_exclusion_without_the_name_label(
    renders_by_version: dict[str, RoleRun],
) -> None:
    for version, run in renders_by_version.items():
        selector = _webhook(run)["namespaceSelector"]["matchExpressions"]
        by_name = [e for e in selector if e["key"] == "kubernetes.io/metadata.name"]
        # the role's own namespace is excluded by a label it sets, on every version
        namespace = run.find("Namespace")
        assert namespace["metadata"]["labels"][SCOPE_LABEL] == "excluded"
        if version == "1.20":
            # a NotIn on a label no namespace has would match them all
            assert by_name == []
        else:
            assert by_name == [
                {
                    "key": "kubernetes.io/metadata.name",
                    "operator": "NotIn",
                    "values": ["hygon-dcu-system"],
                }
            ]


def test_removal_uses_the_servers_pdb_version(render_dir: Path) -> None:
    run = run_role(
        render_dir, hygon_dcu_device_plugin_state="absent", hygon_dcu_kubernetes_version="1.20"
    )
    assert run.returncode == 0, run.output
    removal = yaml.safe_load((render_dir / "removal.yaml").read_text())
    (pdb,) = [item for item in removal if item["kind"] == "PodDisruptionBudget"]
    assert pdb["api_version"] == "policy/v1beta1"


REFUSED_VERSIONS = ["1.19", "1", "v2.0", "1.30x"]


@pytest.fixture(scope="module")
def version_refusals(tmp_path_factory: pytest.TempPathFactory) -> dict[str, HostOutcome]:
    """Each of REFUSED_VERSIONS a host of one playbook run."""
    return run_role_on_hosts(
        tmp_path_factory.mktemp("version-refusals"),
        {f"version-{v}": {"hygon_dcu_kubernetes_version": v} for v in REFUSED_VERSIONS},
    )


@pytest.mark.parametrize("version", REFUSED_VERSIONS)
def test_unsupported_or_malformed_version_is_refused(
    version_refusals: dict[str, HostOutcome], version: str
) -> None:
    refused = version_refusals[f"version-{version}"]
    assert refused.failed, refused.output
    assert "the role supports Kubernetes 1.20 and newer" in refused.message
    assert not refused.render_dir.exists()
