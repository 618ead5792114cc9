"""``ansible-playbook hygon.dcu.report`` run for real against two simulated nodes of different
models, carved with the simulator's own hy-smi; the report (printed, fleet.json, fleet.html as
Chromium renders it) is checked against the simulator's state, not against the product's."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
import simnode
from fake_api_server import FakeApiServer, serving
from fake_api_server import pod as stored_pod

from . import browser
from .runner import ReportRun, hy_smi, run_report, write_inventory

# Several playbook runs, each starting ansible and (for the cluster) the kubernetes client.
pytestmark = pytest.mark.slow

NODE_NAMES = {"node-a": "gpu-a", "node-b": "gpu-b"}


@dataclass
class Fleet:
    nodes: dict[str, simnode.SimNode]
    run: ReportRun
    report_dir: Path
    api: FakeApiServer
    pods_by_uuid: dict[str, list[str]]

    def report(self) -> dict[str, Any]:
        report: dict[str, Any] = json.loads((self.report_dir / "fleet.json").read_text())
        return report


def carve(node_a: simnode.SimNode, node_b: simnode.SimNode) -> None:
    """Two 1-slice instances and a 2-slice one on the BW node, a 3-slice and a 2-slice one on
    the hypothetical 8-slice node (which leaves slice 3 free between them)."""
    for node in (node_a, node_b):
        hy_smi(node, "-mig", "1")
    hy_smi(node_a, "mig", "-cgi", "2g.15gb", "-C", "-i", "0")
    hy_smi(node_a, "mig", "-cgi", "2g.15gb", "-C", "-i", "0")
    hy_smi(node_a, "mig", "-cgi", "4g.31gb", "-C", "-i", "1")
    hy_smi(node_b, "mig", "-cgi", "3g.48gb", "-C")
    hy_smi(node_b, "mig", "-cgi", "2g.32gb", "-C")


def uuid_at(node: simnode.SimNode, card: int, start: int) -> str:
    """The uuid of the partition placed at ``start`` on ``card``, from the simulator's state."""
    status = node.status()
    (gi,) = [g for g in status.gpu_instances if g.card == card and g.start == start]
    (ci,) = [c for c in status.compute_instances if c.card == card and c.gpu_instance_id == gi.id]
    return ci.uuid


PLUGIN_NAMESPACE = "hygon-dcu-system"
PLUGIN_LABELS = {"app.kubernetes.io/name": "hygon-dcu-device-plugin"}


