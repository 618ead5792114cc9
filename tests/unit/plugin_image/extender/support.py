"""Test helpers: geometries of simulated nodes, a settable clock, and the extender served over
real TLS on 127.0.0.1 against the fake API server."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import http.client
import json
import os
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import simnode
from ansible_collections.hygon.dcu.plugins.module_utils.node import Node
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from hygon_dcu_plugin.extender.client_auth import ClientVerifyingReloader
from hygon_dcu_plugin.extender.kube import KubernetesExtenderApi
from hygon_dcu_plugin.extender.metrics import ExtenderMetrics
from hygon_dcu_plugin.extender.server import ExtenderServer, make_server
from hygon_dcu_plugin.extender.state import ExtenderState
from hygon_dcu_plugin.extender.verbs import Extender
from hygon_dcu_plugin.geometry import Geometry, encode, of_cards
from hygon_dcu_plugin.serving.tls import CertificateReloader
from hygon_dcu_plugin.vocabulary import FAMILY, MEMORY_MIB, PROFILE_PREFIX
from webhook_support import Authority

from .fake_cluster import NAMESPACE, FakeCluster

# A fixed "now" far from the real clock, so nothing passes by accident of timing.
T0 = 1_800_000_000.0


def profile_limits(profile: str) -> dict[str, str]:
    return {FAMILY: "1", PROFILE_PREFIX + profile: "1"}


def size_limits(memory_mib: int) -> dict[str, str]:
    return {FAMILY: "1", MEMORY_MIB: str(memory_mib)}


class Geometries:
    """The geometry each simulated model publishes with nothing carved (read once each)."""

    def __init__(self, base: Path) -> None:
        self._base = base
        self._cache: dict[tuple[str, int], Geometry] = {}

    def empty(self, model: str = "c3000-bw", cards: int = 2) -> Geometry:
        key = (model, cards)
        if key not in self._cache:
            sim = simnode.init(self._base / f"{model}-{cards}", model=model, cards=cards)
            sim.switch_mode()
            saved = os.environ.get(simnode.ROOT_ENV)
            os.environ[simnode.ROOT_ENV] = str(sim.root)
            try:
                cards_read = Node(str(sim.root), str(simnode.LIB_PATH)).cards()
            finally:
                if saved is None:
                    del os.environ[simnode.ROOT_ENV]
                else:
                    os.environ[simnode.ROOT_ENV] = saved
            self._cache[key] = of_cards(cards_read, [], 1)
        return self._cache[key]


def occupy(
    geometry: Geometry, card: int, start: int, size: int, owner: str | None = None
) -> Geometry:
    """The geometry with slices start..start+size of card ``card`` carved (by ``owner``)."""
    cards = list(geometry.cards)
    target = cards[card]
    owners = target.owners
    if owner is not None:
        from hygon_dcu_plugin.geometry import GeoOwner  # noqa: PLC0415

        owners = (*owners, GeoOwner(start, size, owner))
    cards[card] = dataclasses.replace(
        target, occupied=target.occupied | set(range(start, start + size)), owners=owners
    )
    return dataclasses.replace(geometry, generation=geometry.generation + 1, cards=tuple(cards))


def text(geometry: Geometry) -> str:
    return encode(geometry)


class Clock:
    """time.time for the extender, set by the test, and the monotonic clock by which the
    extender sees Leases change (it moves only with ``elapse``)."""

    def __init__(self, now: float = T0) -> None:
        self.now = now
        self.ticks = 0.0

    def __call__(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.ticks

    def elapse(self, seconds: float) -> None:
        """Both clocks move on."""
        self.now += seconds
        self.ticks += seconds


def client_certificate(authority: Authority, directory: Path) -> tuple[Path, Path]:
    """A client certificate the authority signed (as kube-scheduler's tlsConfig names):
    (cert file, key file)."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-scheduler")]))
        .issuer_name(authority.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(authority.key, hashes.SHA256())
    )
    cert_path, key_path = directory / "client.crt", directory / "client.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


