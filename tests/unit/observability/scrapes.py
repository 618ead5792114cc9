"""The three programs' real /metrics pages, and a reader of the Prometheus text format.

The real device plugin (`hygon-dcu-plugin serve` as a process, registered with the kubelet
emulator, on a simulated node, reading a minimal API server; once with the partition mode on
and once with it off), the real webhook and the real extender (each served over TLS in this
process) are scraped after one granted Allocate, one refused Allocate, one denied pod, one
filter and one bad request each, so labelled series exist.

The reader covers what the programs export (text format 0.0.4, and OpenMetrics' suffixes) and
fails loudly on anything it does not understand.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest
import simnode
from extender.fake_cluster import FakeCluster
from extender.support import T0, Geometries, profile_limits, text
from extender.support import serving as serving_extender
from fake_api_server import FakeApiServer
from fake_api_server import pod as stored_pod
from hygon_dcu_plugin.vocabulary import FAMILY, SLICE_MEMORY_MIB, SLICED
from kubelet_emulator import KubeletEmulator
from plugin_harness import make_node, serve_argv
from polling import wait_until
from webhook_pod_cases import container, pod
from webhook_support import admission_review, make_authority, serving

REPO = Path(__file__).resolve().parents[3]
P2G = "hygon.com/dcu.partitioned.mig-2g.15gb"

# -- the text exposition format -----------------------------------------------------------

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+\S+(\s+\S+)?$")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')
# Sample names each family type produces (text format 0.0.4 and OpenMetrics).
_SUFFIXES = {
    "counter": ("", "_total", "_created"),
    "gauge": ("",),
    "untyped": ("",),
    "unknown": ("",),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "gaugehistogram": ("_bucket", "_gsum", "_gcount"),
    "summary": ("", "_sum", "_count", "_created"),
    "info": ("_info",),
    "stateset": ("",),
}


@dataclass
class Exported:
    """What one or more /metrics pages export: queryable series name -> label names seen.

    A family declared by ``# TYPE`` but without a sample yet is listed under ``declared``
    (its name can be queried once it has samples, but its labels are unknown).
    """

    labels: dict[str, set[str]] = field(default_factory=dict)
    declared: set[str] = field(default_factory=set)
    types: dict[str, str] = field(default_factory=dict)

    def names(self) -> set[str]:
        return set(self.labels) | self.declared

    def family_labels(self, family: str) -> set[str] | None:
        """The label names of a declared family's samples (without a histogram's ``le``);
        None while it has no sample."""
        samples = [family + suffix for suffix in _SUFFIXES[self.types[family]]]
        seen = [self.labels[name] for name in samples if name in self.labels]
        return set().union(*seen) - {"le"} if seen else None

    def merge(self, other: Exported) -> Exported:
        merged = Exported({k: set(v) for k, v in self.labels.items()}, set(self.declared))
        for name, labels in other.labels.items():
            merged.labels.setdefault(name, set()).update(labels)
        merged.declared |= other.declared
        merged.declared -= set(merged.labels)
        merged.types = {**self.types, **other.types}
        return merged


def parse_exposition(text: str) -> Exported:
    """Sample names and their label names; a sample must belong to a declared family."""
    types: dict[str, str] = {}
    labels: dict[str, set[str]] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("# HELP ") or line.startswith("# UNIT "):
            continue
        if line.startswith("# TYPE "):
            parts = line.split()
            if len(parts) != 4 or parts[3] not in _SUFFIXES:
                raise ValueError(f"line {number}: bad TYPE line {line!r}")
            types[parts[2]] = parts[3]
            continue
        if line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if not match:
            raise ValueError(f"line {number}: not a sample {line!r}")
        name, body = match.group(1), match.group(3) or ""
        family = _family_of(name, types)
        if family is None:
            raise ValueError(f"line {number}: {name} has no # TYPE line")
        names = set()
        rest = body
        while rest.strip():
            pair = _LABEL.match(rest)
            if not pair:
                raise ValueError(f"line {number}: bad labels {body!r}")
            names.add(pair.group(1))
            rest = rest[pair.end() :]
        labels.setdefault(name, set()).update(names)
    declared = set()
    for family, kind in types.items():
        produced = {family + suffix for suffix in _SUFFIXES[kind]}
        if not produced & set(labels):
            # No sample yet: the name Prometheus will store (counters: as declared, or with
            # _total in OpenMetrics; info: with _info), labels unknown.
            main = family + ("_info" if kind == "info" else "")
            if kind == "counter" and not family.endswith("_total"):
                main = family + "_total"
            if kind in ("histogram", "summary", "gaugehistogram"):
                declared |= {family + s for s in _SUFFIXES[kind] if s != "_created"}
            else:
                declared.add(main)
    return Exported(labels, declared, types)


def _family_of(sample: str, types: dict[str, str]) -> str | None:
    if sample in types and "" in _SUFFIXES[types[sample]]:
        return sample
    for family, kind in types.items():
        for suffix in _SUFFIXES[kind]:
            if suffix and sample == family + suffix:
                return family
    return None


# -- the real endpoints -------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def http_get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as reply:
            return int(reply.status), reply.read().decode()
    except OSError:
        return 0, ""


def scrape_plugin(tmp: Path, mode_on: bool = True) -> str:
    """The plugin's /metrics after real Allocates through gRPC: with the mode on, one granted
    and one refused partition; with it off, one granted logical slice."""
    simnode.build()
    sim = make_node(tmp / "node", mode_on=mode_on)
    short = Path(tempfile.mkdtemp(prefix="hdo", dir="/tmp"))  # unix socket paths stay short
    api = FakeApiServer().start()
    kubelet = KubeletEmulator(str(short / "dp"), str(short / "pr" / "kubelet.sock"))
    kubelet.start()
    port, metrics_port = free_port(), free_port()
    while metrics_port == port:
        metrics_port = free_port()
    env = {
        **sim.env(),
        "PYTHONPATH": os.pathsep.join(
            [str(REPO / "plugin_image" / "src"), str(REPO / ".venv" / "collections")]
        ),
    }
    process = subprocess.Popen(
        serve_argv(sim, short, api.kubeconfig(short / "kubeconfig"), kubelet, port, metrics_port),
        env=env,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    served = P2G if mode_on else SLICED
    try:
        assert kubelet.wait_for(lambda: kubelet.counts().get(served, 0) > 0), "never registered"
        assert wait_until(lambda: http_get(port, "/readyz")[0] == 200)
        if mode_on:
            _partitions(api, kubelet)
            info = "hygon_dcu_partition_info{"
        else:
            limits = {SLICED: "1", SLICE_MEMORY_MIB: "8192"}
            api.seed(stored_pod("nb", "team", node="node-1", containers={"main": limits}))
            kubelet.admit("team", "nb", "main", {SLICED: 1})
            info = "hygon_dcu_slice_info{"
        # The info gauges follow the grants on the next refresh.
        assert wait_until(lambda: info in http_get(metrics_port, "/metrics")[1])
        status, text = http_get(metrics_port, "/metrics")
        assert status == 200
        label = "2g.15gb" if mode_on else "slice"
        assert f'hygon_dcu_allocations_total{{profile="{label}"}} 1.0' in text
        assert re.search(r"^hygon_dcu_allocate_duration_seconds_count [1-9]", text, re.M)
        if mode_on:
            refused = r'^hygon_dcu_allocation_failures_total\{reason="\w+"\} 1\.0$'
            assert re.search(refused, text, re.M)
        return text
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        process.communicate(timeout=30)
        kubelet.stop()
        api.stop()
        shutil.rmtree(short, ignore_errors=True)


def _partitions(api: FakeApiServer, kubelet: KubeletEmulator) -> None:
    api.seed(
        stored_pod("train", "team", node="node-1", containers={"main": {FAMILY: "1", P2G: "1"}})
    )
    kubelet.admit("team", "train", "main", {FAMILY: 1, P2G: 1})
    # no profile: refused
    api.seed(stored_pod("bad", "team", node="node-1", containers={"main": {FAMILY: "1"}}))
    with pytest.raises(grpc.RpcError):
        kubelet.admit("team", "bad", "main", {FAMILY: 1})


def scrape_webhook(tmp: Path) -> str:
    """One denied pod and one bad request, then the webhook's /metrics."""
    with serving(tmp, make_authority()) as running:
        status, answer = running.review(admission_review(pod(container("train", {FAMILY: "1"}))))
        assert status == 200 and answer["response"]["allowed"] is False
        assert running.request("GET", "/validate")[0] == 405
        status, _headers, body = running.request("GET", "/metrics")
        assert status == 200
        text = body.decode()
        assert 'hygon_dcu_admission_reviews_total{decision="denied"} 1.0' in text
        assert 'hygon_dcu_admission_bad_requests_total{reason="method-not-allowed"} 1.0' in text
        return text


