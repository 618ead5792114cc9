"""The costliest geometry texts a plugin token can write, for the extender's memory and cost
tests (docs/dev/extender.md, "Bounds").

``largest_legal``: the largest document the bounds allow (16 cards of 8 slices; a card with 8
profiles of 8 placements, every slice occupied and owned; 16 cards offered for logical slices
with 8 live slices each; every number and name at its widest), its profiles distinct from node
to node so nothing is shared between nodes.
``over_the_old_bound``: the largest one the extender accepted before those bounds (64 KiB:
cards of 64 slices with 32 profiles of 64 placements each). Both are written here, not with
the codec, so they are the same texts whichever bounds the product has; a test checks the
first is exactly geometry.MAX_TEXT long.
"""

from __future__ import annotations

import json
from typing import Any

CARDS = 16
SLICES = 8
NAME = 32  # characters of a profile name
UID = 64  # characters of an owner's pod uid
MEMORY_MIB = 1 << 24
CU = 4096
LIVE_SLICES = 8  # live logical slices a card offered for slices may list
GENERATION = (1 << 53) - 1
OLD_MAX_TEXT = 64 * 1024


def _text(doc: dict[str, Any]) -> str:
    return json.dumps(doc, separators=(",", ":"))


def profile_name(index: int) -> str:
    return f"{index}".ljust(NAME, "n")


def largest_legal(node: int, carved: bool = True) -> str:
    """Node ``node``'s largest legal geometry (``node`` below 10,000 keeps every number at
    its widest); not ``carved``: no slice occupied or owned, so a pod can be placed."""
    cards = [
        {
            "pci": f"ffff:{card:02x}:1f.7",
            "slices": SLICES,
            "profiles": [
                {
                    "name": profile_name(index),
                    "slices": SLICES,
                    "memory_mib": MEMORY_MIB - (node * CARDS + card) * SLICES - index,
                    "cu": CU,
                    "placements": [[start, 1] for start in range(SLICES)],
                }
                for index in range(SLICES)
            ],
            "occupied": list(range(SLICES)) if carved else [],
            "owners": [
                [start, 1, f"{node}-{card}-{start}-".ljust(UID, "u")] for start in range(SLICES)
            ]
            if carved
            else [],
        }
        for card in range(CARDS)
    ]
    sliced = [
        {
            "pci": f"ffff:{card:02x}:1f.7",
            "cu": CU,
            "mib": MEMORY_MIB,
            "max": LIVE_SLICES,
            "whole": False,
            "live": [
                [
                    CU // LIVE_SLICES,
                    MEMORY_MIB // LIVE_SLICES,
                    f"{node}-{card}-{i}-".ljust(UID, "s"),
                ]
                for i in range(LIVE_SLICES)
            ],
        }
        for card in range(CARDS)
    ]
    return _text({"v": 2, "gen": GENERATION, "cards": cards, "sliced": sliced})


def over_the_old_bound(node: int) -> str:
    """A well-formed geometry just under the old 64 KiB bound, with four cards of 64 slices."""

    def card(index: int) -> dict[str, Any]:
        return {
            "pci": f"{node % 0x10000:04x}:{index:02x}:00.0",
            "slices": 64,
            "profiles": [
                {
                    "name": f"p{profile}",
                    "slices": 1,
                    "memory_mib": 1000 + node + profile,
                    "cu": profile,
                    "placements": [[start, 1] for start in range(64)],
                }
                for profile in range(32)
            ],
            "occupied": [],
            "owners": [],
        }

    cards: list[dict[str, Any]] = []
    while len(_text({"v": 1, "gen": node, "cards": [*cards, card(len(cards))]})) <= OLD_MAX_TEXT:
        cards.append(card(len(cards)))
    return _text({"v": 1, "gen": node, "cards": cards})
