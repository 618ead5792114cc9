"""The node's cards as the plugin finds them through host_root (every host path maps under it
by the collection's one rule, ``hostpath.host_path``): which PCI devices are Hygon cards, and
the one device key of a card.

A card's key is its PCI address: the whole-card device id, the card lock, the grants and the
reclaimer all use it. A card whose address is not known is not offered, in either mode
(see ``card_key``).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence

from ansible_collections.hygon.dcu.plugins.module_utils.cards import Card
from ansible_collections.hygon.dcu.plugins.module_utils.hostpath import host_path

log = logging.getLogger(__name__)

HYGON_PCI_VENDOR = "0x1d94"
PCI_DEVICES = "/sys/bus/pci/devices"


def hygon_pci_addresses(host_root: str) -> list[str]:
    """PCI addresses of the Hygon cards in sysfs, sorted.

    Mode off has no registry (dev<N> is the only index -> PCI map the driver gives), so the
    whole-card resource pairs library index N with the N-th address in PCI order. That pairing
    is our inference, not a measured fact; it only affects which render nodes a whole-card
    container gets.
    """
    bus = host_path(host_root, PCI_DEVICES)
    found = []
    try:
        names = sorted(os.listdir(bus))
    except OSError:
        return []
    for name in names:
        try:
            with open(os.path.join(bus, name, "vendor"), encoding="ascii") as handle:
                if handle.read().strip().lower() == HYGON_PCI_VENDOR:
                    found.append(name)
        except OSError:
            continue
    return found


# Card indexes whose missing key was logged: refreshes run often, the line once per occurrence.
_unkeyed: set[int] = set()
_unkeyed_lock = threading.Lock()


def card_key(card: Card, sysfs_addresses: Sequence[str] | None = None) -> str | None:
    """The card's device key: its registry address, else (given ``sysfs_addresses``, mode off
    only) the sysfs address at its index, else None.

    None means the card is not offered, in either mode (fail closed): a device id that is not
    a PCI address could never be served, and without the address no lock, grant or reclaim
    can name the card. With the mode on only the registry counts: instances, grants and the
    reclaimer all carry the registry's address, so the sysfs pairing (an inference) would key
    the card differently from its own partitions. The first time a card has no key it is
    logged with the fix, and once more when it has one again.
    """
    if card.pci:
        key: str | None = card.pci
    elif sysfs_addresses is not None and card.index < len(sysfs_addresses):
        key = sysfs_addresses[card.index]
    else:
        key = None
    with _unkeyed_lock:
        reported = card.index in _unkeyed
        if key is None:
            _unkeyed.add(card.index)
        else:
            _unkeyed.discard(card.index)
    if key is None and not reported:
        if sysfs_addresses is None:
            why = (
                f"the registry has no dev{card.index} (the only index -> PCI map with the mode on)"
            )
            fix = (
                f"the driver writes /etc/dmi_mig_config/dev{card.index} when the mode comes up "
                "(after a reboot too): check the driver and that /etc/dmi_mig_config is the host's"
            )
        else:
            why = (
                f"sysfs lists {len(sysfs_addresses)} Hygon cards (vendor {HYGON_PCI_VENDOR}) "
                f"and none at index {card.index}"
            )
            fix = f"mount the host's /sys so {PCI_DEVICES} lists every card"
        log.warning(
            "card has no known PCI address; not offering it",
            extra={"card": card.index, "why": why, "fix": fix},
        )
    elif key is not None and reported:
        log.info(
            "card has a PCI address again; offering it", extra={"card": card.index, "pci": key}
        )
    return key
