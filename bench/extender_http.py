"""The scheduler extender as kube-scheduler meets it: filter, prioritize and bind of one pod over
HTTPS, on fleets of fragmented nodes (docs/dev/extender.md).

    .venv/bin/python bench/extender_http.py            # 100, 1,000 and 5,000 nodes
    .venv/bin/python bench/extender_http.py --quick    # 20 and 100 nodes: a smoke run

The extender is the product's own process body (``ExtenderState``, ``Extender``, the HTTPS
server) forked from this script and reached over TLS on 127.0.0.1 with one kept-alive
connection, as kube-scheduler keeps one. Its Kubernetes API is answered in memory (the
``MemoryApi`` below), so the figures are the extender's own time; a real API server adds the
round trips of bind's four calls. Each listing renews every Lease (a new resourceVersion, the
same geometry), as the plugins do.

The fleet: 8-card nodes, half of each simulated model (each node's empty geometry is what its
plugin publishes), each filled to a seeded share (10-95%) by ``placement.choose`` and then
emptied of a seeded share of its instances (0-60%), so free slices sit between carved ones;
about a quarter of the nodes hold a reservation of a pod bound but not yet admitted. Pods:
half by profile (of either model), half by size (up to 4 GiB under a profile's memory), each
asked as kube-scheduler asks: filter with every node's name, prioritize with the nodes that
passed, bind to the best.

Baseline, in the same run and interleaved: the same three requests for a pod that asks no
partition (the wire, TLS, parsing and the server's own work, no placement).
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import logging
import math
import multiprocessing
import os
import random
import ssl
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
# The same import roots pytest gets from pyproject.toml, plus the tests' certificate authority.
for _extra in (
    "tests/unit/plugin_image/webhook",
    "tests/support",
    "tests/simulator",
    "plugin_image/src",
    ".venv/collections",
    ".",
):
    if str(REPO / _extra) not in sys.path:
        sys.path.insert(0, str(REPO / _extra))

from hygon_dcu_plugin import logs  # noqa: E402
from hygon_dcu_plugin.extender.kube import LeaseInfo, PodInfo, PodRef  # noqa: E402
from hygon_dcu_plugin.extender.metrics import ExtenderMetrics  # noqa: E402
from hygon_dcu_plugin.extender.server import make_server  # noqa: E402
from hygon_dcu_plugin.extender.state import ExtenderState  # noqa: E402
from hygon_dcu_plugin.extender.verbs import Extender  # noqa: E402
from hygon_dcu_plugin.geometry import Geometry, card_views, encode  # noqa: E402
from hygon_dcu_plugin.placement import PACK, choose, slices_of  # noqa: E402
from hygon_dcu_plugin.request import ProfileRequest, SizeRequest  # noqa: E402
from hygon_dcu_plugin.reservation import Reservation, Reserved  # noqa: E402
from hygon_dcu_plugin.reservation import encode as encode_reservation  # noqa: E402
from hygon_dcu_plugin.serving.gc_pauses import FullPauses  # noqa: E402
from hygon_dcu_plugin.serving.tls import CertificateReloader  # noqa: E402
from hygon_dcu_plugin.vocabulary import (  # noqa: E402
    FAMILY,
    MEMORY_MIB,
    PROFILE_PREFIX,
    RESERVATION_ANNOTATION,
    SCHEDULER_NAME,
)
from webhook_support import make_authority  # noqa: E402

from bench.multinode import MODELS, Requests, node_geometry  # noqa: E402
from bench.report import table  # noqa: E402
from bench.workload import seed_for  # noqa: E402

NAMESPACE = "hygon-dcu-system"
POD_NAMESPACE = "bench"
LEASE_SECONDS = 40
FULL_SIZES = (100, 1000, 5000)
QUICK_SIZES = (20, 100)
PODS = 100
QUICK_PODS = 10


# The fleet --------------------------------------------------------------------------------


@dataclass(frozen=True)
class FleetNode:
    name: str
    geometry: Geometry
    reservation: Reservation | None  # of a pod bound here and not yet admitted


def fragmented_fleet(nodes: int, seed: int) -> list[FleetNode]:
    """``nodes`` nodes, half of each model, filled and then partly emptied (module docstring)."""
    rng = random.Random(seed)
    fleet = []
    for n in range(nodes):
        model = MODELS[n % 2]
        cards = list(node_geometry(model).cards)
        names = sorted({p.name for c in cards for p in c.profiles})
        total = sum(c.slice_count for c in cards)
        carved: list[tuple[int, int, int]] = []  # (card, start, size)
        target = rng.uniform(0.10, 0.95) * total
        for _attempt in range(4 * total):
            if sum(len(c.occupied) for c in cards) >= target:
                break
            choice = choose(card_views(Geometry(0, tuple(cards))), rng.choice(names), PACK)
            if choice is None:
                continue
            index, placement = choice.card.index, choice.placement
            used = slices_of(placement.start, placement.size)
            cards[index] = replace(cards[index], occupied=cards[index].occupied | used)
            carved.append((index, placement.start, placement.size))
        for index, start, size in rng.sample(carved, int(rng.uniform(0.0, 0.6) * len(carved))):
            cards[index] = replace(
                cards[index], occupied=cards[index].occupied - slices_of(start, size)
            )
        geometry = Geometry(1, tuple(cards))
        name = f"{model}-{n:05d}"
        fleet.append(FleetNode(name, geometry, _reservation(name, geometry, rng)))
    return fleet


def _reservation(node: str, geometry: Geometry, rng: random.Random) -> Reservation | None:
    if rng.random() >= 0.25:
        return None
    names = sorted({p.name for c in geometry.cards for p in c.profiles})
    choice = choose(card_views(geometry), rng.choice(names), PACK)
    if choice is None:
        return None
    taken = Reserved(
        choice.card.pci, choice.profile.name, choice.placement.start, choice.placement.size
    )
    return Reservation(node, time.time(), {"main": taken})


def seeded_pods(count: int, seed: int) -> list[Requests]:
    """Half profile requests (of either model), half size requests (any model can serve)."""
    rng = random.Random(seed)
    profiles = sorted(
        {(p.name, p.memory_mib) for m in MODELS for c in node_geometry(m).cards for p in c.profiles}
    )
    pods: list[Requests] = []
    for n in range(count):
        name, memory = rng.choice(profiles)
        request: ProfileRequest | SizeRequest = (
            ProfileRequest(name) if n % 2 == 0 else SizeRequest(memory - rng.randint(0, 4096))
        )
        pods.append((("main", request),))
    return pods


def percentile(samples: Sequence[float], share: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


def pod_object(name: str, uid: str, requests: Requests) -> dict[str, Any]:
    """The pod as kube-scheduler sends it (what the extender reads of it)."""
    containers = []
    for container, request in requests:
        if isinstance(request, ProfileRequest):
            limits = {FAMILY: "1", PROFILE_PREFIX + request.profile: "1"}
        elif isinstance(request, SizeRequest):
            limits = {FAMILY: "1", MEMORY_MIB: str(request.memory_mib)}
        else:
            limits = {}
        containers.append({"name": container, "image": "app", "resources": {"limits": limits}})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": POD_NAMESPACE, "uid": uid},
        "spec": {"schedulerName": SCHEDULER_NAME, "containers": containers},
    }


# The extender's API, in memory -----------------------------------------------------------


class MemoryApi:
    """What the extender asks of the API server, answered from this process's memory."""

    def __init__(self, fleet: Sequence[FleetNode], pods: Sequence[Mapping[str, Any]]) -> None:
        self._lock = threading.Lock()
        self._texts = {node.name: encode(node.geometry) for node in fleet}
        self._renewals = 0
        self._pods: dict[str, PodInfo] = {}
        for pod in pods:
            self._pods[pod["metadata"]["name"]] = self._info(pod, "1", "", {})
        for node in fleet:
            if node.reservation is not None:
                name = f"held-{node.name}"
                raw = pod_object(name, f"held-{node.name}", ())
                annotations = {RESERVATION_ANNOTATION: encode_reservation(node.reservation)}
                self._pods[name] = self._info(raw, "1", node.name, annotations)

    @staticmethod
    def _info(
        raw: Mapping[str, Any], version: str, node: str, annotations: Mapping[str, str]
    ) -> PodInfo:
        meta = raw["metadata"]
        ref = PodRef(meta["namespace"], meta["name"], meta["uid"])
        return PodInfo(ref, version, "Pending", node, False, dict(annotations), raw)

    def _lease(self, name: str) -> LeaseInfo:
        return LeaseInfo(name, self._texts[name], time.time(), LEASE_SECONDS, f"{self._renewals}")

    def list_geometry_leases(self, namespace: str) -> Iterator[LeaseInfo]:
        with self._lock:
            self._renewals += 1  # every plugin renewed its Lease since the last listing
        yield from (self._lease(name) for name in list(self._texts))

    def get_lease(self, namespace: str, name: str) -> LeaseInfo | None:
        return self._lease(name) if name in self._texts else None

    def list_reserved_pods(self) -> list[PodInfo]:
        with self._lock:
            return [p for p in self._pods.values() if RESERVATION_ANNOTATION in p.annotations]

    def get_pod(self, namespace: str, name: str) -> PodInfo | None:
        with self._lock:
            return self._pods.get(name)

    def reserve_pod(self, pod: PodInfo, text: str) -> None:
        with self._lock:
            current = self._pods[pod.ref.name]
            annotations = {**current.annotations, RESERVATION_ANNOTATION: text}
            version = str(int(current.resource_version) + 1)
            self._pods[pod.ref.name] = replace(
                current, resource_version=version, annotations=annotations
            )

    def unlabel_pod(self, pod: PodInfo) -> None:
        del pod  # the reserved list here is every pod with the annotation

    def bind_pod(self, pod: PodRef, node: str) -> None:
        with self._lock:
            self._pods[pod.name] = replace(self._pods[pod.name], node_name=node)

    def create_event(self, pod: PodRef, kind: str, reason: str, message: str) -> None:
        del pod, kind, reason, message


