# Copyright: hygon.dcu contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""What a card offers, as pure data: its profiles, their legal placements, and the slice
geometry over them.

No library here: the node layer (node.py) fills these from the vendor binding, and the runtime
image's webhook and extender read them from a published Lease without ever loading it. The one
definition of the slice geometry the modules' facts, the device plugin's placement policy and
the advertised counts all use.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Protocol, TypeVar


class Span(Protocol):
    """A placement as anyone holds it: a Placement, the library's struct, a caller's own."""

    @property
    def start(self) -> int: ...

    @property
    def size(self) -> int: ...


SpanT = TypeVar("SpanT", bound=Span)


def slices_of(start: int, size: int) -> frozenset[int]:
    """The slices a placement at ``start`` of ``size`` slices covers."""
    return frozenset(range(start, start + size))


def occupied_by(spans: Iterable[tuple[int, int]]) -> frozenset[int]:
    """The slices a set of (start, size) placements covers."""
    taken: set[int] = set()
    for start, size in spans:
        taken |= slices_of(start, size)
    return frozenset(taken)


def _free(placements: Iterable[SpanT], occupied: AbstractSet[int]) -> list[SpanT]:
    # Legal placements ignore what is carved, so free = legal - overlapping.
    return [p for p in placements if occupied.isdisjoint(slices_of(p.start, p.size))]


def free_placements(placements: Iterable[SpanT], occupied: AbstractSet[int]) -> tuple[SpanT, ...]:
    """The placements (a profile's legal ones) that cover no occupied slice."""
    return tuple(_free(placements, occupied))


def fit_count(placements: Iterable[Span], occupied: AbstractSet[int]) -> int:
    """How many more instances fit at once: the most free placements that do not overlap.

    Greedy by end slice is exact for intervals, whatever the placement table looks like.
    """
    count = 0
    end = -1
    for p in sorted(_free(placements, occupied), key=lambda q: (q.start + q.size, q.start)):
        if p.start > end:
            count += 1
            end = p.start + p.size - 1
    return count


@dataclass(frozen=True)
class Placement:
    start: int
    size: int

    def __str__(self) -> str:
        return f"{self.start}:{self.size}"


@dataclass(frozen=True)
class Profile:
    id: int
    name: str  # "2g.15gb": the last word of the driver's "MIG 2g.15gb", lowercase
    slices: int
    cu_count: int
    memory_mib: int
    gi_count_max: int
    placements: tuple[Placement, ...]


@dataclass(frozen=True)
class Card:
    index: int
    pci: str | None  # from the registry's dev<N>; None while the mode is off
    slice_count: int
    cu_count: int  # max(cu_count x gi_count_max) over profiles; the attribute without profiles
    memory_mib: int
    profiles: tuple[Profile, ...]
    healthy: bool
    error: str | None
    model: str | None = None
    # profile id -> instances that still fit (fit_count over occupied); empty when the live
    # instances could not be read
    remaining: Mapping[int, int] = field(default_factory=dict)
    occupied: frozenset[int] = frozenset()  # slices held by live GPU instances

    def profile(self, name_or_id: str | int) -> Profile | None:
        for candidate in self.profiles:
            if name_or_id in (candidate.name, candidate.id):
                return candidate
        return None

    def free_placements(self, profile: Profile) -> tuple[Placement, ...]:
        """Legal placements of ``profile`` that no live GPU instance overlaps."""
        return free_placements(profile.placements, self.occupied)