def scrape_extender(tmp: Path) -> str:
    """One filter, prioritize and bind over a simulated node's geometry and one bad request,
    then the extender's /metrics."""
    simnode.build()
    authority = make_authority("observability extender CA")
    one_card = Geometries(tmp / "nodes").empty("c3000-bw", cards=1)
    with FakeCluster() as cluster:
        cluster.put_lease("node-1", text(one_card), renewed=T0)
        train = cluster.add_pod("train", {"main": profile_limits("2g.15gb")})
        with serving_extender(tmp, authority, cluster) as running:
            assert running.filter(train, ["node-1"])["nodenames"] == ["node-1"]
            assert running.prioritize(train, ["node-1"])["node-1"] > 0
            assert running.bind(train, "node-1") == ""
            assert running.request("GET", "/filter")[0] == 405
            status, body = running.request("GET", "/metrics")
    assert status == 200
    page = bytes(body).decode()
    assert 'hygon_dcu_extender_binds_total{outcome="bound"} 1.0' in page
    assert 'hygon_dcu_extender_bad_requests_total{reason="method-not-allowed"} 1.0' in page
    return page


@dataclass
class Scrape:
    """Each program's page; the plugin's once with the mode on and once with it off."""

    plugin: str
    sliced_plugin: str
    webhook: str
    extender: str

    def pages(self) -> dict[str, list[str]]:
        """The pages of each program, by the name hygon_dcu_build_info gives it."""
        return {
            "device-plugin": [self.plugin, self.sliced_plugin],
            "admission": [self.webhook],
            "extender": [self.extender],
        }

    def exported(self) -> Exported:
        merged = Exported()
        for pages in self.pages().values():
            for page in pages:
                merged = merged.merge(parse_exposition(page))
        return merged

    def replaced(self, old: str, new: str) -> Scrape:
        """A copy with ``old`` replaced in every page, as if the programs had renamed it."""
        return Scrape(
            **{f.name: getattr(self, f.name).replace(old, new) for f in dataclasses.fields(self)}
        )


def scrape_all(tmp_path_factory: pytest.TempPathFactory) -> Scrape:
    return Scrape(
        plugin=scrape_plugin(tmp_path_factory.mktemp("plugin")),
        sliced_plugin=scrape_plugin(tmp_path_factory.mktemp("sliced"), mode_on=False),
        webhook=scrape_webhook(tmp_path_factory.mktemp("webhook")),
        extender=scrape_extender(tmp_path_factory.mktemp("extender")),
    )
