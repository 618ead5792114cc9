"""Seeded arrival/departure streams with mixed profile demand.

A mix names how demand spreads over a model's profiles by width rank (narrowest first), so the
same mix means the same thing on models with different tables. Offered load is the mean number
of slices asked for at once divided by the node's slices.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

from .tables import CardModel, Profile

MIXES = ("small-heavy", "wide-heavy", "uniform", "bursty")
# The mixes whose requests run independent exponential lengths (bursty's pods share a job's).
INDEPENDENT_MIXES = ("small-heavy", "wide-heavy", "uniform")
MEAN_DURATION = 1.0
MEAN_BURST = 3.5  # bursty mix: requests per burst, uniform over 1..6


@dataclass(frozen=True)
class Request:
    id: int
    arrive: float
    depart: float
    profile: str
    slices: int

    @property
    def duration(self) -> float:
        return self.depart - self.arrive


def seed_for(*parts: object) -> int:
    """A seed that depends only on its parts (Python's hash() is salted per process)."""
    return zlib.crc32("/".join(str(p) for p in parts).encode())


def mix_weights(mix: str, profiles: Sequence[Profile]) -> list[float]:
    """Weight of each profile (ordered narrowest first) under the mix."""
    n = len(profiles)
    if mix == "small-heavy":
        return [2.0 ** (n - 1 - rank) for rank in range(n)]
    if mix == "wide-heavy":
        return [2.0**rank for rank in range(n)]
    if mix in ("uniform", "bursty"):
        return [1.0] * n
    raise ValueError(f"unknown mix {mix!r}; use one of {MIXES}")


def arrival_rate(card: CardModel, cards: int, mix: str, load: float) -> float:
    """Requests per unit time (jobs' pods counted one by one) that make the offered load `load`."""
    profiles = narrowest_first(card)
    weights = mix_weights(mix, profiles)
    mean_slices = sum(w * p.slices for w, p in zip(weights, profiles, strict=True)) / sum(weights)
    return load * cards * card.slice_count / (MEAN_DURATION * mean_slices)


def narrowest_first(card: CardModel) -> list[Profile]:
    return sorted(card.profiles, key=lambda p: (p.slices, p.name))


def stream(
    card: CardModel, cards: int, mix: str, load: float, requests: int, seed: int
) -> list[Request]:
    """`requests` requests on a node of `cards` cards, arriving so offered load is `load`."""
    rng = random.Random(seed)
    profiles = narrowest_first(card)
    weights = mix_weights(mix, profiles)
    rate = arrival_rate(card, cards, mix, load)
    out: list[Request] = []
    now = 0.0
    while len(out) < requests:
        if mix == "bursty":
            # A job of several pods at one instant, all running about as long as each other.
            now += rng.expovariate(rate / MEAN_BURST)
            size = rng.randint(1, 6)
            job = rng.expovariate(1.0 / MEAN_DURATION)
            durations = [job * rng.uniform(0.8, 1.2) for _ignored in range(size)]
        else:
            now += rng.expovariate(rate)
            durations = [rng.expovariate(1.0 / MEAN_DURATION)]
        for duration in durations:
            if len(out) == requests:
                break
            profile = rng.choices(profiles, weights)[0]
            out.append(Request(len(out), now, now + duration, profile.name, profile.slices))
    return out