# The extender process ---------------------------------------------------------------------


def serve(api: MemoryApi, cert: str, key: str, port_out: Any) -> None:
    """The extender's body (``extender.main`` without flags), logging at info as deployed."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    logs.setup("info")
    state = ExtenderState(api, NAMESPACE)
    state.after_refresh = FullPauses().after_refresh
    metrics = ExtenderMetrics(sample=state.counts)
    extender = Extender(state, api)
    server = make_server("127.0.0.1", 0, CertificateReloader(cert, key), metrics, extender)
    port_out.send(server.server_address[1])
    state.start()
    server.serve_forever()


class Client:
    """One kept-alive HTTPS connection, as kube-scheduler holds to its extender."""

    def __init__(self, port: int, ca: str) -> None:
        context = ssl.create_default_context(cafile=ca)
        self._connection = http.client.HTTPSConnection("127.0.0.1", port, context=context)

    def post(self, verb: str, document: Any) -> Any:
        body = json.dumps(document).encode()
        self._connection.request("POST", f"/{verb}", body, {"Content-Type": "application/json"})
        response = self._connection.getresponse()
        data = response.read()
        if response.status != 200:
            raise RuntimeError(f"{verb}: HTTP {response.status}: {data[:300]!r}")
        return json.loads(data)

    def ready(self) -> bool:
        try:
            self._connection.request("GET", "/healthz")
            response = self._connection.getresponse()
            response.read()
            return response.status == 200
        except OSError:
            self._connection.close()
            return False


@dataclass
class Timings:
    filter: list[float]
    prioritize: list[float]
    bind: list[float]
    total: list[float]
    bound: int = 0

    @classmethod
    def empty(cls) -> Timings:
        return cls([], [], [], [])


def schedule(client: Client, pod: Mapping[str, Any], nodes: list[str], into: Timings) -> None:
    """What kube-scheduler asks for one pod: filter, prioritize the nodes that passed, bind to
    the best of them (the first name among equal scores)."""
    meta = pod["metadata"]
    started = time.perf_counter()
    passed = client.post("filter", {"Pod": pod, "NodeNames": nodes})["nodenames"]
    filtered = time.perf_counter()
    scores = client.post("prioritize", {"Pod": pod, "NodeNames": passed}) if passed else []
    prioritized = time.perf_counter()
    if scores:
        best = max(scores, key=lambda s: s["score"])["host"]
        binding = {
            "PodName": meta["name"],
            "PodNamespace": meta["namespace"],
            "PodUID": meta["uid"],
            "Node": best,
        }
        error = client.post("bind", binding)["error"]
        if error:
            raise RuntimeError(f"bind of {meta['name']} to {best}: {error}")
        into.bound += 1
    done = time.perf_counter()
    into.filter.append(filtered - started)
    into.prioritize.append(prioritized - filtered)
    into.bind.append(done - prioritized)
    into.total.append(done - started)


def measure(
    size: int, pods: int, seed: int, ca: str, cert: str, key: str
) -> tuple[Timings, Timings]:
    fleet = fragmented_fleet(size, seed_for("extender http fleet", seed))
    asked = seeded_pods(pods, seed_for("extender http pods", seed))
    partition = [pod_object(f"pod-{n}", f"uid-{n}", r) for n, r in enumerate(asked)]
    plain = [pod_object(f"plain-{n}", f"plain-uid-{n}", ()) for n in range(pods)]
    api = MemoryApi(fleet, partition + plain)
    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=serve, args=(api, cert, key, send), daemon=True)
    child.start()
    try:
        port = receive.recv()
        client = Client(port, ca)
        deadline = time.monotonic() + 120
        while not client.ready():
            if time.monotonic() > deadline:
                raise RuntimeError("the extender did not become ready")
            time.sleep(0.2)
        names = [node.name for node in fleet]
        ours, baseline = Timings.empty(), Timings.empty()
        for pod, other in zip(partition, plain, strict=True):
            schedule(client, other, names, baseline)  # interleaved: the same machine load
            schedule(client, pod, names, ours)
        return ours, baseline
    finally:
        child.kill()
        child.join()


def _ms(value: float) -> str:
    return f"{1000 * value:.2f}"


def report(results: Sequence[tuple[int, Timings, Timings]]) -> str:
    rows = []
    for size, ours, baseline in results:
        rows.append(
            [
                f"{size} nodes",
                f"{len(ours.total)} ({ours.bound} bound)",
                _ms(percentile(ours.filter, 0.5)),
                _ms(percentile(ours.prioritize, 0.5)),
                _ms(percentile(ours.bind, 0.5)),
                _ms(percentile(ours.total, 0.5)),
                _ms(percentile(ours.total, 0.99)),
                _ms(percentile(baseline.total, 0.5)),
                _ms(percentile(baseline.total, 0.99)),
                f"{percentile(ours.total, 0.5) / percentile(baseline.total, 0.5):.1f}",
            ]
        )
    first = results[0]
    for size, ours, baseline in results[1:]:
        rows.append(
            [
                f"{size}/{first[0]} (x{size / first[0]:g} nodes)",
                "",
                "",
                "",
                "",
                f"{percentile(ours.total, 0.5) / percentile(first[1].total, 0.5):.2f}",
                f"{percentile(ours.total, 0.99) / percentile(first[1].total, 0.99):.2f}",
                f"{percentile(baseline.total, 0.5) / percentile(first[2].total, 0.5):.2f}",
                f"{percentile(baseline.total, 0.99) / percentile(first[2].total, 0.99):.2f}",
                "",
            ]
        )
    headers = [
        "fleet",
        "pods",
        "filter p50 ms",
        "prioritize p50",
        "bind p50",
        "all three p50",
        "p99",
        "no-partition pod p50",
        "p99",
        "all three / no-partition p50",
    ]
    return table(headers, rows)


def run(sizes: Sequence[int], pods: int) -> str:
    authority = make_authority("bench extender CA")
    cert_pem, key_pem, _cert = authority.issue()
    with tempfile.TemporaryDirectory() as where:
        files = {"ca.pem": authority.pem, "tls.crt": cert_pem, "tls.key": key_pem}
        for name, data in files.items():
            Path(where, name).write_bytes(data)
        ca, cert, key = (str(Path(where, name)) for name in files)
        results = []
        for size in sizes:
            print(f"  extender_http: {size} nodes", file=sys.stderr, flush=True)
            results.append((size, *measure(size, pods, 0, ca, cert, key)))
    return "\n".join(
        [
            "== extender over HTTPS: filter + prioritize + bind of one pod ==",
            f"fragmented 8-card nodes ({', '.join(MODELS)}), filled 10-95% then 0-60% of the "
            "instances removed, a quarter holding a reservation; every node named in filter; "
            f"{pods} pods in sequence (half by profile, half by size), each bound; p99 is "
            "nearest-rank; the no-partition pod is the baseline (the wire and server alone)",
            table_note(),
            report(results),
        ]
    )


def table_note() -> str:
    return f"machine: {os.cpu_count()} cores; extender in a forked process, one TLS connection"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--quick", action="store_true", help="20 and 100 nodes, 10 pods")
    args = parser.parse_args(argv)
    logging.getLogger().setLevel(logging.WARNING)
    started = time.monotonic()
    print(run(*((QUICK_SIZES, QUICK_PODS) if args.quick else (FULL_SIZES, PODS))))
    print(f"(extender_http: {time.monotonic() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
    sys.exit(130)
