"""Where the logical-slice containers of a pod go on a node (docs/dev/extender.md, "Logical
slices"): a pure function of the node's published slices (geometry schema 2), the slices
reserved on it and the pod's requests.

Inside a node the slice allocator's own rule decides (``slice_placement.choose_slice_card``
with ``pack``, over the cards in index order, a card the kubelet holds whole left out), so the
extender reserves what the allocator would have chosen had it been alone; the allocator then
creates exactly that card's slice.
"""

from __future__ import annotations

from collections.abc import Sequence

from hygon_dcu_plugin.extender.decide import NodeState, NotPlaced, Placed, SliceAssignment
from hygon_dcu_plugin.request import SliceRequest
from hygon_dcu_plugin.slice_placement import SliceCard, choose_slice_card, room_text
from hygon_dcu_plugin.vocabulary import PACK

NO_SLICES = (
    "the node offers no logical slices (its cards are partitioned, or its device plugin "
    "publishes none)"
)


def slice_cards(state: NodeState) -> list[tuple[str, SliceCard]]:
    """(pci, card) of each card a new slice may go on, counting the live slices the geometry
    shows and those reserved on it."""
    geometry = state.geometry
    if geometry is None:
        return []
    cards = []
    for index, card in enumerate(geometry.sliced):
        if card.held_whole:
            continue
        live = tuple((s.compute_units, s.memory_mib) for s in card.live)
        reserved = tuple(state.reserved_slices.get(card.pci, ()))
        taken = live + reserved
        size = (card.compute_units, card.memory_mib)
        cards.append((card.pci, SliceCard(index, *size, taken, card.max_slices)))
    return cards


def place_slices(
    state: NodeState, requests: Sequence[tuple[str, SliceRequest]]
) -> Placed | NotPlaced:
    """Where each (container, slice request) of one pod goes on this node, all at once; or why
    the pod does not fit here. The largest slice first, so a small one never takes the room a
    large one of the same pod needs."""
    if state.geometry is None:
        return NotPlaced(state.why or "no geometry published for this node")
    keyed = slice_cards(state)
    if not keyed:
        return NotPlaced(NO_SLICES)
    pcis = {card.index: pci for pci, card in keyed}
    cards = [card for _pci, card in keyed]
    taken: list[SliceAssignment] = []
    ordered = sorted(requests, key=lambda item: item[1].memory_mib, reverse=True)
    for container, request in ordered:
        choice = choose_slice_card(cards, request, PACK)
        if choice is None:
            return NotPlaced(
                f"no card has room for a slice of {request.describe()} (container "
                f"{container}), counting the slices reserved: {room_text(cards)}"
            )
        card, cus, mib = choice
        taken.append(SliceAssignment(container, pcis[card.index], cus, mib))
        grown = SliceCard(
            card.index,
            card.compute_units,
            card.memory_mib,
            (*card.slices, (cus, mib)),
            card.max_slices,
        )
        cards = [grown if c.index == card.index else c for c in cards]
    return Placed(
        (),
        sum(c.free_memory_mib for c in cards),
        sum(c.memory_mib for c in cards),
        tuple(taken),
    )
