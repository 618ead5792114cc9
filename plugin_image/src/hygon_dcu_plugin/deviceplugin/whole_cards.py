"""Mode off: ``hygon.com/dcu``, one device per card, its id the card's PCI address."""

from __future__ import annotations

import logging
from collections.abc import Collection

from ansible_collections.hygon.dcu.plugins.module_utils.hydmi import HydmiError
from ansible_collections.hygon.dcu.plugins.module_utils.node import Node

from hygon_dcu_plugin.deviceplugin.advertise import Device, whole_card_plan
from hygon_dcu_plugin.deviceplugin.slice_view import whole_card_health
from hygon_dcu_plugin.host import card_key, hygon_pci_addresses

log = logging.getLogger(__name__)


def plan_whole_cards(
    node: Node,
    host_root: str,
    sliced: Collection[str] = (),
    held: Collection[str] = (),
) -> dict[str, list[Device]]:
    """Every card with a known address (``host.card_key``), Healthy as the driver says unless
    it holds a logical slice (``sliced``; a card the kubelet lists as assigned whole, ``held``,
    keeps its health); no partition capacity."""
    try:
        cards = node.cards()
    except HydmiError as exc:
        log.error("cannot list cards", extra={"error": str(exc)})
        cards = []
    addresses = hygon_pci_addresses(host_root)
    health: dict[str, bool] = {}
    for card in cards:
        key = card_key(card, addresses)
        if key is not None:
            health[key] = card.healthy
    return whole_card_plan(whole_card_health(health, sliced, held))
