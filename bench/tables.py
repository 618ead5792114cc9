"""Profile tables of simulated nodes, read the way the product reads them.

Nothing here knows a profile table: each model's table comes from the simulator's driver through
the node layer (`Node.cards()`), so the benchmark replays exactly what the allocator would see.
"""

from __future__ import annotations

import functools
import os
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ansible_collections.hygon.dcu.plugins.module_utils.node import Node
from hygon_dcu_plugin.placement import ProfileLike

REPO = Path(__file__).resolve().parent.parent
SIMULATOR = REPO / "tests" / "simulator"
LIBRARY = SIMULATOR / "build" / "libhydmi_mig.so.1"
SIMNODE = SIMULATOR / "simnode"


@dataclass(frozen=True)
class Placement:
    start: int
    size: int


@dataclass(frozen=True)
class Profile:
    name: str
    slices: int
    placements: tuple[Placement, ...]


@dataclass(frozen=True)
class CardModel:
    """What one card of a model offers: its slice count and discovered profiles."""

    model: str
    slice_count: int
    profiles: tuple[Profile, ...]

    def profile(self, name: str) -> Profile:
        for profile in self.profiles:
            if profile.name == name:
                return profile
        raise KeyError(f"model {self.model} has no profile {name!r}")

    def describe(self) -> str:
        parts = []
        for p in sorted(self.profiles, key=lambda q: q.slices):
            starts = ",".join(str(q.start) for q in p.placements)
            parts.append(f"{p.name} ({p.slices} slices @ {starts})")
        return f"{self.model}: {self.slice_count} slices; " + "; ".join(parts)


def build_simulator() -> None:
    """Build the simulated library and tools (make is incremental, so this is cheap when built)."""
    subprocess.run(["make", "-s", "-C", str(SIMULATOR)], check=True, capture_output=True)


@contextmanager
def simulated_node(model: str, cards: int) -> Iterator[str]:
    """A fresh simulated node root; HYDMI_SIM_ROOT names it while the block runs."""
    build_simulator()
    with tempfile.TemporaryDirectory(prefix="hydmi-bench-") as root:
        subprocess.run(
            [str(SIMNODE), "init", root, "--model", model, "--cards", str(cards)],
            check=True,
            capture_output=True,
            text=True,
        )
        previous = os.environ.get("HYDMI_SIM_ROOT")
        os.environ["HYDMI_SIM_ROOT"] = root
        try:
            yield root
        finally:
            if previous is None:
                os.environ.pop("HYDMI_SIM_ROOT", None)
            else:
                os.environ["HYDMI_SIM_ROOT"] = previous


def _card_model(model: str, slice_count: int, profiles: Sequence[ProfileLike]) -> CardModel:
    found = [
        Profile(p.name, p.slices, tuple(Placement(q.start, q.size) for q in p.placements))
        for p in profiles
    ]
    return CardModel(model, slice_count, tuple(sorted(found, key=lambda q: (q.slices, q.name))))


@functools.cache
def discover(model: str) -> CardModel:
    """The card table of a simulated model, read through the node layer on an 8-card node.

    Every card of the node must report the same table (one model per node)."""
    with simulated_node(model, 8) as root:
        node = Node(host_root=root, library_path=str(LIBRARY))
        cards = node.cards()
    tables = {_card_model(model, card.slice_count, card.profiles) for card in cards}
    if len(tables) != 1:
        raise RuntimeError(f"simulated {model} node reports {len(tables)} different card tables")
    table = tables.pop()
    if not table.profiles:
        raise RuntimeError(f"simulated {model} node reports no profiles (is the mode on?)")
    return table