def pod(
    name: str, node: str, namespace: str = "ml", annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    """A running workload pod on ``node``."""
    return stored_pod(
        name,
        namespace,
        node=node,
        labels={"app": name},
        annotations=annotations or {},
        phase="Running",
        ready=True,
    )


def plugin_pod(node: str, ready: bool) -> dict[str, Any]:
    """The device plugin's pod on ``node``, as its DaemonSet makes it."""
    return stored_pod(
        f"hygon-dcu-device-plugin-{node}",
        PLUGIN_NAMESPACE,
        node=node,
        labels=PLUGIN_LABELS,
        phase="Running" if ready else "Pending",
        ready=ready,
    )


def grant(partition_uuid: str) -> str:
    """An annotation value as the device plugin writes it (docs/dev/contracts.md)."""
    return json.dumps({"card": "x", "profile": "x", "placement": "0:1", "uuid": partition_uuid})


@pytest.fixture(scope="module")
def fleet(sim_build: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    root = tmp_path_factory.mktemp("fleet")
    nodes = {
        "node-a": simnode.init(root / "a", model="c3000-bw", cards=2),
        "node-b": simnode.init(root / "b", model="hypo-x8", cards=1),
    }
    carve(nodes["node-a"], nodes["node-b"])
    # A runtime's leftover directory on a ci/ name: the report must list it.
    (nodes["node-b"].ci_dir / "dev0gi9ci0.conf").mkdir()
    a_uuids = [uuid_at(nodes["node-a"], card, start) for card, start in ((0, 0), (0, 1), (1, 0))]
    b_uuids = [uuid_at(nodes["node-b"], 0, start) for start in (0, 4)]
    api = FakeApiServer()
    for seeded in [
        # The annotation key as written today, and two other key shapes (the key's format
        # may change; the value's uuid is what counts).
        pod("trainer", "gpu-a", annotations={"hygon.com/dcu.partition.main": grant(a_uuids[0])}),
        pod(
            "a-pod-with-a-very-long-container-name",
            "gpu-a",
            namespace="research",
            annotations={"hygon.com/dcu.partition-7f3a9c": grant(a_uuids[2])},
        ),
        pod("infer", "gpu-b", annotations={"hygon.com/dcu.partition.c": grant(b_uuids[0])}),
        # A grant for a partition that no longer exists, and a uuid outside any grant.
        pod(
            "stale",
            "gpu-b",
            annotations={"hygon.com/dcu.partition.main": grant(str(uuid.uuid4()))},
        ),
        pod("bystander", "gpu-b", annotations={"example.com/note": b_uuids[1]}),
        # Same uuid, other node's pod list: never attached to node-a's partition.
        pod(
            "elsewhere",
            "gpu-c",
            annotations={"hygon.com/dcu.partition.main": grant(a_uuids[1])},
        ),
        plugin_pod("gpu-a", ready=True),
        plugin_pod("gpu-b", ready=False),
    ]:
        api.seed(seeded)
    pods_by_uuid = {
        a_uuids[0]: ["ml/trainer"],
        a_uuids[1]: [],
        a_uuids[2]: ["research/a-pod-with-a-very-long-container-name"],
        b_uuids[0]: ["ml/infer"],
        b_uuids[1]: [],
    }
    for served in serving(api):
        report_dir = root / "report"
        inventory = write_inventory(
            root / "inventory.yml",
            nodes,
            hygon_dcu_manage_kubernetes=True,
            hygon_dcu_kubeconfig=str(served.kubeconfig(root / "kubeconfig")),
        )
        (root / "host_vars").mkdir()
        for host, node_name in NODE_NAMES.items():
            (root / "host_vars" / f"{host}.yml").write_text(f"hygon_dcu_node_name: {node_name}\n")
        run = run_report(inventory, hygon_dcu_report_dir=str(report_dir))
        assert run.returncode == 0, run.output
        yield Fleet(nodes, run, report_dir, served, pods_by_uuid)


def expected_cards(node: simnode.SimNode) -> list[dict[str, Any]]:
    """Cards, partitions and free placements as the simulator's own state and model table say."""
    status = node.status()
    profiles = {p.id: p for p in node.model.profiles}
    ci_uuid = {(ci.card, ci.gpu_instance_id): ci.uuid for ci in status.compute_instances}
    cards = []
    for index, pci in enumerate(status.cards):
        gis = sorted((gi for gi in status.gpu_instances if gi.card == index), key=lambda g: g.start)
        used = {s for gi in gis for s in range(gi.start, gi.start + gi.size)}
        cards.append(
            {
                "index": index,
                "pci": pci,
                "slice_count": node.model.slices,
                "partitions": [
                    {
                        "profile": profiles[gi.profile_id].name,
                        "placement": f"{gi.start}:{gi.size}",
                        "gpu_instance_id": gi.id,
                        "uuid": ci_uuid[(index, gi.id)],
                    }
                    for gi in gis
                ],
                "free_placements": {
                    p.name: [
                        f"{start}:{p.slices}"
                        for start in p.starts
                        if not used & set(range(start, start + p.slices))
                    ]
                    for p in node.model.profiles
                },
            }
        )
    return cards


PARTITION_KEYS = ("profile", "placement", "gpu_instance_id", "uuid")


@pytest.mark.floor
def test_json_matches_the_simulators_state_and_names_each_partitions_pods(fleet: Fleet) -> None:
    report = fleet.report()
    assert report["not_read"] == []
    by_host = {node["host"]: node for node in report["nodes"]}
    assert sorted(by_host) == sorted(fleet.nodes)
    for host, node in fleet.nodes.items():
        got = by_host[host]
        assert got["mode"] == ("enabled" if node.status().mode == 1 else "disabled")
        assert got["node_name"] == NODE_NAMES[host]
        want = expected_cards(node)
        assert [
            {
                "index": c["index"],
                "pci": c["pci"],
                "slice_count": c["slice_count"],
                "partitions": [{k: p[k] for k in PARTITION_KEYS} for p in c["partitions"]],
                "free_placements": c["free_placements"],
            }
            for c in got["cards"]
        ] == want
        for card in got["cards"]:
            for part in card["partitions"]:
                names = [f"{p['namespace']}/{p['name']}" for p in part["pods"]]
                assert names == fleet.pods_by_uuid[part["uuid"]], part
    poison = sorted(
        "/" + str(p.relative_to(node.root))
        for node in fleet.nodes.values()
        for p in node.ci_dir.iterdir()
        if p.is_dir()
    )
    assert poison == ["/etc/dmi_mig_config/ci/dev0gi9ci0.conf"]
    assert by_host["node-b"]["poison"] == poison
    assert by_host["node-a"]["poison"] == []
    assert by_host["node-a"]["plugin"]["state"] == "ready"
    assert by_host["node-b"]["plugin"]["state"] == "not ready"


def test_the_report_reads_only_and_prints_every_node(fleet: Fleet) -> None:
    assert {request.method for request in fleet.api.requests} == {"GET"}
    # Read-only on the nodes: only the control node's two files (and their directory) changed.
    assert fleet.run.changed == {"localhost": 3, "node-a": 0, "node-b": 0}
    for node in fleet.nodes.values():
        assert [line.split()[0] for line in node.ops()].count("create_gi") == len(
            node.status().gpu_instances
        )
    out = fleet.run.output
    trainer, idle = uuid_at(fleet.nodes["node-a"], 0, 0), uuid_at(fleet.nodes["node-a"], 0, 1)
    assert re.search(r"card 0 0000:09:00\.0, .*4 slices \[##\.\.\]", out), out
    assert re.search(r"card 0 0000:1a:00\.0, .*8 slices \[###\.##\.\.\]", out), out
    assert (
        f"partition 2g.15gb at 0:1 (GPU instance 3, compute instance 0) uuid {trainer}: "
        "pod ml/trainer" in out
    )
    assert f"uuid {idle}: no pod" in out
    assert (
        "free placements: 1g.16gb 3:1 6:1 7:1; 2g.32gb 6:2; 3g.48gb none; 4g.64gb none; "
        "8g.128gb none" in out
    )
    assert "poison directories: 1: /etc/dmi_mig_config/ci/dev0gi9ci0.conf" in out
    assert "device plugin: ready (hygon-dcu-device-plugin-gpu-a)" in out
    assert "device plugin: not ready (hygon-dcu-device-plugin-gpu-b)" in out


VOID_ELEMENTS = {
    "area",
    "base",
    "br",
    "col",
    "embed",
    "hr",
    "img",
    "input",
    "link",
    "meta",
    "source",
    "wbr",
}


class _Strips(HTMLParser):
    """Every card strip of the rendered page ([data-slices]) with its cells' attributes and text."""

    def __init__(self) -> None:
        super().__init__()
        self.strips: list[dict[str, Any]] = []
        self.measured = ""
        self._depth = 0
        self._cell: dict[str, Any] | None = None
        self._cell_depth = 0
        self._strip_depth = 0
        self._in_measured = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in VOID_ELEMENTS:
            self.handle_startendtag(tag, attrs)
            return
        attributes = {k: v or "" for k, v in attrs}
        self._depth += 1
        if tag == "pre" and attributes.get("id") == "measured":
            self._in_measured = True
        if "data-slices" in attributes:
            self.strips.append({**attributes, "cells": []})
            self._strip_depth = self._depth
        elif self.strips and self._cell is None and self._depth == self._strip_depth + 1:
            self._cell = {**attributes, "text": ""}
            self._cell_depth = self._depth
            self.strips[-1]["cells"].append(self._cell)

    def handle_endtag(self, tag: str) -> None:
        if tag in VOID_ELEMENTS:
            return
        if self._cell is not None and self._depth == self._cell_depth:
            self._cell = None
        if tag == "pre":
            self._in_measured = False
        self._depth -= 1

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self._cell is not None:
            self._cell["text"] += " "

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell["text"] += data + " "
        if self._in_measured:
            self.measured += data


# Appended to a copy of the page: reads where the browser laid each strip out, after layout
# and below everything else, so the copy renders exactly as the page does above it.
MEASURE = """<pre id="measured"></pre><script>
document.getElementById('measured').textContent = JSON.stringify(
  [...document.querySelectorAll('[data-slices]')].map(s => {
    const r = s.getBoundingClientRect();
    return {host: s.dataset.host, pci: s.dataset.pci, slices: +s.dataset.slices,
            left: r.left, top: r.top, width: r.width, height: r.height};
  }));
</script>"""


@pytest.mark.skipif(
    browser.chromium() is None,
    reason="chromium is not installed (apt-get install -y chromium): rendered page not checked",
)
def test_the_rendered_page_shows_each_cards_slices(fleet: Fleet, tmp_path: Path) -> None:
    page = fleet.report_dir / "fleet.html"
    html = page.read_text()
    assert not re.search(r"<script|<link|src=|url\(", html, re.I), "the page must be self-contained"
    measuring = tmp_path / "measuring.html"
    measuring.write_text(html.replace("</body>", MEASURE + "</body>"))
    parsed = _Strips()
    parsed.feed(browser.dump_dom(measuring, tmp_path / "profile-dom"))
    layout = {(m["host"], m["pci"]): m for m in json.loads(parsed.measured)}
    strips = {(s["data-host"], s["data-pci"]): s for s in parsed.strips}
    image = browser.read_png(
        browser.screenshot(page, tmp_path / "fleet.png", tmp_path / "profile-shot")
    )
    background = image.pixel(2, 2)
    free_colours: set[tuple[int, int, int]] = set()
    used_colours: list[tuple[str, int, tuple[int, int, int]]] = []
    want_keys = set()
    for host, node in fleet.nodes.items():
        status = node.status()
        for index, pci in enumerate(status.cards):
            key = (host, pci)
            want_keys.add(key)
            strip, box = strips[key], layout[key]
            assert box["slices"] == node.model.slices
            assert box["top"] + box["height"] < image.height, "the page is taller than the shot"
            gis = [gi for gi in status.gpu_instances if gi.card == index]
            # Labels: every partition's cell names its profile and its pod (or "no pod").
            profiles = {p.id: p.name for p in node.model.profiles}
            ci_uuid = {(ci.card, ci.gpu_instance_id): ci.uuid for ci in status.compute_instances}
            for gi in gis:
                cells = [
                    c for c in strip["cells"] if c.get("data-placement") == f"{gi.start}:{gi.size}"
                ]
                assert len(cells) == 1, (key, gi, strip["cells"])
                text = " ".join(cells[0]["text"].split())
                assert profiles[gi.profile_id] in text, text
                pods = fleet.pods_by_uuid[ci_uuid[(index, gi.id)]]
                for name in pods or ["no pod"]:
                    assert name in text, (name, text)
            # Pixels: each slice cell's colour, sampled just inside its top edge (no text there).
            used = {s for gi in gis for s in range(gi.start, gi.start + gi.size)}
            column = box["width"] / box["slices"]
            y = int(box["top"]) + 3
            for slice_ in range(box["slices"]):
                colour = image.pixel(int(box["left"] + (slice_ + 0.5) * column), y)
                if slice_ in used:
                    used_colours.append((f"{host} {pci} slice {slice_}", slice_, colour))
                else:
                    free_colours.add(colour)
    assert set(strips) == want_keys
    assert len(free_colours) == 1, f"free slices drawn in several colours: {free_colours}"
    (free,) = free_colours
    assert free != background, "free slices are not drawn"
    assert used_colours
    for where, _slice, colour in used_colours:
        assert colour != free, f"{where} is occupied but drawn like a free slice {free}"
        assert colour != background, f"{where} is occupied but not drawn"


def test_without_kubernetes_the_pods_are_skipped_and_an_unchanged_fleet_rewrites_nothing(
    sim_build: Any, tmp_path: Path
) -> None:
    nodes = {
        "node-a": simnode.init(tmp_path / "a", model="c3000-bw", cards=2),
        "node-b": simnode.init(tmp_path / "b", model="hypo-x8", cards=1),
    }
    carve(*nodes.values())
    # No cluster anywhere: a kubeconfig pointing nowhere proves the cluster is not asked.
    inventory = write_inventory(
        tmp_path / "inventory.yml",
        nodes,
        hygon_dcu_manage_kubernetes="false",
        hygon_dcu_kubeconfig=str(tmp_path / "no-such-kubeconfig"),
    )
    report_dir = tmp_path / "out"
    first = run_report(inventory, hygon_dcu_report_dir=str(report_dir))
    assert first.returncode == 0, first.output
    report = json.loads((report_dir / "fleet.json").read_text())
    for node in report["nodes"]:
        assert node["kubernetes"] is False
        assert node["plugin"] == {"state": "not read", "pods": []}
        parts = [p for card in node["cards"] for p in card["partitions"]]
        assert parts and all(p["pods"] is None for p in parts)
    assert "pods not read (Kubernetes steps off)" in first.output
    assert "device plugin: not read (Kubernetes steps off)" in first.output
    files = {name: (report_dir / name).read_bytes() for name in ("fleet.json", "fleet.html")}

    again = run_report(inventory, hygon_dcu_report_dir=str(report_dir))
    assert again.returncode == 0, again.output
    assert again.changed == {"localhost": 0, "node-a": 0, "node-b": 0}

    # A new partition on one node: check mode predicts both files change and writes neither.
    hy_smi(nodes["node-b"], "mig", "-cgi", "1g.16gb", "-C")
    check = run_report(inventory, "--check", hygon_dcu_report_dir=str(report_dir))
    assert check.returncode == 0, check.output
    assert check.changed == {"localhost": 2, "node-a": 0, "node-b": 0}
    assert {name: (report_dir / name).read_bytes() for name in files} == files

    real = run_report(inventory, hygon_dcu_report_dir=str(report_dir))
    assert real.changed == check.changed
    report = json.loads((report_dir / "fleet.json").read_text())
    (node_b,) = [n for n in report["nodes"] if n["host"] == "node-b"]
    assert [p["placement"] for p in node_b["cards"][0]["partitions"]] == [
        f"{gi.start}:{gi.size}"
        for gi in sorted(nodes["node-b"].status().gpu_instances, key=lambda g: g.start)
    ]


def test_a_node_with_its_mode_off_shows_each_cards_slices_as_the_simulator_holds_them(
    sim_build: Any, tmp_path: Path
) -> None:
    node = simnode.init(tmp_path / "a", model="c3000-bw", cards=2)
    for card, cus, mib in ((0, "20,30", "16384,8192"), (1, "40", "32768")):
        assert node.create_vdevs(card, cus, mib).returncode == 0
    inventory = write_inventory(
        tmp_path / "inventory.yml", {"node-a": node}, hygon_dcu_manage_kubernetes="false"
    )
    report_dir = tmp_path / "out"

    run = run_report(inventory, hygon_dcu_report_dir=str(report_dir))

    assert run.returncode == 0, run.output
    (reported,) = json.loads((report_dir / "fleet.json").read_text())["nodes"]
    assert reported["slices_error"] is None
    for card in reported["cards"]:
        held = [v for v in node.status().vdevs if v.card == card["index"]]
        assert [(s["id"], s["compute_units"], s["memory_mib"]) for s in card["logical_slices"]] == [
            (v.id, v.cu_count, v.mem_mib) for v in sorted(held, key=lambda v: v.id)
        ]
        assert card["slice_use"]["free_compute_units"] == 80 - sum(v.cu_count for v in held)
        assert card["slice_use"]["free_memory_mib"] == 65520 - sum(v.mem_mib for v in held)
    assert (
        "logical slices: 0 (20 CUs, 16384 MiB), 1 (30 CUs, 8192 MiB); free 30 CUs, 40944 MiB"
        in (run.output)
    )
    page = (report_dir / "fleet.html").read_text()
    assert page.count('data-logical-slices="2"') == 1 and page.count('data-logical-slices="1"') == 1
    assert "free 40 CUs, 32752 MiB" in page


def test_a_target_that_matches_no_host_is_refused_by_name(sim_build: Any, tmp_path: Path) -> None:
    node = simnode.init(tmp_path / "a", model="c3000-bw", cards=1)
    inventory = write_inventory(tmp_path / "inventory.yml", {"node-a": node})
    report_dir = tmp_path / "out"

    run = run_report(inventory, target="rack-nine", hygon_dcu_report_dir=str(report_dir))

    assert run.returncode != 0
    assert "target 'rack-nine' matches no host in the inventory" in run.output
    assert not report_dir.exists()
    assert node.ops() == []


def test_a_node_that_cannot_be_read_is_listed_and_the_others_are_reported(
    sim_build: Any, tmp_path: Path
) -> None:
    node = simnode.init(tmp_path / "a", model="hypo-x8", cards=1)
    # A host whose variables fail the checks: it fails, the others are still reported.
    inventory = write_inventory(
        tmp_path / "inventory.yml",
        {"node-a": node},
        other_hosts={"node-z": {"hygon_dcu_host_root": "not/absolute"}},
        hygon_dcu_manage_kubernetes=False,
    )
    report_dir = tmp_path / "out"

    run = run_report(inventory, hygon_dcu_report_dir=str(report_dir))

    assert run.returncode != 0
    assert run.failed == {"localhost": 0, "node-a": 0, "node-z": 1}
    report = json.loads((report_dir / "fleet.json").read_text())
    assert report["not_read"] == ["node-z"]
    assert [n["host"] for n in report["nodes"]] == ["node-a"]
    assert report["nodes"][0]["mode"] == "disabled"
    assert "Not read (the run failed there): node-z" in (report_dir / "fleet.html").read_text()
