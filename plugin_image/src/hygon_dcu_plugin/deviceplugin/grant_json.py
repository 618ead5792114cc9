"""The file format both kinds of grant share (``grants.Grant``, ``slice_grants.SliceGrant``):
one JSON object, keys sorted, tuples written as lists, a schema number each reader checks."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any


def dump(record: Any) -> str:
    """A frozen grant dataclass as its file's text."""
    data = asdict(record)
    data["containers"] = list(record.containers)
    data["device_ids"] = list(record.device_ids)
    return json.dumps(data, sort_keys=True, indent=1) + "\n"


def load(text: str, schema: int) -> dict[str, Any]:
    """The object in a grant file's text; ValueError unless it is an object of ``schema``."""
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    if data.get("schema") != schema:
        raise ValueError(f"unknown schema {data.get('schema')!r} (this plugin reads {schema})")
    return data
