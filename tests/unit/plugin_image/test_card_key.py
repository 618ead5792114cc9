"""The one device key of a card (host.card_key): the registry address, else (mode off) the
sysfs address at the card's index, else none, and a card without a key is not offered."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import simnode
from ansible_collections.hygon.dcu.plugins.module_utils.cards import Card
from hygon_dcu_plugin.host import card_key
from hygon_dcu_plugin.vocabulary import FAMILY, SLICED, WHOLE_CARD
from plugin_harness import Harness, make_node

HOST_LOGGER = "hygon_dcu_plugin.host"


def _card(index: int, pci: str | None) -> Card:
    return Card(
        index=index,
        pci=pci,
        slice_count=8,
        cu_count=0,
        memory_mib=0,
        profiles=(),
        healthy=True,
        error=None,
    )


def _not_offered(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [
        r
        for r in caplog.records
        if r.name == HOST_LOGGER and r.getMessage().startswith("card has no known PCI address")
    ]


def test_the_registry_address_wins_over_sysfs() -> None:
    assert card_key(_card(0, "0000:09:00.0"), ["0000:0c:00.0"]) == "0000:09:00.0"
    assert card_key(_card(0, "0000:09:00.0")) == "0000:09:00.0"


def test_mode_off_pairs_the_index_with_the_sysfs_address() -> None:
    assert card_key(_card(1, None), ["0000:09:00.0", "0000:0c:00.0"]) == "0000:0c:00.0"


def test_without_the_sysfs_list_the_registry_alone_decides(
    caplog: pytest.LogCaptureFixture,
) -> None:
    index = 97  # an index no simulated node has, so no other test shares its logged state
    assert card_key(_card(index, "0000:09:00.0")) is not None  # known: nothing reported
    caplog.set_level(logging.INFO, logger=HOST_LOGGER)
    assert card_key(_card(index, None)) is None
    (record,) = _not_offered(caplog)
    assert record.levelno == logging.WARNING
    assert vars(record)["card"] == index
    assert f"dev{index}" in vars(record)["why"]
    assert f"/etc/dmi_mig_config/dev{index}" in vars(record)["fix"]


def test_an_unknown_card_is_logged_once_until_it_is_known_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    index = 98
    addresses = ["0000:09:00.0"]
    assert card_key(_card(index, "0000:ff:00.0"), addresses) is not None
    caplog.set_level(logging.INFO, logger=HOST_LOGGER)
    assert card_key(_card(index, None), addresses) is None
    assert card_key(_card(index, None), addresses) is None
    (record,) = _not_offered(caplog)
    assert "sysfs lists 1 Hygon cards" in vars(record)["why"]
    assert "/sys" in vars(record)["fix"]
    caplog.clear()
    assert card_key(_card(index, "0000:ff:00.0"), addresses) == "0000:ff:00.0"
    assert [r.getMessage() for r in caplog.records if r.name == HOST_LOGGER] == [
        "card has a PCI address again; offering it"
    ]
    caplog.clear()
    assert card_key(_card(index, None), addresses) is None
    assert len(_not_offered(caplog)) == 1


def test_mode_off_does_not_offer_a_card_sysfs_does_not_list(
    simulator_build: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    node = make_node(tmp_path / "node", mode_on=False)
    monkeypatch.setenv(simnode.ROOT_ENV, str(node.root))
    harness = Harness(node, tmp_path / "state")
    addresses = list(simnode.MODELS["c3000-bw"].pci_addresses)
    assert [d.id for d in harness.runtime.plan()[WHOLE_CARD]] == addresses
    # The host's /sys without the last card: its index has no address to pair with.
    link = Path(node.root) / "sys" / "bus" / "pci" / "devices" / addresses[7]
    target = link.readlink()
    link.unlink()
    caplog.set_level(logging.INFO, logger=HOST_LOGGER)
    harness.runtime.refresh()
    assert [d.id for d in harness.runtime.plan()[WHOLE_CARD]] == addresses[:7]
    # Nor its slices: a card without a key is offered in no form.
    assert harness.counts() == {WHOLE_CARD: 7, FAMILY: 0, SLICED: 28}
    (record,) = _not_offered(caplog)
    assert vars(record)["card"] == 7
    link.symlink_to(target)
    assert [d.id for d in harness.runtime.plan()[WHOLE_CARD]] == addresses
