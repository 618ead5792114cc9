"""What the API server's validation refuses in the fields the product writes, so the fake
refuses what a real server refuses: annotation keys, the annotations' total size, and the
Lease fields the device plugin sets."""

from __future__ import annotations

import re
from typing import Any

# An optional DNS-subdomain prefix (at most 253 characters) and "/", then a name of at most 63
# characters, alphanumeric at both ends, "-", "_", "." inside.
_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_PREFIX = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
# metav1.MicroTime is parsed with Go's RFC3339Micro layout: exactly six fraction digits.
MICRO_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}(Z|[+-]\d\d:\d\d)")
ANNOTATIONS_MAX = 256 * 1024  # the limit on all annotations of one object, in bytes


def annotation_key_problem(key: str) -> str | None:
    """Why the API server would refuse ``key`` (its wording, roughly), or None."""
    prefix, slash, name = key.rpartition("/")
    why = None
    if slash and (len(prefix) > 253 or not _PREFIX.fullmatch(prefix)):
        why = "prefix part must be a DNS subdomain"
    elif len(name) > 63:
        why = "name part must be no more than 63 characters"
    elif not _NAME.fullmatch(name):
        why = "name part must consist of alphanumeric characters, '-', '_' or '.'"
    return None if why is None else f"metadata.annotations: Invalid value: {key!r}: {why}"


def metadata_problem(obj: dict[str, Any]) -> str | None:
    """The first refusal for an object's annotation and label keys and sizes, or None."""
    metadata = obj.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    if sum(len(k) + len(v or "") for k, v in annotations.items()) > ANNOTATIONS_MAX:
        return f"metadata.annotations: Too long: must have at most {ANNOTATIONS_MAX} bytes"
    for field in ("annotations", "labels"):
        for key in metadata.get(field) or {}:
            problem = annotation_key_problem(key)
            if problem:
                return problem.replace("metadata.annotations", f"metadata.{field}")
    return None


def lease_problem(lease: dict[str, Any]) -> str | None:
    """What the API server's validation would refuse in a Lease body, or None."""
    spec = lease.get("spec") or {}
    for key in ("renewTime", "acquireTime"):
        value = spec.get(key)
        if value is not None and not (isinstance(value, str) and MICRO_TIME.fullmatch(value)):
            return f"spec.{key}: {value!r} is not a MicroTime (RFC3339 with 6 fraction digits)"
    duration = spec.get("leaseDurationSeconds")
    if duration is not None and (not isinstance(duration, int) or duration <= 0):
        return f"spec.leaseDurationSeconds: {duration!r} must be a positive whole number"
    return metadata_problem(lease)


def object_problem(obj: dict[str, Any]) -> str | None:
    """The validation the fake applies to every write."""
    return lease_problem(obj) if obj.get("kind") == "Lease" else metadata_problem(obj)
