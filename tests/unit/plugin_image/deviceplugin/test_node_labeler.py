"""The node_labels opt-in: the real labeler, on a simulated node, through the real Kubernetes
client against the shared fake API server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import simnode
from ansible_collections.hygon.dcu.plugins.module_utils.hydmi import HydmiError
from ansible_collections.hygon.dcu.plugins.module_utils.node import Node
from fake_api_server import FakeApiServer, Fault, Request
from hygon_dcu_plugin.deviceplugin.node_labeler import NodeLabeler
from hygon_dcu_plugin.kube import KubernetesApi
from plugin_harness import make_node

NODE = "gpu-node-1"
PRESENT = "hygon.com/dcu.present"


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    with FakeApiServer() as server:
        server.seed(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": NODE, "labels": {PRESENT: "true"}},
            }
        )
        yield server


def labeler(
    api: FakeApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, usable: bool = True
) -> tuple[NodeLabeler, simnode.SimNode]:
    sim = make_node(tmp_path / "node", cards=2)
    monkeypatch.setenv(simnode.ROOT_ENV, str(sim.root))
    kube = KubernetesApi(str(api.kubeconfig(tmp_path / "kubeconfig")))
    library = simnode.LIB_PATH if usable else tmp_path / "no-such-library.so"
    return NodeLabeler(Node(str(sim.root), str(library)), kube, NODE), sim


def mode_unreadable() -> tuple[int, int]:
    raise HydmiError("hydmiGetMigMode", 999)


def labels(api: FakeApiServer) -> dict[str, Any]:
    node = api.get("Node", NODE)
    assert node is not None
    return dict(node["metadata"]["labels"])


def node_patches(api: FakeApiServer) -> list[Request]:
    return [r for r in api.writes() if r.method == "PATCH" and r.is_for("nodes")]


def test_labels_are_written_once_kept_true_and_nothing_else_is_touched(
    api: FakeApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, simulator_build: Path
) -> None:
    keeper, sim = labeler(api, tmp_path, monkeypatch)
    assert keeper.settle()
    written = labels(api)
    assert written[PRESENT] == "true"
    assert written["hygon.com/dcu.mig.mode"] == "on"
    assert written["hygon.com/dcu.count"] == "2"
    assert written["hygon.com/dcu.mig-2g.15gb.count"] == "8"

    assert keeper.settle() == {} and len(node_patches(api)) == 1  # right already: no write
    # A label removed by hand comes back; a profile the cards no longer offer goes.
    api.change(
        "Node",
        NODE,
        metadata={"labels": {"hygon.com/dcu.count": None, "hygon.com/dcu.mig-9g.99gb.count": "1"}},
    )
    assert keeper.settle() == {
        "hygon.com/dcu.count": "2",
        "hygon.com/dcu.mig-9g.99gb.count": None,
    }
    assert labels(api) == written

    # The mode switched by hand while the plugin runs: the next pass says so.
    sim.switch_mode(on=False)
    assert keeper.settle() == {"hygon.com/dcu.mig.mode": "off"}


def test_without_the_library_or_the_api_nothing_is_written(
    api: FakeApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, simulator_build: Path
) -> None:
    assert labeler(api, tmp_path, monkeypatch, usable=False)[0].settle() == {}
    # The cards readable but not the mode (a fault the simulator has no switch for): the mode
    # would come from the registry alone, a guess, so nothing is written.
    keeper, _sim = labeler(api, tmp_path / "mode", monkeypatch)
    monkeypatch.setattr(keeper.node.library, "system_mig_mode", mode_unreadable)
    assert keeper.node.cards() and keeper.settle() == {}
    api.plug(Fault(lambda request: request.is_for("nodes"), status=503))
    assert labeler(api, tmp_path / "again", monkeypatch)[0].settle() == {}
    assert node_patches(api) == [] and labels(api) == {PRESENT: "true"}
