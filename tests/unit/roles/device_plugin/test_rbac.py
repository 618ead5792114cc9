"""Least privilege: the role grants exactly the API calls the plugin's code makes."""

from __future__ import annotations

from hygon_dcu_plugin.kube import API_ACCESS

from .render import RoleRun


def _granted(run: RoleRun) -> set[tuple[str, str, str]]:
    granted: set[tuple[str, str, str]] = set()
    for obj in run.objects():
        if obj["kind"] not in ("ClusterRole", "Role"):
            continue
        for rule in obj["rules"]:
            assert "nonResourceURLs" not in rule
            assert "resourceNames" not in rule or rule["resourceNames"]
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        granted.add((group, resource, verb))
    return granted


def test_rules_equal_the_calls_in_kube_py(default_render: RoleRun) -> None:
    granted = _granted(default_render)
    assert not any("*" in part for access in granted for part in access), granted
    assert granted == set(API_ACCESS)


def test_events_are_written_never_read_and_only_pods_are_deleted(
    default_render: RoleRun,
) -> None:
    # Events on pods and the opt-in deletion of pods whose partition is lost
    granted = _granted(default_render)
    assert {verb for _group, resource, verb in granted if resource == "events"} == {"create"}
    assert {resource for _group, resource, verb in granted if verb == "delete"} == {"pods"}


def test_binding_gives_the_rules_to_the_plugin_only(default_render: RoleRun) -> None:
    binding = default_render.find("ClusterRoleBinding")
    role = default_render.find("ClusterRole")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": role["metadata"]["name"],
    }
    daemonset = default_render.find("DaemonSet")
    service_account = default_render.find("ServiceAccount")
    assert binding["subjects"] == [
        {
            "kind": "ServiceAccount",
            "name": service_account["metadata"]["name"],
            "namespace": service_account["metadata"]["namespace"],
        }
    ]
    pod_spec = daemonset["spec"]["template"]["spec"]
    assert pod_spec["serviceAccountName"] == service_account["metadata"]["name"]
    bindings = [obj for obj in default_render.objects() if obj["kind"].endswith("RoleBinding")]
    assert bindings == [binding]


def test_webhook_has_no_api_access(default_render: RoleRun) -> None:
    # The webhook answers AdmissionReviews from the request alone: no token in its pods.
    pod_spec = default_render.find("Deployment", "hygon-dcu-admission")["spec"]["template"]["spec"]
    assert pod_spec["automountServiceAccountToken"] is False
    assert pod_spec.get("serviceAccountName", "default") == "default"
