"""node_labels_patch, and the capability labels it is given (module_utils/node_labels.py)."""

from __future__ import annotations

import re

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.hygon.dcu.plugins.filter.node_labels_patch import (
    FilterModule,
    node_labels_patch,
)
from ansible_collections.hygon.dcu.plugins.module_utils.cards import Card, Profile
from ansible_collections.hygon.dcu.plugins.module_utils.node_labels import (
    capability_labels,
    label_value,
)

COUNT = "hygon.com/dcu.count"
MODE = "hygon.com/dcu.mig.mode"
P2G = "hygon.com/dcu.mig-2g.15gb.count"


def test_only_what_differs_is_set_and_lost_capabilities_are_removed() -> None:
    current = {
        "kubernetes.io/hostname": "n1",
        "hygon.com/dcu.present": "true",
        "hygon.com/dcu.mig.config.state": "success",
        COUNT: "2",
        MODE: "off",
        P2G: "8",
        "hygon.com/dcu.mig-8g.63gb.count": "2",
    }
    wanted = {COUNT: "2", MODE: "on", P2G: "8"}
    assert node_labels_patch(current, wanted) == {
        MODE: "on",
        "hygon.com/dcu.mig-8g.63gb.count": None,
    }
    assert node_labels_patch(
        {**current, MODE: "on", "hygon.com/dcu.mig-8g.63gb.count": None}, wanted
    )
    right = {k: v for k, v in current.items() if not k.startswith("hygon.com/dcu.mig-8g")}
    assert node_labels_patch({**right, MODE: "on"}, wanted) == {}


def test_a_key_that_is_not_a_capability_is_refused() -> None:
    with pytest.raises(AnsibleFilterError, match=re.escape("hygon.com/dcu.present")):
        node_labels_patch({}, {"hygon.com/dcu.present": "false"})
    with pytest.raises(AnsibleFilterError, match="two mappings"):
        node_labels_patch([], {})
    assert FilterModule().filters()["node_labels_patch"] is node_labels_patch


def _card(index: int, model: str | None, healthy: bool = True) -> Card:
    profile = Profile(3, "2g.15gb", 1, 20, 16380, 4, ())
    return Card(index, None, 4, 80, 65520, (profile,), healthy, None, model)


def test_capability_labels_count_healthy_cards_and_name_one_model() -> None:
    labels = capability_labels([_card(0, "Hygon C-3000"), _card(1, "Hygon C-3000")], True)
    assert labels == {
        COUNT: "2",
        "hygon.com/dcu.mig.capable": "true",
        "hygon.com/dcu.product": "Hygon-C-3000",
        MODE: "on",
        P2G: "8",
    }
    mixed = capability_labels([_card(0, "A"), _card(1, "B"), _card(2, "A", healthy=False)], None)
    assert "hygon.com/dcu.product" not in mixed and MODE not in mixed
    assert mixed[COUNT] == "2" and mixed[P2G] == "8"


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("C-3000", "C-3000"),
        (" Hygon DCU (BW) ", "Hygon-DCU--BW"),
        ("***", ""),
        ("x" * 80, "x" * 63),
    ],
)
def test_label_value(text: str, value: str) -> None:
    assert label_value(text) == value
