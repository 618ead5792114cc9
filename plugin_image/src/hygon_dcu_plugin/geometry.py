"""A node's partition geometry as the scheduler extender reads it: the text in the node's
geometry Lease (docs/dev/extender.md).

One compact JSON document, schema version first::

    {"v": 1, "gen": 7, "cards": [{"pci": "0000:03:00.0", "slices": 4,
      "profiles": [{"name": "2g.15gb", "slices": 2, "memory_mib": 15360, "cu": 30,
                    "placements": [[0, 2], [2, 2]]}, ...],
      "occupied": [0, 1], "owners": [[0, 2, "<pod uid>"]]}]}

``occupied`` is every slice a live GPU instance covers (live driver state, so a hand-carved
instance counts); ``owners`` names the pod of each instance the plugin granted, so the extender
can tell a reservation was carved. Only healthy cards with a device key are listed: what the
allocator would offer.

Schema 2 adds ``sliced``: with the partition mode off, each card offered for logical slices
(docs/dev/logical-slices.md), its compute units and memory, how many slices it may hold,
whether the kubelet holds it whole, and its live slices (compute units, MiB, owner pod uid or
"" for a slice no grant names)::

    "sliced": [{"pci": "0000:03:00.0", "cu": 80, "mib": 65520, "max": 4, "whole": false,
                "live": [[21, 16384, "<pod uid>"]]}]

A schema 1 document (a plugin from before slices) reads as one with no sliced card, and a
geometry without a sliced card (every partition node) is still written as schema 1.

Fail closed: ``decode`` refuses the whole document (GeometryError) on anything it does not
expect: unknown schema, a wrong type, a number out of range, more entries than the bounds
below, a placement off the card, a size over MAX_TEXT. Work is linear in the text.

The bounds are twice the largest node known (docs/dev/extender.md, "Bounds"), so a Lease any
plugin token can forge costs the extender little: at most MAX_CARDS cards of at most
MAX_SLICES slices, MAX_PROFILES profiles and as many owners; MAX_PLACEMENTS placements a
profile. MAX_TEXT is the length of the largest document those bounds allow (``largest``), so a
longer text is refused before it is parsed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ansible_collections.hygon.dcu.plugins.module_utils.cards import Card, occupied_by, slices_of
from ansible_collections.hygon.dcu.plugins.module_utils.registry import PCI_ADDRESS

from hygon_dcu_plugin.host import card_key
from hygon_dcu_plugin.placement import CardView
from hygon_dcu_plugin.vocabulary import GEOMETRY_ANNOTATION

SCHEMA = 2
SCHEMAS = (1, 2)  # what decode reads
# Twice an 8-card server (the simulator's limit is 16 too).
MAX_CARDS = 16
# Twice the widest card known: the measured C-3000 has 4 slices, the simulator's
# hypothetical model 8 (docs/dev/hardware.md).
MAX_SLICES = 8
# A card has at most one profile per width (the node layer sweeps widths 1..slices), and a
# profile at most one placement per first slice.
MAX_PROFILES = MAX_SLICES
MAX_PLACEMENTS = MAX_SLICES
MAX_MEMORY_MIB = 1 << 24  # 16 TiB
MAX_CU = 4096
MAX_GENERATION = (1 << 53) - 1  # exact in every JSON reader
# Twice the vendor's 4 slices a card (docs/dev/hardware.md, "Logical slices").
MAX_LIVE_SLICES = 8
_PROFILE_NAME_MAX = 32
_UID_MAX = 64
_UID = re.compile(rf"[A-Za-z0-9-]{{1,{_UID_MAX}}}")  # a pod uid is a UUID


class GeometryError(ValueError):
    """The geometry text is not one this reader can trust; the message says what is wrong."""


@dataclass(frozen=True, slots=True)
class GeoPlacement:
    start: int
    size: int


# Every placement the bounds allow, made once: decoded placements are these objects.
_PLACEMENTS = {
    (start, size): GeoPlacement(start, size)
    for start in range(MAX_SLICES)
    for size in range(1, MAX_SLICES - start + 1)
}


@dataclass(frozen=True, slots=True)
class GeoProfile:
    name: str
    slices: int
    memory_mib: int
    cu_count: int
    placements: tuple[GeoPlacement, ...]


@dataclass(frozen=True, slots=True)
class GeoOwner:
    start: int
    size: int
    pod_uid: str


@dataclass(frozen=True, slots=True)
class GeoCard:
    pci: str
    slice_count: int
    profiles: tuple[GeoProfile, ...]
    occupied: frozenset[int]
    owners: tuple[GeoOwner, ...] = ()

    def profile(self, name: str) -> GeoProfile | None:
        return next((p for p in self.profiles if p.name == name), None)


@dataclass(frozen=True, slots=True)
class GeoSlice:
    compute_units: int
    memory_mib: int
    pod_uid: str  # "" when no grant names it


@dataclass(frozen=True, slots=True)
class GeoSliceCard:
    """A card offered for logical slices."""

    pci: str
    compute_units: int
    memory_mib: int
    max_slices: int
    held_whole: bool
    live: tuple[GeoSlice, ...] = ()


@dataclass(frozen=True, slots=True)
class Geometry:
    generation: int
    cards: tuple[GeoCard, ...]
    sliced: tuple[GeoSliceCard, ...] = ()

    def card(self, pci: str) -> GeoCard | None:
        return next((c for c in self.cards if c.pci == pci), None)

    def profiles(self) -> list[GeoProfile]:
        """Every profile any card offers, once per name (the first card's)."""
        seen: dict[str, GeoProfile] = {}
        for card in self.cards:
            for profile in card.profiles:
                seen.setdefault(profile.name, profile)
        return list(seen.values())


def of_cards(
    cards: Sequence[Card], owners: Iterable[tuple[str, int, int, str]], generation: int
) -> Geometry:
    """The geometry of the node's offered cards; ``owners`` are (card pci, start, size, pod
    uid) of the instances the plugin granted."""
    by_card: dict[str, list[GeoOwner]] = {}
    for pci, start, size, uid in owners:
        by_card.setdefault(pci, []).append(GeoOwner(start, size, uid))
    listed: list[GeoCard] = []
    for card in cards:
        key = card_key(card) if card.healthy else None
        if key is None:
            continue
        profiles = tuple(
            GeoProfile(
                p.name,
                p.slices,
                p.memory_mib,
                p.cu_count,
                tuple(GeoPlacement(q.start, q.size) for q in p.placements),
            )
            for p in card.profiles
        )
        listed.append(
            GeoCard(
                key,
                card.slice_count,
                profiles,
                card.occupied,
                # Only grants over live instances: a grant left by a reboot owns nothing.
                tuple(
                    sorted(
                        (
                            o
                            for o in by_card.get(key, ())
                            if slices_of(o.start, o.size) <= card.occupied
                        ),
                        key=lambda o: o.start,
                    )
                ),
            )
        )
    return Geometry(generation, tuple(listed))


def card_views(
    geometry: Geometry, reserved: Mapping[str, Iterable[tuple[int, int]]] | None = None
) -> list[CardView[GeoProfile]]:
    """The cards as the placement policy sees them, with ``reserved`` (card pci -> spans made
    but maybe not carved yet) counted as occupied."""
    reserved = reserved or {}
    return [
        CardView(
            index,
            card.pci,
            card.slice_count,
            card.profiles,
            card.occupied | occupied_by(reserved.get(card.pci, ())),
        )
        for index, card in enumerate(geometry.cards)
    ]


def encode(geometry: Geometry) -> str:
    cards = [
        {
            "pci": card.pci,
            "slices": card.slice_count,
            "profiles": [
                {
                    "name": p.name,
                    "slices": p.slices,
                    "memory_mib": p.memory_mib,
                    "cu": p.cu_count,
                    "placements": [[q.start, q.size] for q in p.placements],
                }
                for p in card.profiles
            ],
            "occupied": sorted(card.occupied),
            "owners": [[o.start, o.size, o.pod_uid] for o in card.owners],
        }
        for card in geometry.cards
    ]
    sliced = [
        {
            "pci": card.pci,
            "cu": card.compute_units,
            "mib": card.memory_mib,
            "max": card.max_slices,
            "whole": card.held_whole,
            "live": [[s.compute_units, s.memory_mib, s.pod_uid] for s in card.live],
        }
        for card in geometry.sliced
    ]
    # Without a sliced card the document is schema 1, which extenders from before slices
    # read: a partition node stays schedulable through a rolling upgrade.
    doc: dict[str, Any] = {"v": SCHEMA if sliced else 1, "gen": geometry.generation}
    doc["cards"] = cards
    if sliced:
        doc["sliced"] = sliced
    return json.dumps(doc, separators=(",", ":"))


def largest() -> Geometry:
    """The largest geometry the bounds allow: every list at its bound, every number and name
    at its widest. Its encoding's length is MAX_TEXT."""
    name = "n" * _PROFILE_NAME_MAX
    profiles = tuple(
        GeoProfile(
            f"{index}{name}"[:_PROFILE_NAME_MAX],
            MAX_SLICES,
            MAX_MEMORY_MIB,
            MAX_CU,
            tuple(GeoPlacement(start, 1) for start in range(MAX_SLICES)),
        )
        for index in range(MAX_PROFILES)
    )
    owners = tuple(GeoOwner(start, 1, "u" * _UID_MAX) for start in range(MAX_SLICES))
    cards = tuple(
        GeoCard(
            f"ffff:{index:02x}:1f.7", MAX_SLICES, profiles, frozenset(range(MAX_SLICES)), owners
        )
        for index in range(MAX_CARDS)
    )
    # Live slices may not hold more than their card: the widest that add up to it.
    live = tuple(
        GeoSlice(MAX_CU // MAX_LIVE_SLICES, MAX_MEMORY_MIB // MAX_LIVE_SLICES, "u" * _UID_MAX)
        for _slot in range(MAX_LIVE_SLICES)
    )
    sliced = tuple(
        GeoSliceCard(f"ffff:{index:02x}:1f.7", MAX_CU, MAX_MEMORY_MIB, MAX_LIVE_SLICES, False, live)
        for index in range(MAX_CARDS)
    )
    return Geometry(MAX_GENERATION, cards, sliced)


MAX_TEXT = len(encode(largest()))


def text_of_lease(lease: object) -> str | None:
    """The geometry annotation of a Lease as the API's JSON has it, or None when the Lease
    carries none: what the webhook and the extender each read before ``decode``."""
    metadata = lease.get("metadata") if isinstance(lease, Mapping) else None
    annotations = metadata.get("annotations") if isinstance(metadata, Mapping) else None
    text = annotations.get(GEOMETRY_ANNOTATION) if isinstance(annotations, Mapping) else None
    return text if isinstance(text, str) else None


def decode(text: object) -> Geometry:
    """The geometry in ``text``, or GeometryError naming the first thing wrong."""
    if not isinstance(text, str):
        raise GeometryError(f"geometry is a {type(text).__name__}, not text")
    if len(text) > MAX_TEXT:
        raise GeometryError(
            f"geometry is {len(text)} characters; at most {MAX_TEXT} are read (the largest "
            f"node the bounds allow: {MAX_CARDS} cards of {MAX_SLICES} slices)"
        )
    try:
        doc = json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:
        raise GeometryError(f"geometry is not JSON: {str(exc)[:120]}") from None
    if not isinstance(doc, dict):
        raise GeometryError("geometry is not an object")
    version = doc.get("v")
    if not isinstance(version, int) or isinstance(version, bool) or version not in SCHEMAS:
        raise GeometryError(
            f"geometry schema {str(version)[:20]!r} is not one of {', '.join(map(str, SCHEMAS))}"
        )
    keys = {"v", "gen", "cards"} | ({"sliced"} if version >= 2 else set())
    top = _object(doc, "geometry", keys)
    generation = _int(top["gen"], "gen", 0, MAX_GENERATION)
    # Equal profiles (every card of a model) are held once.
    shared: dict[GeoProfile, GeoProfile] = {}
    cards = tuple(
        _card(item, f"cards[{i}]", shared)
        for i, item in enumerate(_list(top["cards"], "cards", MAX_CARDS))
    )
    if len({c.pci for c in cards}) != len(cards):
        raise GeometryError("geometry lists one card twice")
    sliced = tuple(
        _slice_card(item, f"sliced[{i}]")
        for i, item in enumerate(_list(top.get("sliced", []), "sliced", MAX_CARDS))
    )
    if len({c.pci for c in sliced}) != len(sliced):
        raise GeometryError("geometry lists one sliced card twice")
    return Geometry(generation, cards, sliced)


def _slice_card(item: object, where: str) -> GeoSliceCard:
    obj = _object(item, where, {"pci", "cu", "mib", "max", "whole", "live"})
    pci = obj["pci"]
    if not isinstance(pci, str) or not PCI_ADDRESS.fullmatch(pci):
        raise GeometryError(f"{where}.pci is not a PCI address")
    whole = obj["whole"]
    if not isinstance(whole, bool):
        raise GeometryError(f"{where}.whole is not true or false")
    compute_units = _int(obj["cu"], f"{where}.cu", 1, MAX_CU)
    memory_mib = _int(obj["mib"], f"{where}.mib", 1, MAX_MEMORY_MIB)
    max_slices = _int(obj["max"], f"{where}.max", 1, MAX_LIVE_SLICES)
    live = []
    for i, raw in enumerate(_list(obj["live"], f"{where}.live", max_slices)):
        entry = _list(raw, f"{where}.live[{i}]", 3)
        if len(entry) != 3:
            raise GeometryError(f"{where}.live[{i}] is not [compute units, MiB, pod uid]")
        uid = entry[2]
        if not isinstance(uid, str) or (uid and not _UID.fullmatch(uid)):
            raise GeometryError(f'{where}.live[{i}] has no pod uid or ""')
        live.append(
            GeoSlice(
                _int(entry[0], f"{where}.live[{i}] compute units", 1, compute_units),
                _int(entry[1], f"{where}.live[{i}] MiB", 1, memory_mib),
                uid,
            )
        )
    if sum(s.compute_units for s in live) > compute_units:
        raise GeometryError(f"{where}: its live slices hold more compute units than the card")
    if sum(s.memory_mib for s in live) > memory_mib:
        raise GeometryError(f"{where}: its live slices hold more memory than the card")
    return GeoSliceCard(pci, compute_units, memory_mib, max_slices, whole, tuple(live))


def _card(item: object, where: str, shared: dict[GeoProfile, GeoProfile]) -> GeoCard:
    obj = _object(item, where, {"pci", "slices", "profiles", "occupied", "owners"})
    pci = obj["pci"]
    if not isinstance(pci, str) or not PCI_ADDRESS.fullmatch(pci):
        raise GeometryError(f"{where}.pci is not a PCI address")
    slices = _int(obj["slices"], f"{where}.slices", 1, MAX_SLICES)
    profiles = tuple(
        shared.setdefault(profile, profile)
        for profile in (
            _profile(p, f"{where}.profiles[{i}]", slices)
            for i, p in enumerate(_list(obj["profiles"], f"{where}.profiles", MAX_PROFILES))
        )
    )
    if len({p.name for p in profiles}) != len(profiles):
        raise GeometryError(f"{where} lists one profile twice")
    occupied = frozenset(
        _int(s, f"{where}.occupied", 0, slices - 1)
        for s in _list(obj["occupied"], f"{where}.occupied", MAX_SLICES)
    )
    owners = []
    for i, raw in enumerate(_list(obj["owners"], f"{where}.owners", MAX_SLICES)):
        entry = _list(raw, f"{where}.owners[{i}]", 3)
        if len(entry) != 3:
            raise GeometryError(f"{where}.owners[{i}] is not [start, size, pod uid]")
        start, size = _span(entry[0], entry[1], f"{where}.owners[{i}]", slices)
        uid = entry[2]
        if not isinstance(uid, str) or not _UID.fullmatch(uid):
            raise GeometryError(f"{where}.owners[{i}] has no pod uid")
        owners.append(GeoOwner(start, size, uid))
    return GeoCard(pci, slices, profiles, occupied, tuple(owners))


def _profile(item: object, where: str, card_slices: int) -> GeoProfile:
    obj = _object(item, where, {"name", "slices", "memory_mib", "cu", "placements"})
    name = obj["name"]
    if (
        not isinstance(name, str)
        or not 0 < len(name) <= _PROFILE_NAME_MAX
        or not all(c.isascii() and (c.isalnum() or c in ".-_") for c in name)
    ):
        raise GeometryError(f"{where}.name is not a profile name")
    slices = _int(obj["slices"], f"{where}.slices", 1, card_slices)
    placements = []
    for i, raw in enumerate(_list(obj["placements"], f"{where}.placements", MAX_PLACEMENTS)):
        entry = _list(raw, f"{where}.placements[{i}]", 2)
        if len(entry) != 2:
            raise GeometryError(f"{where}.placements[{i}] is not [start, size]")
        start, size = _span(entry[0], entry[1], f"{where}.placements[{i}]", card_slices)
        placements.append(_PLACEMENTS[start, size])
    return GeoProfile(
        name,
        slices,
        _int(obj["memory_mib"], f"{where}.memory_mib", 0, MAX_MEMORY_MIB),
        _int(obj["cu"], f"{where}.cu", 0, MAX_CU),
        tuple(placements),
    )


def _span(start: object, size: object, where: str, card_slices: int) -> tuple[int, int]:
    first = _int(start, f"{where} start", 0, card_slices - 1)
    count = _int(size, f"{where} size", 1, card_slices - first)
    return first, count


def _object(value: object, where: str, keys: set[str]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise GeometryError(f"{where} is not an object")
    if set(value) != keys:
        missing, extra = sorted(keys - set(value)), sorted(set(value) - keys)
        raise GeometryError(
            f"{where} has keys missing {missing[:5]} or unexpected {[k[:20] for k in extra[:5]]}"
        )
    return value


def _list(value: object, where: str, bound: int) -> list[Any]:
    if not isinstance(value, list):
        raise GeometryError(f"{where} is not a list")
    if len(value) > bound:
        raise GeometryError(f"{where} has {len(value)} entries; at most {bound}")
    return value


def _int(value: object, where: str, low: int, high: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise GeometryError(f"{where} is not a whole number in {low}..{high}")
    return value


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not a number")