@dataclasses.dataclass
class Client:
    """An HTTPS client of the extender at 127.0.0.1:port, trusting ``ca_pem`` (and showing
    ``certificate``, a (cert, key) pair of files, when given)."""

    port: int
    ca_pem: bytes
    certificate: tuple[Path, Path] | None = dataclasses.field(default=None, kw_only=True)

    def request(
        self, method: str, path: str, body: bytes | None = None, content_type: str | None = None
    ) -> tuple[int, bytes]:
        context = ssl.create_default_context(cadata=self.ca_pem.decode())
        if self.certificate is not None:
            context.load_cert_chain(*map(str, self.certificate))
        connection = http.client.HTTPSConnection(
            "127.0.0.1", self.port, context=context, timeout=30
        )
        headers = {"Content-Type": content_type or "application/json"} if body is not None else {}
        try:
            connection.request(method, path, body=body, headers=headers)
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()

    def post(self, path: str, document: Any) -> tuple[int, Any]:
        status, body = self.request("POST", path, json.dumps(document).encode())
        return status, json.loads(body)

    def filter(self, pod: dict[str, Any], nodes: list[str]) -> dict[str, Any]:
        # As kube-scheduler 1.20 sends it: Go field names, no Nodes with nodeCacheCapable.
        status, answer = self.post("/filter", {"Pod": pod, "Nodes": None, "NodeNames": nodes})
        assert status == 200, answer
        assert isinstance(answer, dict)
        return answer

    def prioritize(self, pod: dict[str, Any], nodes: list[str]) -> dict[str, int]:
        status, answer = self.post("/prioritize", {"Pod": pod, "Nodes": None, "NodeNames": nodes})
        assert status == 200, answer
        return {entry["host"]: entry["score"] for entry in answer}

    def bind(self, pod: dict[str, Any], node: str) -> str:
        """The bind's error ("" when bound)."""
        meta = pod["metadata"]
        status, answer = self.post(
            "/bind",
            {
                "PodName": meta["name"],
                "PodNamespace": meta["namespace"],
                "PodUID": meta["uid"],
                "Node": node,
            },
        )
        assert status == 200, answer
        error = answer["error"]
        assert isinstance(error, str)
        return error

    def metric(self, series: str) -> float:
        status, body = self.request("GET", "/metrics")
        assert status == 200
        for line in body.decode().splitlines():
            if line.startswith(series + " "):
                return float(line.rsplit(" ", 1)[1])
        raise AssertionError(f"no series {series}")


@dataclasses.dataclass
class Running(Client):
    """The extender served in this process, and its parts."""

    server: ExtenderServer
    state: ExtenderState
    extender: Extender
    metrics: ExtenderMetrics
    api: KubernetesExtenderApi

    def bind_all_at_once(self, pods: list[dict[str, Any]], node: str) -> dict[str, str]:
        """Each pod's bind to ``node`` from its own thread, all released together: pod name
        -> the bind's error ("" when bound)."""
        errors: dict[str, str] = {}
        start = threading.Barrier(len(pods))

        def bind(pod: dict[str, Any]) -> None:
            start.wait()
            errors[pod["metadata"]["name"]] = self.bind(pod, node)

        threads = [threading.Thread(target=bind, args=(pod,)) for pod in pods]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        return errors


@contextlib.contextmanager
def serving(
    directory: Path,
    authority: Authority,
    cluster: FakeCluster,
    *,
    policy: str = "binpack",
    clock: Clock | None = None,
    reservation_seconds: float = 300.0,
    refresh_seconds: float = 2.0,
    ready: bool = True,
    client_ca: Path | None = None,
) -> Iterator[Running]:
    """The extender served in this process against ``cluster``. Its refresh thread is not
    started: tests call ``state.refresh()`` when the cluster changed (``ready`` does the
    start-up rebuild and first refresh)."""
    cert_pem, key_pem, _ignored = authority.issue()
    cert_path, key_path = directory / "tls.crt", directory / "tls.key"
    cert_path.write_bytes(cert_pem)
    key_path.write_bytes(key_pem)
    clock = clock or Clock()
    api = KubernetesExtenderApi(str(cluster.kubeconfig(directory / "kubeconfig")))
    state = ExtenderState(
        api,
        NAMESPACE,
        refresh_seconds=refresh_seconds,
        reservation_seconds=reservation_seconds,
        clock=clock,
        monotonic=clock.monotonic,
    )
    metrics = ExtenderMetrics(sample=state.counts)
    state.on_release = lambda released: metrics.release(released.why)
    extender = Extender(state, api, policy=policy, clock=clock, monotonic=clock.monotonic)
    certificates = (
        CertificateReloader(str(cert_path), str(key_path))
        if client_ca is None
        else ClientVerifyingReloader(str(cert_path), str(key_path), str(client_ca))
    )
    server = make_server("127.0.0.1", 0, certificates, metrics, extender)
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    if ready:
        assert state.rebuild()
        state.refresh()
    try:
        yield Running(
            server.server_address[1], authority.pem, server, state, extender, metrics, api
        )
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
