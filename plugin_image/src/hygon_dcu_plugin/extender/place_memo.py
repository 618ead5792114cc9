"""Each node's placements kept per pod shape, so a pod is placed on a node once across filter,
prioritize and bind, and a pod of a shape seen before costs a lookup (docs/dev/extender.md,
"Cost of a decision").

``decide.outcome`` reads a node's geometry, its reservations and the pod's ``decide.shape``
only. An entry holds the outcomes for one geometry object and one set of reservations; a new
geometry (the state keeps one object per Lease content, so a renewal is not one) or a changed
reservation on the node starts a new entry. Bounded: MAX_SHAPES outcomes per node, MAX_KEPT_NODES
nodes, the oldest dropped first.

Below that, what a card gives a profile (``placement.card_option``) depends only on the card's
profile table, its slice count and its occupied slices; a fleet of a few card models has a few
hundred such card states however many nodes it has, so that answer is kept per state across
nodes (MAX_CARD_STATES, emptied when full). A card's table is known by a small number given
once per geometry object (MAX_TABLES distinct tables; a card of a table past that is computed
each time).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from hygon_dcu_plugin.extender.decide import (
    NodeState,
    NotPlaced,
    Outcome,
    Placed,
    answer,
    distinct_profiles,
    outcome_on,
)
from hygon_dcu_plugin.extender.decide import place as place_once
from hygon_dcu_plugin.extender.decide import shape as shape_of
from hygon_dcu_plugin.geometry import Geometry, GeoProfile, card_views
from hygon_dcu_plugin.placement import (
    CardOption,
    CardView,
    PlacementLike,
    ProfileLike,
    Rank,
    card_option,
)
from hygon_dcu_plugin.request import PartitionRequest

# More nodes than a cluster has (kube-scheduler is tested to 5,000); more shapes than a fleet's
# profiles and size classes give one node.
MAX_KEPT_NODES = 20_000
MAX_SHAPES = 64
MAX_TABLES = 256
MAX_CARD_STATES = 16_384

Reserved = tuple[tuple[str, tuple[tuple[int, int], ...]], ...]


def reserved_key(reserved: Mapping[str, Sequence[tuple[int, int]]]) -> Reserved:
    """The reservations on a node in one order, whatever order the table listed them in."""
    return tuple(sorted((card, tuple(sorted(spans))) for card, spans in reserved.items()))


CardKey = tuple[int, int, frozenset[int], str, str]  # table, slices, occupied, profile, policy


@dataclass
class _Entry:
    geometry: Geometry
    reserved: Reserved
    profiles: tuple[GeoProfile, ...]
    tables: tuple[int | None, ...]  # per card (by index): its table's number
    # What every outcome on this content starts from (a third of a new outcome's cost): the
    # card views with the reservations counted, and Geometry.profiles.
    views: list[CardView[GeoProfile]]
    by_name: list[GeoProfile]
    outcomes: dict[tuple[object, ...], Outcome] = field(default_factory=dict)


class PlaceMemo:
    def __init__(self, max_nodes: int = MAX_KEPT_NODES, max_shapes: int = MAX_SHAPES) -> None:
        self._lock = threading.Lock()
        self._nodes: dict[str, _Entry] = {}
        self._max_nodes = max_nodes
        self._max_shapes = max_shapes
        self._tables: dict[tuple[GeoProfile, ...], int] = {}
        self._card_states: dict[CardKey, tuple[Rank, PlacementLike] | None] = {}

    def place(
        self, state: NodeState, requests: Sequence[tuple[str, PartitionRequest]]
    ) -> Placed | NotPlaced:
        """``decide.place``, computed once per node content and pod shape."""
        if state.geometry is None:
            return place_once(state, requests)
        entry = self._entry(state.name, state.geometry, reserved_key(state.reserved))
        key = shape_of(requests, entry.profiles)
        with self._lock:
            found = entry.outcomes.get(key)
        if found is None:
            found = outcome_on(entry.views, entry.by_name, requests, self._option(entry))
            with self._lock:
                if len(entry.outcomes) >= self._max_shapes:
                    del entry.outcomes[next(iter(entry.outcomes))]
                entry.outcomes[key] = found
        return answer(found, requests)

    def _entry(self, node: str, geometry: Geometry, reserved: Reserved) -> _Entry:
        with self._lock:
            entry = self._nodes.get(node)
            if entry is not None and entry.geometry is geometry and entry.reserved == reserved:
                return entry
            entry = _Entry(
                geometry,
                reserved,
                distinct_profiles(geometry),
                tuple(self._table(card.profiles) for card in geometry.cards),
                card_views(geometry, dict(reserved)),
                geometry.profiles(),
            )
            self._nodes.pop(node, None)  # re-entered last: the oldest are dropped first
            if len(self._nodes) >= self._max_nodes:
                del self._nodes[next(iter(self._nodes))]
            self._nodes[node] = entry
            return entry

    def _table(self, profiles: tuple[GeoProfile, ...]) -> int | None:
        """The number of this profile table (under the lock), None past MAX_TABLES."""
        number = self._tables.get(profiles)
        if number is None and len(self._tables) < MAX_TABLES:
            number = self._tables[profiles] = len(self._tables)
        return number

    def _option(self, entry: _Entry) -> CardOption:
        """``card_option`` for the cards of this entry, kept per card state."""
        tables, states = entry.tables, self._card_states

        def option(
            card: CardView, profile: ProfileLike, policy: str
        ) -> tuple[Rank, PlacementLike] | None:
            table = tables[card.index]
            if table is None:
                return card_option(card, profile, policy)
            key = (table, card.slice_count, card.occupied, profile.name, policy)
            with self._lock:
                if key in states:
                    return states[key]
            found = card_option(card, profile, policy)
            with self._lock:
                if len(states) >= MAX_CARD_STATES:
                    states.clear()
                states[key] = found
            return found

        return option

    def __len__(self) -> int:
        with self._lock:
            return len(self._nodes)
