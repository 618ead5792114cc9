"""What Kubernetes 1.20 declares of the kinds the role applies: kubernetes-validate ships schemas
from 1.25 only, so the 1.20 renderings are checked against 1.20's own OpenAPI definitions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# Kubernetes v1.20.2's api/openapi-spec/swagger.json, cut to the definitions of the kinds the
# role applies (descriptions removed).
DEFINITIONS_1_20 = json.loads(
    (Path(__file__).with_name("kubernetes_1_20_definitions.json")).read_text()
)


def _fields_1_20_lacks(obj: Any, schema: dict[str, Any], path: str) -> list[str]:
    """Every field of obj that the 1.20 definition does not declare (strict, like the API
    server's "field not declared in schema"), recursively."""
    if "$ref" in schema:
        schema = DEFINITIONS_1_20["definitions"][schema["$ref"].rsplit("/", 1)[1]]
    unknown: list[str] = []
    if isinstance(obj, dict):
        properties = schema.get("properties")
        additional = schema.get("additionalProperties")
        for key, value in obj.items():
            if properties is not None and key in properties:
                unknown += _fields_1_20_lacks(value, properties[key], f"{path}.{key}")
            elif isinstance(additional, dict):
                unknown += _fields_1_20_lacks(value, additional, f"{path}.{key}")
            elif properties is not None or additional is False:
                unknown.append(f"{path}.{key}")
    elif isinstance(obj, list) and "items" in schema:
        for index, value in enumerate(obj):
            unknown += _fields_1_20_lacks(value, schema["items"], f"{path}[{index}]")
    return unknown


def fields_missing_in_1_20(obj: dict[str, Any]) -> list[str]:
    """The object's kind if 1.20 does not serve it, else every field 1.20 does not declare."""
    key = f"{obj['apiVersion']}/{obj['kind']}"
    root = DEFINITIONS_1_20["roots"].get(key)
    if root is None:
        return [f"{key}: not served by Kubernetes 1.20"]
    return _fields_1_20_lacks(obj, {"$ref": f"#/definitions/{root}"}, obj["kind"])
