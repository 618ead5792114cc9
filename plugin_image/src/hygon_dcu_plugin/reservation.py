"""The reservation the scheduler extender writes on a pod before it binds it
(``vocabulary.RESERVATION_ANNOTATION``, docs/dev/extender.md): per partition container, the
card, profile and placement the allocator is to carve.

    {"v": 1, "node": "node-a", "at": 1764660000.5,
     "containers": {"train": {"card": "0000:03:00.0", "profile": "2g.15gb",
                              "start": 0, "size": 2}}}

Fail closed: ``decode`` refuses the whole annotation (ReservationError) on anything unexpected;
the allocator then refuses the container rather than guess (``bad_reservation``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ansible_collections.hygon.dcu.plugins.module_utils.registry import PCI_ADDRESS

SCHEMA = 1
MAX_TEXT = 16 * 1024
MAX_CONTAINERS = 64
_NAME_MAX = 253
_PROFILE_MAX = 32
_SLICES_MAX = 64
_TIME_MAX = 1e11  # seconds: year 5138


class ReservationError(ValueError):
    """The reservation annotation cannot be trusted; the message says what is wrong."""


@dataclass(frozen=True)
class Reserved:
    card: str  # PCI address
    profile: str
    start: int
    size: int


@dataclass(frozen=True)
class Reservation:
    node: str
    made_at: float  # seconds since the epoch
    containers: Mapping[str, Reserved]


def encode(reservation: Reservation) -> str:
    return json.dumps(
        {
            "v": SCHEMA,
            "node": reservation.node,
            "at": round(reservation.made_at, 3),
            "containers": {
                name: {"card": r.card, "profile": r.profile, "start": r.start, "size": r.size}
                for name, r in sorted(reservation.containers.items())
            },
        },
        separators=(",", ":"),
        sort_keys=True,
    )


def decode(text: object) -> Reservation:
    if not isinstance(text, str):
        raise ReservationError("the reservation is not text")
    if len(text) > MAX_TEXT:
        raise ReservationError(f"the reservation is {len(text)} characters; at most {MAX_TEXT}")
    try:
        doc = json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:
        raise ReservationError(f"the reservation is not JSON: {str(exc)[:120]}") from None
    top = _object(doc, "reservation", {"v", "node", "at", "containers"})
    if not isinstance(top["v"], int) or isinstance(top["v"], bool) or top["v"] != SCHEMA:
        raise ReservationError(f"reservation schema {str(top['v'])[:20]!r} is not {SCHEMA}")
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
    if not isinstance(raw, dict) or not 0 < len(raw) <= MAX_CONTAINERS:
        raise ReservationError(f"reservation containers is not 1..{MAX_CONTAINERS} entries")
    containers = {
        _name(name, "container name", _NAME_MAX): _reserved(entry, name)
        for name, entry in raw.items()
    }
    return Reservation(node, float(made_at), containers)


def _reserved(entry: object, container: str) -> Reserved:
    where = f"reservation of container {container[:64]!r}"
    obj = _object(entry, where, {"card", "profile", "start", "size"})
    card = obj["card"]
    if not isinstance(card, str) or not PCI_ADDRESS.fullmatch(card):
        raise ReservationError(f"{where}: card is not a PCI address")
    profile = _name(obj["profile"], f"{where}: profile", _PROFILE_MAX)
    start, size = obj["start"], obj["size"]
    for label, value, low in (("start", start, 0), ("size", size, 1)):
        if not isinstance(value, int) or isinstance(value, bool) or not low <= value < _SLICES_MAX:
            raise ReservationError(f"{where}: {label} is not a slice number")
    return Reserved(card, profile, start, size)


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
