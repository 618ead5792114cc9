"""The shared fake API server (tests/support/fake_api_server) as a pod's service account
reaches it: over TLS on 127.0.0.1, with the token and the CA in files, so the webhook's real
in-cluster client (``load_incluster_config``, as webhook/offered.py calls it) lists its
Leases, in this process or in a child."""

from __future__ import annotations

import contextlib
import json
import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from fake_api_server import FakeApiServer, Fault, Request
from hygon_dcu_plugin.vocabulary import GEOMETRY_ANNOTATION, GEOMETRY_LABEL, GEOMETRY_LABEL_VALUE
from kubernetes import client
from kubernetes.config import incluster_config
from webhook_support import Authority

NAMESPACE = "hygon-dcu-system"


@dataclass
class InCluster:
    api: FakeApiServer
    token_file: Path
    ca_file: Path

    @property
    def env(self) -> dict[str, str]:
        """The variables the kubelet sets in every pod."""
        return {
            "KUBERNETES_SERVICE_HOST": "127.0.0.1",
            "KUBERNETES_SERVICE_PORT": str(self.api.port),
        }

    def enter(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """This process's in-cluster loader reads these files and this address (and the
        client's default configuration it sets is put back afterwards)."""
        for name, value in self.env.items():
            monkeypatch.setenv(name, value)
        monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(self.token_file))
        monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(self.ca_file))
        monkeypatch.setattr(client.Configuration, "_default", client.Configuration._default)

    def preamble(self) -> str:
        """Python a child runs first so that its in-cluster loader reads these files."""
        return (
            "import kubernetes.config.incluster_config as loader; "
            f"loader.SERVICE_TOKEN_FILENAME = {str(self.token_file)!r}; "
            f"loader.SERVICE_CERT_FILENAME = {str(self.ca_file)!r}"
        )

    def lease_lists(self) -> list[dict[str, str]]:
        """The query of every Lease list the server received, in order."""
        return [r.query for r in self.api.requests_for("leases", method="GET", named=False)]

    def expire_continues(self, times: int) -> None:
        """The next ``times`` continued Lease lists are answered 410 Expired: the token
        outlived etcd's compaction."""

        def continued(request: Request) -> bool:
            return request.is_for("leases", method="GET", named=False) and bool(
                request.query.get("continue")
            )

        self.api.plug(
            Fault(
                continued,
                status=410,
                reason="Expired",
                message="The provided continue parameter is too old; start a new list",
                times=times,
            )
        )

    def delete_lease(self, name: str) -> None:
        self.api.remove("Lease", name, NAMESPACE)

    def put_lease(self, name: str, text: str) -> None:
        """A node's geometry Lease, created as its device plugin creates it."""
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": name,
                "namespace": NAMESPACE,
                "labels": {GEOMETRY_LABEL: GEOMETRY_LABEL_VALUE},
                "annotations": {GEOMETRY_ANNOTATION: text},
            },
            "spec": {"holderIdentity": name, "leaseDurationSeconds": 40},
        }
        reply = self.api.handle(
            "POST",
            f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases",
            "application/json",
            json.dumps(body).encode(),
        )
        assert reply.status == 201, reply.body


@contextlib.contextmanager
def in_cluster(directory: Path, authority: Authority) -> Iterator[InCluster]:
    """The fake API server serving HTTPS with a certificate ``authority`` signed."""
    cert_pem, key_pem, _ignored = authority.issue()
    (directory / "apiserver.crt").write_bytes(cert_pem)
    (directory / "apiserver.key").write_bytes(key_pem)
    (directory / "ca.crt").write_bytes(authority.pem)
    (directory / "token").write_text("webhook-token")
    api = FakeApiServer()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(directory / "apiserver.crt", directory / "apiserver.key")
    api.start(tls=context)
    try:
        yield InCluster(api, directory / "token", directory / "ca.crt")
    finally:
        api.stop()
