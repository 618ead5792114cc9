"""Kubernetes' recommended labels on every object the role renders and on its workloads' pods:
part-of, managed-by, instance (the namespace) and version (the runtime image's tag)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from role_render import RoleRun, run_role

from .conftest import ALONE, POLICY_ON


def common(namespace: str, version: str | None) -> dict[str, str]:
    labels = {
        "app.kubernetes.io/part-of": "hygon-dcu",
        "app.kubernetes.io/managed-by": "hygon.dcu",
        "app.kubernetes.io/instance": namespace,
    }
    if version is not None:
        labels["app.kubernetes.io/version"] = version
    return labels


def unlabelled(run: RoleRun, wanted: dict[str, str]) -> list[str]:
    """Each object (and pod template) whose labels lack one of ``wanted`` or the object's name."""
    missing = []
    for obj in run.objects():
        where = f"{obj['kind']}/{obj['metadata']['name']}"
        labelled: list[tuple[str, dict[str, Any]]] = [(where, obj["metadata"].get("labels") or {})]
        template = (obj.get("spec") or {}).get("template")
        if template:
            labelled.append((f"{where} pods", template["metadata"].get("labels") or {}))
        for name, labels in labelled:
            if not wanted.items() <= labels.items():
                missing.append(f"{name}: {labels}")
            if obj["kind"] != "Namespace" and "app.kubernetes.io/name" not in labels:
                missing.append(f"{name}: no app.kubernetes.io/name")
    return missing


def test_every_default_object_carries_the_recommended_labels(default_render: RoleRun) -> None:
    assert not unlabelled(default_render, common("hygon-dcu-system", "0.1.0"))


def test_every_extender_object_carries_the_recommended_labels(extender_render: RoleRun) -> None:
    assert not unlabelled(extender_render, common("hygon-dcu-system", "0.1.0"))


@pytest.mark.parametrize(
    ("image", "version"),
    [
        ("registry.local:5000/hygon/plugin:v2.0.1", "v2.0.1"),
        # Named by digest alone: no version to tell.
        ("registry.local:5000/hygon/plugin@sha256:" + "ab" * 32, None),
    ],
    ids=["tag", "digest"],
)
def test_the_version_is_the_image_tag(tmp_path: Path, image: str, version: str | None) -> None:
    run = run_role(
        tmp_path / "out",
        hygon_dcu_device_plugin_image=image,
        hygon_dcu_namespace="dcu-rack3",
        **ALONE,
        **POLICY_ON,
    )
    assert run.returncode == 0, run.output
    assert not unlabelled(run, common("dcu-rack3", version))
    if version is None:
        assert not [
            obj
            for obj in run.objects()
            if "app.kubernetes.io/version" in (obj["metadata"].get("labels") or {})
        ]
