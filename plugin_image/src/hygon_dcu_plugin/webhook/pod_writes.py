"""The guard on pod UPDATEs by the product's own accounts: the part of "patch" RBAC cannot say.

RBAC grants the device plugin and the extender ``patch`` on pods, and a verb on a resource is
all RBAC can grant: with it alone their tokens could change any pod's labels (and so which
Service sends it traffic, or which ReplicaSet owns it) or its container images. Each writes only
its own keys (docs/privileges.md):

- the device plugin: a grant annotation per container, keys under ``ANNOTATION_PREFIX``, set
  (added or rewritten), never removed;
- the extender: ``RESERVATION_ANNOTATION``, set, never removed; ``RESERVED_LABEL``, set to
  ``RESERVED_VALUE`` or removed.

An UPDATE of a pod by either account is allowed only when the pod after it equals the pod before
it but for those keys and the fields the API server itself rewrites on every write
(``resourceVersion``, ``managedFields``, ``generation``). Each value set is bounded. Every other
user's update is not this guard's business (RBAC decides it) and is allowed at once.

Pure functions of the review: no I/O. The work is linear in the two pods' size, which the
server's body limit bounds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hygon_dcu_plugin.request import Reason, Violation
from hygon_dcu_plugin.reservation import MAX_TEXT as MAX_RESERVATION_CHARS
from hygon_dcu_plugin.shown import show_names
from hygon_dcu_plugin.vocabulary import (
    ANNOTATION_PREFIX,
    RESERVATION_ANNOTATION,
    RESERVED_LABEL,
    RESERVED_VALUE,
)

# A grant's JSON (deviceplugin/allocator.py, slice_allocator.py) holds a card address, a
# container name (63 characters at most), a profile or slice size and an id: under 400
# characters. Anything far longer is not a grant.
MAX_GRANT_CHARS = 1024

# Fields of metadata the API server sets on every write, whoever writes.
SERVER_WRITTEN = frozenset({"resourceVersion", "managedFields", "generation"})


@dataclass(frozen=True)
class Writable:
    """What one account may change in a pod, and how it is named in a denial."""

    who: str
    # Annotation keys it may set: exact keys, and prefixes of keys; each with its longest value.
    annotations: Mapping[str, int] = field(default_factory=dict)
    annotation_prefixes: Mapping[str, int] = field(default_factory=dict)
    # Label keys it may set to the one value given, or remove.
    labels: Mapping[str, str] = field(default_factory=dict)

    def annotation_limit(self, key: str) -> int | None:
        """The longest value ``key`` may be set to, or None: not this account's key."""
        if key in self.annotations:
            return self.annotations[key]
        return next(
            (limit for prefix, limit in self.annotation_prefixes.items() if key.startswith(prefix)),
            None,
        )

    def describe(self) -> str:
        keys = [*self.annotations, *(prefix + "*" for prefix in self.annotation_prefixes)]
        text = "annotations " + ", ".join(keys) if keys else "no annotation"
        if self.labels:
            text += "; labels " + ", ".join(self.labels)
        return text


PLUGIN_WRITES = Writable(
    "the device plugin", annotation_prefixes={ANNOTATION_PREFIX: MAX_GRANT_CHARS}
)
EXTENDER_WRITES = Writable(
    "the scheduler extender",
    annotations={RESERVATION_ANNOTATION: MAX_RESERVATION_CHARS},
    labels={RESERVED_LABEL: RESERVED_VALUE},
)


@dataclass(frozen=True)
class PodWriters:
    """The usernames of the product's accounts ('' : that account is not guarded)."""

    plugin: str = ""
    extender: str = ""

    def writable(self, username: str) -> Writable | None:
        """What ``username`` may change, or None: not a guarded account."""
        if not username:
            return None
        if username == self.plugin:
            return PLUGIN_WRITES
        if username == self.extender:
            return EXTENDER_WRITES
        return None


# No account guarded: what a server started without the usernames checks.
UNGUARDED = PodWriters()


class NotAPod(ValueError):
    """The review's object or oldObject is not a pod with metadata (the review is bad)."""


def check_update(
    old: Mapping[str, Any], new: Mapping[str, Any], writable: Writable
) -> Violation | None:
    """None when ``new`` differs from ``old`` only in what ``writable`` allows; else the
    violation that names what else changed."""
    old_meta, new_meta = _metadata(old, "oldObject"), _metadata(new, "object")
    beyond: list[str] = []
    too_long: list[str] = []
    old_annotations = _strings(old_meta, "annotations", "oldObject")
    new_annotations = _strings(new_meta, "annotations", "object")
    for key in _changed(old_annotations, new_annotations):
        limit = writable.annotation_limit(key)
        value = new_annotations.get(key)
        if limit is None or value is None:  # not its key, or removed
            beyond.append(f"annotation {key}")
        elif len(value) > limit:
            too_long.append(f"annotation {key} ({len(value)} characters, at most {limit})")
    old_labels = _strings(old_meta, "labels", "oldObject")
    new_labels = _strings(new_meta, "labels", "object")
    for key in _changed(old_labels, new_labels):
        value = new_labels.get(key)
        if key not in writable.labels or value not in (None, writable.labels[key]):
            beyond.append(f"label {key}")
    skipped = SERVER_WRITTEN | {"annotations", "labels"}
    beyond += [f"metadata.{key}" for key in _changed(old_meta, new_meta) if key not in skipped]
    beyond += [key for key in _changed(old, new) if key != "metadata"]
    if not beyond and not too_long:
        return None
    problems = []
    if beyond:
        problems.append(f"it changes {show_names(beyond)}")
    if too_long:
        problems.append(f"it sets {show_names(too_long)}")
    return Violation(
        Reason.WRITE_BEYOND_OWN_KEYS,
        "",
        f"{writable.who}'s account may change only its own keys of a pod "
        f"({writable.describe()}), and {' and '.join(problems)}; a token of that account is "
        "being used for something else: rotate it and see docs/privileges.md",
    )


def _metadata(pod: Mapping[str, Any], where: str) -> Mapping[str, Any]:
    metadata = pod.get("metadata")
    if not isinstance(metadata, Mapping):
        raise NotAPod(f"the review's {where} has no metadata object")
    return metadata


def _strings(metadata: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    value = metadata.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise NotAPod(f"the review's {where} has metadata.{key} that is not an object")
    return value


def _changed(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """The keys whose values differ (added, removed or changed), sorted."""
    return sorted(key for key in old.keys() | new.keys() if old.get(key) != new.get(key))
