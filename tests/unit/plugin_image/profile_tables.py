"""Profile tables for the pure policy tests: plain data shaped like the node layer's Profile.

The plugin must never hard-code a table; these exist only so placement and counting can be
tested without a library. BW mirrors the measured C-3000 table's shape (docs/dev/hardware.md).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class P:
    start: int
    size: int


@dataclass(frozen=True)
class Prof:
    name: str
    slices: int
    placements: tuple[P, ...]


BW = (
    Prof("2g", 1, tuple(P(s, 1) for s in range(4))),
    Prof("4g", 2, (P(0, 2), P(2, 2))),
    Prof("8g", 4, (P(0, 4),)),
)
