"""Names that become keys, labels or paths: annotation keys, whole-card device ids, and the
message a poisoned registry name earns."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import simnode
from fake_api_server import annotation_key_problem
from fake_kube import limits_for
from hygon_dcu_plugin.deviceplugin.refused import RequestRefused
from hygon_dcu_plugin.vocabulary import FAMILY, WHOLE_CARD, annotation_key
from plugin_harness import Harness, make_node


@pytest.mark.parametrize("length", [1, 49, 50, 62, 63])
def test_every_legal_container_name_gives_a_legal_key(length: int) -> None:
    name = ("a" * length)[:-1] + "z"
    assert annotation_key_problem(annotation_key(name)) is None


def test_long_names_that_differ_at_the_end_get_different_keys() -> None:
    assert annotation_key("x" * 62 + "a") != annotation_key("x" * 62 + "b")
    # A short name that looks like a digest cannot meet a long name's key: "_" is not legal
    # in a container name.
    assert "_" in annotation_key("x" * 63)


def test_a_63_character_container_is_granted_and_annotated(harness: Harness) -> None:
    container = "q" * 63
    harness.kube.add_pod("default", "long", {container: limits_for("2g.15gb")})
    harness.kubelet.pods["default/long"] = {container: {}}
    response = harness.allocator.allocate(FAMILY, [harness.free_token()])
    assert response.envs["DMI_MIG_VISIBLE_DEVICE"].startswith("MIG-")
    (value,) = harness.kube.annotations["default/long"].values()
    assert json.loads(value)["container"] == container
    assert len(harness.node.instances()) == 1


@pytest.fixture
def mode_off(simulator_build: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Harness:
    node = make_node(tmp_path / "node", mode_on=False)
    monkeypatch.setenv(simnode.ROOT_ENV, str(node.root))
    return Harness(node, tmp_path / "state")


@pytest.mark.parametrize(
    "device_id", ["../../..", "0000:09:00.0/../../../..", "card0", "0000:ff:00.0", ""]
)
def test_whole_card_ids_never_advertised_are_refused(mode_off: Harness, device_id: str) -> None:
    with pytest.raises(RequestRefused, match="never advertised by this plugin"):
        mode_off.allocator.allocate(WHOLE_CARD, [device_id])


def test_an_advertised_whole_card_id_is_served(mode_off: Harness) -> None:
    advertised = mode_off.runtime.plan()[WHOLE_CARD][0].id
    response = mode_off.allocator.allocate(WHOLE_CARD, [advertised])
    assert "/dev/dri/card0" in {d.container_path for d in response.devices}


def test_a_poisoned_id_is_refused_with_the_directory_and_the_fix(harness: Harness) -> None:
    # Non-empty, so no sweep may remove it: the driver refuses id 3 on every card.
    for card in range(harness.sim.cards):
        poison = harness.sim.ci_conf(card, 3)
        poison.mkdir()
        (poison / "left-by-runtime").write_text("")
    harness.kube.add_pod("default", "p", {"main": limits_for("2g.15gb")})
    harness.kubelet.pods["default/p"] = {"main": {}}
    with pytest.raises(RequestRefused) as refused:
        harness.allocator.allocate(FAMILY, [harness.free_token()])
    message = str(refused.value)
    assert "/etc/dmi_mig_config/ci/dev" in message and "gi3ci0.conf is a directory" in message
    assert "remove it" in message
    assert refused.value.reason == "poisoned_registry"
    assert harness.node.instances() == []
