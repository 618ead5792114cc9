"""The reservation the scheduler extender writes on a pod before it binds it
(``vocabulary.RESERVATION_ANNOTATION``, docs/dev/extender.md): per partition container, the
card, profile and placement the allocator is to carve; per logical-slice container, the card
and the slice's compute units and MiB the slice allocator is to create.

    {"v": 1, "node": "node-a", "at": 1764660000.5,
     "containers": {"train": {"card": "0000:03:00.0", "profile": "2g.15gb",
                              "start": 0, "size": 2}}}
    {"v": 2, "node": "node-a", "at": 1764660000.5, "containers": {},
     "slices": {"notebook": {"card": "0000:03:00.0", "compute_units": 30,
                             "memory_mib": 16384}}}

Schema 1 (partitions only) is what a reservation without slices is written as, so a plugin
that knows only schema 1 reads every partition reservation; schema 2 adds ``slices``.

Fail closed: ``decode`` refuses the whole annotation (ReservationError) on anything unexpected;
the allocator then refuses the container rather than guess (``bad_reservation``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.hygon.dcu.plugins.module_utils.registry import PCI_ADDRESS

SCHEMA = 1
SLICES_SCHEMA = 2
MAX_TEXT = 16 * 1024
MAX_CONTAINERS = 64
_NAME_MAX = 253
_PROFILE_MAX = 32
_SLICES_MAX = 64
_TIME_MAX = 1e11  # seconds: year 5138
# Bounds of a slice's figures: more than any card has.
_COMPUTE_UNITS_MAX = 4096
_MIB_MAX = 1 << 24  # 16 TiB


class ReservationError(ValueError):
    """The reservation annotation cannot be trusted; the message says what is wrong."""


@dataclass(frozen=True)
class Reserved:
    card: str  # PCI address
    profile: str
    start: int
    size: int


@dataclass(frozen=True)
class ReservedSlice:
    card: str  # PCI address
    compute_units: int
    memory_mib: int


@dataclass(frozen=True)
class Reservation:
    node: str
    made_at: float  # seconds since the epoch
    containers: Mapping[str, Reserved]  # partitions
    slices: Mapping[str, ReservedSlice] = field(default_factory=dict)

    def names(self) -> list[str]:
        """Every container the reservation has an entry for."""
        return sorted([*self.containers, *self.slices])


def encode(reservation: Reservation) -> str:
    doc: dict[str, Any] = {
        "v": SCHEMA,
        "node": reservation.node,
        "at": round(reservation.made_at, 3),
        "containers": {
            name: {"card": r.card, "profile": r.profile, "start": r.start, "size": r.size}
            for name, r in sorted(reservation.containers.items())
        },
    }
    if reservation.slices:
        doc["v"] = SLICES_SCHEMA
        doc["slices"] = {
            name: {"card": r.card, "compute_units": r.compute_units, "memory_mib": r.memory_mib}
            for name, r in sorted(reservation.slices.items())
        }
    return json.dumps(doc, separators=(",", ":"), sort_keys=True)


def decode(text: object) -> Reservation:
    if not isinstance(text, str):
        raise ReservationError("the reservation is not text")
    if len(text) > MAX_TEXT:
        raise ReservationError(f"the reservation is {len(text)} characters; at most {MAX_TEXT}")
    try:
        doc = json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:
        raise ReservationError(f"the reservation is not JSON: {str(exc)[:120]}") from None
    if not isinstance(doc, dict):
        raise ReservationError("the reservation is not an object with exactly its schema's keys")
    version = doc.get("v")
    if not isinstance(version, int) or isinstance(version, bool) or version not in _KEYS:
        raise ReservationError(
            f"reservation schema {str(version)[:20]!r} is not one of {sorted(_KEYS)}"
        )
    top = _object(doc, "reservation", _KEYS[version])
    node = _name(top["node"], "node", _NAME_MAX)
    made_at = top["at"]
    # A float, or an int in a float's range (a 400-digit int overflows math.isfinite).
    if (
        type(made_at) not in (int, float)
        or not -1 < made_at < _TIME_MAX
        or not math.isfinite(made_at)
    ):
        raise ReservationError("reservation time is not a number of seconds")
    raw = top["containers"]
    raw_slices = top.get("slices", {})
    if (
        not isinstance(raw, dict)
        or not isinstance(raw_slices, dict)
        or not 0 < len(raw) + len(raw_slices) <= MAX_CONTAINERS
        or (version == SLICES_SCHEMA and not raw_slices)
    ):
        raise ReservationError(
            f"reservation containers and slices are not 1..{MAX_CONTAINERS} entries in all"
            + (", with at least one slice" if version == SLICES_SCHEMA else "")
        )
    containers = {
        _name(name, "container name", _NAME_MAX): _reserved(entry, name)
        for name, entry in raw.items()
    }
    slices = {
        _name(name, "container name", _NAME_MAX): _reserved_slice(entry, name)
        for name, entry in raw_slices.items()
    }
    both = sorted(set(containers) & set(slices))
    if both:
        raise ReservationError(
            f"container {both[0][:64]!r} has both a partition and a slice reserved"
        )
    return Reservation(node, float(made_at), containers, slices)


_KEYS = {
    SCHEMA: {"v", "node", "at", "containers"},
    SLICES_SCHEMA: {"v", "node", "at", "containers", "slices"},
}


def _reserved(entry: object, container: str) -> Reserved:
    where = f"reservation of container {container[:64]!r}"
    obj = _object(entry, where, {"card", "profile", "start", "size"})
    card = _card(obj["card"], where)
    profile = _name(obj["profile"], f"{where}: profile", _PROFILE_MAX)
    start, size = obj["start"], obj["size"]
    for label, value, low in (("start", start, 0), ("size", size, 1)):
        if not isinstance(value, int) or isinstance(value, bool) or not low <= value < _SLICES_MAX:
            raise ReservationError(f"{where}: {label} is not a slice number")
    return Reserved(card, profile, start, size)


def _reserved_slice(entry: object, container: str) -> ReservedSlice:
    where = f"slice reservation of container {container[:64]!r}"
    obj = _object(entry, where, {"card", "compute_units", "memory_mib"})
    card = _card(obj["card"], where)
    figures = []
    for label, bound in (("compute_units", _COMPUTE_UNITS_MAX), ("memory_mib", _MIB_MAX)):
        value = obj[label]
        if not isinstance(value, int) or isinstance(value, bool) or not 0 < value <= bound:
            raise ReservationError(f"{where}: {label} is not a number in 1..{bound}")
        figures.append(value)
    return ReservedSlice(card, figures[0], figures[1])


def _card(value: object, where: str) -> str:
    if not isinstance(value, str) or not PCI_ADDRESS.fullmatch(value):
        raise ReservationError(f"{where}: card is not a PCI address")
    return value


def _name(value: object, where: str, bound: int) -> str:
    if (
        not isinstance(value, str)
        or not 0 < len(value) <= bound
        or not all(c.isascii() and (c.isalnum() or c in ".-_") for c in value)
    ):
        raise ReservationError(f"{where} is not a name")
    return value


def _object(value: object, where: str, keys: set[str]) -> dict[str, Any]:
    if not isinstance(value, dict) or set(value) != keys:
        raise ReservationError(f"{where} is not an object with exactly {sorted(keys)}")
    return value


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not a number")
