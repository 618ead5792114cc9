# Copyright: hygon.dcu contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The Node labels that say what a Hygon DCU node can do (docs/operating.md, "Node labels").

One definition for every writer: the mig_node role (mig_info reports the capability labels,
the node_labels_patch filter turns them into a patch) and the device plugin, which keeps them
true while it runs. A patch sets the labels that differ and removes the capability labels the
node no longer earns (a profile gone, the product unknown); it never touches another label.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from .cards import Card

_DCU = "hygon.com/dcu."
PRODUCT_LABEL = _DCU + "product"  # the cards' model, when they all have the same one
COUNT_LABEL = _DCU + "count"  # healthy cards
MIG_CAPABLE_LABEL = _DCU + "mig.capable"  # "true" when a card offers partition profiles
MIG_MODE_LABEL = _DCU + "mig.mode"  # "on" or "off"
# Per profile: how many of it the node's healthy cards hold when empty, e.g.
# hygon.com/dcu.mig-2g.15gb.count.
PROFILE_COUNT_LABEL = _DCU + "mig-{}.count"

_FIXED = frozenset({PRODUCT_LABEL, COUNT_LABEL, MIG_CAPABLE_LABEL, MIG_MODE_LABEL})
_PROFILE_KEY = re.compile(re.escape(_DCU) + r"mig-([A-Za-z0-9._-]+)\.count")
# A label key's name part (after "hygon.com/") is at most 63 characters.
_NAME_MAX = 63
_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")


def label_value(text: str) -> str:
    """``text`` as a label value: other characters become "-", trimmed to what the API takes
    ("" when nothing is left)."""
    value = re.sub(r"[^-A-Za-z0-9_.]", "-", text)[:63]
    value = re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", value)
    return value if _VALUE.fullmatch(value) else ""


def capability_labels(cards: Sequence[Card], mode_on: bool | None) -> dict[str, str]:
    """The capability labels of a node with ``cards`` (its mode unknown when ``mode_on`` is
    None: no mode label then)."""
    healthy = [card for card in cards if card.healthy]
    labels = {
        COUNT_LABEL: str(len(healthy)),
        MIG_CAPABLE_LABEL: "true" if any(card.profiles for card in healthy) else "false",
    }
    models = {label_value(card.model or "") for card in healthy}
    if len(models) == 1 and "" not in models:
        labels[PRODUCT_LABEL] = models.pop()
    if mode_on is not None:
        labels[MIG_MODE_LABEL] = "on" if mode_on else "off"
    counts: dict[str, int] = {}
    for card in healthy:
        for profile in card.profiles:
            counts[profile.name] = counts.get(profile.name, 0) + profile.gi_count_max
    for name, count in counts.items():
        key = PROFILE_COUNT_LABEL.format(name)
        if _PROFILE_KEY.fullmatch(key) and len(key.split("/", 1)[1]) <= _NAME_MAX:
            labels[key] = str(count)
    return labels


def is_capability_label(key: str) -> bool:
    return key in _FIXED or _PROFILE_KEY.fullmatch(key) is not None


def labels_patch(current: Mapping[str, str], wanted: Mapping[str, str]) -> dict[str, str | None]:
    """The merge patch of ``metadata.labels`` that makes the node's capability labels
    ``wanted``: each value that differs, and None (remove) for each capability label the node
    carries and ``wanted`` lacks. Empty when the node is already right."""
    patch: dict[str, str | None] = {
        key: value for key, value in wanted.items() if current.get(key) != value
    }
    for key in current:
        if is_capability_label(key) and key not in wanted:
            patch[key] = None
    return patch
