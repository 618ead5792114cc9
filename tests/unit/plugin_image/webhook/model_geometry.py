"""The geometry a node of the simulator's card model publishes, for the webhook tests that fill
the fake API server with geometry Leases."""

from __future__ import annotations

import simnode
from hygon_dcu_plugin import geometry


def node_text(model: str, cards: int = 1) -> str:
    """The encoded geometry of a node of ``cards`` empty cards of the simulator's ``model``."""
    spec = simnode.MODELS[model]
    profiles = tuple(
        geometry.GeoProfile(
            p.name,
            p.slices,
            p.memory_mib,
            p.cu_count,
            tuple(geometry.GeoPlacement(s, p.slices) for s in p.starts),
        )
        for p in spec.profiles
    )
    return geometry.encode(
        geometry.Geometry(
            1,
            tuple(
                geometry.GeoCard(pci, spec.slices, profiles, frozenset())
                for pci in spec.pci_addresses[:cards]
            ),
        )
    )
