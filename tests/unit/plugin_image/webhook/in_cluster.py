"""The fake API server (fake_apiserver.py) as a pod's service account reaches it: over TLS on
127.0.0.1, with the token and the CA in files, so the webhook's real in-cluster client
(``load_incluster_config``, as webhook/offered.py calls it) lists its Leases, in this process
or in a child."""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fake_apiserver import FakeApiServer
from hygon_dcu_plugin.vocabulary import GEOMETRY_ANNOTATION, GEOMETRY_LABEL, GEOMETRY_LABEL_VALUE
from kubernetes import client
from kubernetes.config import incluster_config
from webhook_support import Authority

NAMESPACE = "hygon-dcu-system"


@dataclass
class InCluster:
    api: Any  # the FakeApiServer (an untyped test helper)
    token_file: Path
    ca_file: Path

    @property
    def env(self) -> dict[str, str]:
        """The variables the kubelet sets in every pod."""
        return {
            "KUBERNETES_SERVICE_HOST": "127.0.0.1",
            "KUBERNETES_SERVICE_PORT": str(self.api.http.server_address[1]),
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
        code, answer = self.api.serve_lease("POST", f"{NAMESPACE}/{name}", NAMESPACE, body)
        assert code == 201, answer


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
    api.http.socket = context.wrap_socket(api.http.socket, server_side=True)
    api.start()
    try:
        yield InCluster(api, directory / "token", directory / "ca.crt")
    finally:
        api.stop()
