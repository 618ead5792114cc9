"""The resource types the fake serves and their discovery documents, per Kubernetes minor."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ResourceType:
    group_version: str
    plural: str
    kind: str
    namespaced: bool

    @property
    def group(self) -> str:
        return self.group_version.rpartition("/")[0]


_COMMON = (
    ResourceType("v1", "namespaces", "Namespace", False),
    ResourceType("v1", "nodes", "Node", False),
    ResourceType("v1", "pods", "Pod", True),
    ResourceType("v1", "events", "Event", True),
    ResourceType("v1", "serviceaccounts", "ServiceAccount", True),
    ResourceType("v1", "configmaps", "ConfigMap", True),
    ResourceType("v1", "secrets", "Secret", True),
    ResourceType("v1", "services", "Service", True),
    ResourceType("apps/v1", "daemonsets", "DaemonSet", True),
    ResourceType("apps/v1", "deployments", "Deployment", True),
    ResourceType("coordination.k8s.io/v1", "leases", "Lease", True),
    ResourceType("rbac.authorization.k8s.io/v1", "clusterroles", "ClusterRole", False),
    ResourceType(
        "rbac.authorization.k8s.io/v1", "clusterrolebindings", "ClusterRoleBinding", False
    ),
    ResourceType("rbac.authorization.k8s.io/v1", "roles", "Role", True),
    ResourceType("rbac.authorization.k8s.io/v1", "rolebindings", "RoleBinding", True),
    ResourceType("networking.k8s.io/v1", "networkpolicies", "NetworkPolicy", True),
    ResourceType(
        "admissionregistration.k8s.io/v1",
        "validatingwebhookconfigurations",
        "ValidatingWebhookConfiguration",
        False,
    ),
    # Read by the device_plugin role to tell whether cert-manager is installed.
    ResourceType(
        "apiextensions.k8s.io/v1", "customresourcedefinitions", "CustomResourceDefinition", False
    ),
)
# Subresources served for pods: (name, group/version of its body, kind, verbs).
_POD_SUBRESOURCES = (
    ("pods/eviction", "policy/v1", "Eviction", ["create"]),
    ("pods/binding", "v1", "Binding", ["create"]),
)
_VERBS = ["create", "delete", "get", "list", "patch", "update", "watch"]


def resource_types(minor: int) -> tuple[ResourceType, ...]:
    """What a server of Kubernetes 1.<minor> serves of the kinds the product uses:
    PodDisruptionBudget moved to policy/v1 in 1.21."""
    pdb_version = "policy/v1" if minor >= 21 else "policy/v1beta1"
    return (
        *_COMMON,
        ResourceType(pdb_version, "poddisruptionbudgets", "PodDisruptionBudget", True),
    )


def discovery(parts: list[str], minor: int, patch: int = 2) -> dict[str, Any] | None:
    """The discovery document at /<parts>, or None when the path is not one."""
    types = resource_types(minor)
    if parts == ["version"]:
        return {"major": "1", "minor": str(minor), "gitVersion": f"v1.{minor}.{patch}"}
    if parts == ["api"]:
        return {"kind": "APIVersions", "versions": ["v1"]}
    if parts == ["apis"]:
        groups = []
        for group_version in sorted({t.group_version for t in types} - {"v1"}):
            entry = {"groupVersion": group_version, "version": group_version.split("/")[1]}
            groups.append(
                {
                    "name": group_version.split("/")[0],
                    "versions": [entry],
                    "preferredVersion": entry,
                }
            )
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}
    if not (
        (parts[:1] == ["api"] and len(parts) == 2) or (parts[:1] == ["apis"] and len(parts) == 3)
    ):
        return None
    group_version = "/".join(parts[1:])
    resources: list[dict[str, Any]] = [
        {
            "name": t.plural,
            "singularName": t.kind.lower(),
            "namespaced": t.namespaced,
            "kind": t.kind,
            "verbs": _VERBS,
        }
        for t in types
        if t.group_version == group_version
    ]
    if group_version == "v1":
        for name, body_version, kind, verbs in _POD_SUBRESOURCES:
            group, _slash, version = body_version.rpartition("/")
            resources.append(
                {
                    "name": name,
                    "singularName": "",
                    "namespaced": True,
                    "group": group,
                    "version": version,
                    "kind": kind,
                    "verbs": verbs,
                }
            )
    if not resources:
        return None
    return {"kind": "APIResourceList", "groupVersion": group_version, "resources": resources}
