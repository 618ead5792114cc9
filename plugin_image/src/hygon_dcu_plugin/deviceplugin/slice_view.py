"""A node's cards as logical slices see them, read once: which cards may take a slice, their
live slices, and which cards the kubelet holds whole (docs/dev/logical-slices.md).

A card is offered for slices when the node layer calls it healthy, it has a device key
(``host.card_key``: the same PCI address its whole-card device id has) and no container holds
it whole. A card is given whole or sliced, never both: a card with a live slice is not offered
whole (``whole_card_health``), and a card the kubelet lists as assigned whole takes no slice.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from ansible_collections.hygon.dcu.plugins.module_utils.cards import Card
from ansible_collections.hygon.dcu.plugins.module_utils.vdevs import Vdev, VdevCard

from hygon_dcu_plugin.deviceplugin.podresources import ListedPod
from hygon_dcu_plugin.deviceplugin.slice_grants import SliceGrant
from hygon_dcu_plugin.geometry import GeoSlice, GeoSliceCard
from hygon_dcu_plugin.host import card_key
from hygon_dcu_plugin.slice_placement import SliceCard
from hygon_dcu_plugin.vocabulary import WHOLE_CARD


@dataclass(frozen=True)
class SliceView:
    keys: dict[int, str]  # healthy cards with a device key: index -> PCI address
    sizes: dict[int, VdevCard]
    vdevs: list[Vdev]
    per_card: int
    held_whole: frozenset[str]  # PCI addresses the kubelet lists as assigned whole

    def offered(self) -> list[SliceCard]:
        """The cards a new slice may go on, with their live slices."""
        cards = []
        for index, pci in sorted(self.keys.items()):
            size = self.sizes.get(index)
            if size is None or pci in self.held_whole:
                continue
            live = tuple((v.compute_units, v.memory_mib) for v in self.vdevs if v.card == index)
            cards.append(SliceCard(index, size.compute_units, size.memory_mib, live, self.per_card))
        return cards

    def sliced(self) -> set[str]:
        """PCI addresses of the cards that hold a live slice."""
        return {self.keys[v.card] for v in self.vdevs if v.card in self.keys}

    def pool(self) -> int:
        """Slice tokens an empty node would offer: the per-card maximum on every keyed card."""
        return self.per_card * len(self.keys)

    def free_slots(self) -> int:
        """Slices the node can still take, counted by what can still be placed: a card with
        no compute unit or memory left takes none, whatever its count."""
        return sum(
            card.free_slots
            for card in self.offered()
            if card.free_compute_units > 0 and card.free_memory_mib > 0 and card.free_slots > 0
        )


def keyed_cards(cards: Sequence[Card], addresses: Sequence[str]) -> dict[int, str]:
    return {
        c.index: key for c in cards if c.healthy and (key := card_key(c, addresses)) is not None
    }


def held_whole(listed: Sequence[ListedPod]) -> frozenset[str]:
    return frozenset(
        device_id
        for pod in listed
        for container in pod.containers
        for device_id in container.devices.get(WHOLE_CARD, ())
    )


def whole_card_health(
    health: dict[str, bool], sliced: Collection[str], held: Collection[str]
) -> dict[str, bool]:
    """Whole-card health with the sliced cards withheld (a held card stays as it was: the
    kubelet must never see a running container's device go bad)."""
    return {pci: ok and (pci in held or pci not in sliced) for pci, ok in health.items()}


def slice_room(view: SliceView) -> dict[str, dict[str, int]]:
    """Per card (PCI address): the compute units, MiB and slots a new slice may still take;
    all 0 on a card held whole (the hygon_dcu_slice_card_free gauge)."""
    offered = {view.keys[card.index]: card for card in view.offered()}
    room = {}
    for index, pci in sorted(view.keys.items()):
        if view.sizes.get(index) is None:
            continue
        card = offered.get(pci)
        room[pci] = {
            "compute_units": card.free_compute_units if card else 0,
            "memory_mib": card.free_memory_mib if card else 0,
            "slices": card.free_slots if card else 0,
        }
    return room


def slice_occupancy(view: SliceView) -> dict[str, float]:
    """Per card (PCI address): the share of its compute units live slices take, 1 on a card
    held whole (the hygon_dcu_card_occupancy_ratio gauge)."""
    shares = {}
    for index, pci in sorted(view.keys.items()):
        size = view.sizes.get(index)
        if size is None or size.compute_units <= 0:
            continue
        used = sum(v.compute_units for v in view.vdevs if v.card == index)
        whole = pci in view.held_whole
        shares[pci] = 1.0 if whole else min(1.0, used / size.compute_units)
    return shares


def sliced_geometry(view: SliceView, grants: Sequence[SliceGrant]) -> tuple[GeoSliceCard, ...]:
    """The view as the geometry Lease publishes it: every keyed card, with its live slices and
    the pod each belongs to ("" for a slice no grant names)."""
    cards = []
    for index, pci in sorted(view.keys.items()):
        size = view.sizes.get(index)
        if size is None:
            continue
        live = tuple(
            GeoSlice(
                v.compute_units,
                v.memory_mib,
                next((g.pod_uid for g in grants if g.matches(v)), ""),
            )
            for v in view.vdevs
            if v.card == index
        )
        cards.append(
            GeoSliceCard(
                pci,
                size.compute_units,
                size.memory_mib,
                view.per_card,
                pci in view.held_whole,
                live,
            )
        )
    return tuple(cards)
