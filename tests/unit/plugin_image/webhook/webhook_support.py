"""Test helpers: a CA and serving certificates, a client for the running webhook, reviews."""

from __future__ import annotations

import contextlib
import datetime
import http.client
import ipaddress
import json
import os
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from hygon_dcu_plugin.webhook.server import AdmissionServer, serve
from playbook_runner import BIN, ansible_env

SERVICE_DNS = "hygon-dcu-admission.hygon-dcu-system.svc"


@dataclass
class Authority:
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate

    @property
    def pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def issue(self, common_name: str = SERVICE_DNS) -> tuple[bytes, bytes, x509.Certificate]:
        """A serving certificate for the Service name and 127.0.0.1: (cert PEM, key PEM, cert)."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(
                x509.SubjectAlternativeName(
                    [x509.DNSName(SERVICE_DNS), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
                ),
                critical=False,
            )
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
            )
            .sign(self.key, hashes.SHA256())
        )
        key_pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        return cert.public_bytes(serialization.Encoding.PEM), key_pem, cert


def make_authority(name: str = "hygon-dcu test CA") -> Authority:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    return Authority(key, cert)


def write_atomically(path: Path, data: bytes) -> None:
    """Replace a file the way a Secret update does: new inode, never half written."""
    temporary = path.with_name(path.name + ".new")
    temporary.write_bytes(data)
    os.replace(temporary, path)


@dataclass
class Running:
    server: AdmissionServer | None
    port: int
    ca_pem: bytes
    cert_path: Path
    key_path: Path

    def client_context(self, ca_pem: bytes | None = None) -> ssl.SSLContext:
        context = ssl.create_default_context(cadata=(ca_pem or self.ca_pem).decode())
        return context

    def connect(self, ca_pem: bytes | None = None) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection(
            "127.0.0.1", self.port, context=self.client_context(ca_pem), timeout=10
        )

    def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, dict[str, str], bytes]:
        connection = self.connect()
        try:
            connection.request(method, path, body=body, headers=headers or {})
            response = connection.getresponse()
            return response.status, dict(response.getheaders()), response.read()
        finally:
            connection.close()

    def review(self, review: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        status, _ignored, body = self.request(
            "POST",
            "/validate",
            json.dumps(review).encode(),
            {"Content-Type": "application/json"},
        )
        return status, json.loads(body)

    def metric(self, series: str) -> float:
        status, _ignored, body = self.request("GET", "/metrics")
        assert status == 200
        for line in body.decode().splitlines():
            if line.startswith(series + " "):
                return float(line.rsplit(" ", 1)[1])
        raise AssertionError(f"no series {series}")


@contextlib.contextmanager
def serving(directory: Path, authority: Authority, **settings: Any) -> Iterator[Running]:
    """The webhook served in this process on 127.0.0.1, with serve()'s keyword settings."""
    cert_pem, key_pem, _ignored = authority.issue()
    cert_path = directory / "tls.crt"
    key_path = directory / "tls.key"
    cert_path.write_bytes(cert_pem)
    key_path.write_bytes(key_pem)
    server = serve("127.0.0.1", 0, str(cert_path), str(key_path), **settings)
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    try:
        yield Running(server, server.server_address[1], authority.pem, cert_path, key_path)
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def admission_review(
    pod_object: dict[str, Any] | None,
    uid: str = "705ab4f5-6393-11e8-b7cc-42010a800002",
    operation: str = "CREATE",
    resource: str = "pods",
    *,
    old_object: dict[str, Any] | None = None,
    username: str = "alice",
) -> dict[str, Any]:
    """An AdmissionReview as the API server sends it for a pod (an UPDATE carries the pod
    before it as ``old_object``)."""
    request: dict[str, Any] = {
        "uid": uid,
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": resource},
        "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
        "requestResource": {"group": "", "version": "v1", "resource": resource},
        "namespace": "ml",
        "operation": operation,
        "userInfo": {"username": username, "groups": ["system:authenticated"]},
        "object": pod_object,
        "oldObject": old_object,
        "dryRun": False,
        "options": {
            "apiVersion": "meta.k8s.io/v1",
            "kind": "UpdateOptions" if operation == "UPDATE" else "CreateOptions",
        },
    }
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


REPO_ROOT = Path(__file__).resolve().parents[4]
# What a webhook process run from the tree imports from: the package and, as in the image, the
# collection's module_utils it shares.
PROCESS_PYTHONPATH = f"{REPO_ROOT / 'plugin_image' / 'src'}:{REPO_ROOT / '.venv' / 'collections'}"
TEMPLATES = REPO_ROOT / "roles" / "device_plugin" / "templates" / "admission"
TEMPLATE_NAMES = (
    "serviceaccount",
    "role",
    "rolebinding",
    "deployment",
    "service",
    "validatingwebhookconfiguration",
    "poddisruptionbudget",
)

_PLAYBOOK = """\
- hosts: localhost
  gather_facts: false
  connection: local
  tasks:
    - ansible.builtin.template:
        src: "{{ templates }}/{{ item }}.yaml.j2"
        dest: "{{ out }}/{{ item }}.yaml"
        mode: "0600"
      loop: %s
"""


def start_render(workdir: Path, variables: dict[str, Any]) -> subprocess.Popen[str]:
    """Render the webhook's templates with ansible.builtin.template, as the role will."""
    workdir.mkdir(parents=True)
    (workdir / "play.yml").write_text(_PLAYBOOK % json.dumps(list(TEMPLATE_NAMES)))
    extra = {
        **variables,
        "templates": str(TEMPLATES),
        "out": str(workdir),
        "ansible_python_interpreter": sys.executable,
    }
    (workdir / "vars.json").write_text(json.dumps(extra))
    # started, not waited for (the tests render while they do other work): the shared
    # environment, with temporary directories of its own
    env = ansible_env(
        ANSIBLE_LOCAL_TEMP=str(workdir / ".ansible-tmp"),
        ANSIBLE_REMOTE_TEMP=str(workdir / ".ansible-tmp"),
    )
    return subprocess.Popen(
        [
            str(BIN / "ansible-playbook"),
            "-i",
            "localhost,",
            str(workdir / "play.yml"),
            "-e",
            "@" + str(workdir / "vars.json"),
        ],
        cwd=workdir,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


@dataclass
class Rendered:
    returncode: int
    output: str
    documents: dict[str, dict[str, Any]]


def finish_render(workdir: Path, process: subprocess.Popen[str]) -> Rendered:
    output, _ignored = process.communicate(timeout=300)
    documents = {}
    if process.returncode == 0:
        for name in TEMPLATE_NAMES:
            documents[name] = yaml.safe_load((workdir / f"{name}.yaml").read_text())
    return Rendered(process.returncode, output, documents)
