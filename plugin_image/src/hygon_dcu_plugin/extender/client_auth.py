"""Client certificates: the extender's handshakes can require one signed by a given CA, so
only kube-scheduler (its extender ``tlsConfig`` ``certFile``/``keyFile``) can ask it to bind.

It is the serving kit's certificate reloader (``serving.tls``) with the CA added to each context it
loads, and the CA file among the files it compares on every handshake: a new client CA (the
role renews it with the client certificate, keeping the previous CA in the file for a while)
is trusted from the next handshake on, whether or not the serving certificate changed.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable

from hygon_dcu_plugin.serving.tls import CertificateError, CertificateReloader


class ClientVerifyingReloader(CertificateReloader):
    def __init__(
        self,
        cert_path: str,
        key_path: str,
        client_ca_path: str,
        on_reload: Callable[[bool], None] | None = None,
    ) -> None:
        self.client_ca_path = client_ca_path  # read by _load, which the base calls at once
        super().__init__(cert_path, key_path, on_reload)

    def _paths(self) -> tuple[str, ...]:
        return self.cert_path, self.key_path, self.client_ca_path

    def _load(self) -> ssl.SSLContext:
        context = super()._load()
        try:
            context.load_verify_locations(cafile=self.client_ca_path)
        except (OSError, ssl.SSLError) as error:
            raise CertificateError(
                f"cannot load the client CA {self.client_ca_path}: {error}; mount the PEM CA "
                "that signed kube-scheduler's extender client certificate"
            ) from error
        context.verify_mode = ssl.CERT_REQUIRED
        return context
