"""minimal_definitions: references to Kubernetes objects as the least definitions naming them."""

from __future__ import annotations

from ansible_collections.hygon.dcu.plugins.filter.minimal_definitions import (
    FilterModule,
    minimal_definitions,
)


def test_namespaced_and_cluster_scoped_references_keep_their_order() -> None:
    references = [
        {"api_version": "apps/v1", "kind": "DaemonSet", "name": "plugin", "namespace": "dcu"},
        {"api_version": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "name": "plugin"},
        {"api_version": "v1", "kind": "Namespace", "name": "dcu"},
    ]

    assert minimal_definitions(references) == [
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": "plugin", "namespace": "dcu"},
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "plugin"},
        },
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "dcu"}},
    ]


def test_nothing_to_delete_is_no_definition() -> None:
    assert minimal_definitions([]) == []


def test_the_plugin_exposes_the_filter_by_its_name() -> None:
    assert FilterModule().filters() == {"minimal_definitions": minimal_definitions}
