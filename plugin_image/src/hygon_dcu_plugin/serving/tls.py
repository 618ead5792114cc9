"""The serving certificate, read from mounted files and reloaded when they change.

A Secret volume is updated by swapping a symlink, and cert-manager rotates certificates long
before they expire. Comparing the files' bytes on every handshake (two small reads; the API
server keeps connections alive, so handshakes are rare) picks up a rotation without a restart
and without a watcher thread. File times are not enough: they tick coarsely, and a rewrite
within one tick that reuses an inode looks unchanged.
"""

from __future__ import annotations

import logging
import ssl
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)

_Contents = tuple[bytes, ...]
# PEM files this large are not a certificate and key; refuse rather than read them.
_MAX_FILE = 1024 * 1024


class CertificateError(RuntimeError):
    """The certificate or key cannot be loaded."""


class CertificateReloader:
    def __init__(
        self,
        cert_path: str,
        key_path: str,
        on_reload: Callable[[bool], None] | None = None,
    ) -> None:
        self.cert_path = cert_path
        self.key_path = key_path
        self._on_reload = on_reload
        self._lock = threading.Lock()
        self._loaded = self._read_files()
        self._failed: _Contents | None = None
        self._context = self._load()

    def context(self) -> ssl.SSLContext:
        """The context to serve the next handshake with; reloads if the files changed.

        A pair that fails to load (for example a new certificate next to the old key, while a
        rotation is half written) keeps the previous context and is retried once the files
        change again.
        """
        try:
            contents = self._read_files()
        except CertificateError as error:
            log.error("tls_files_unreadable", extra={"error": str(error)})
            return self._context
        with self._lock:
            if contents in (self._loaded, self._failed):
                return self._context
            try:
                context = self._load()
            except CertificateError as error:
                self._failed = contents
                log.error("tls_reload_failed", extra={"error": str(error)})
                if self._on_reload is not None:
                    self._on_reload(False)
                return self._context
            self._context = context
            self._loaded = contents
            self._failed = None
        log.info("tls_reloaded", extra={"cert": self.cert_path})
        if self._on_reload is not None:
            self._on_reload(True)
        return context

    def _paths(self) -> tuple[str, ...]:
        """The files whose bytes the context is made of: a change to any reloads it."""
        return self.cert_path, self.key_path

    def _read_files(self) -> _Contents:
        contents = []
        for path in self._paths():
            try:
                with open(path, "rb") as file:
                    data = file.read(_MAX_FILE + 1)
            except OSError as error:
                raise CertificateError(f"cannot read {path}: {error.strerror}") from error
            if len(data) > _MAX_FILE:
                raise CertificateError(f"{path} is larger than {_MAX_FILE} bytes")
            contents.append(data)
        return tuple(contents)

    def _load(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.set_alpn_protocols(["http/1.1"])
        try:
            context.load_cert_chain(self.cert_path, self.key_path)
        except (OSError, ssl.SSLError) as error:
            raise CertificateError(
                f"cannot load certificate {self.cert_path} with key {self.key_path}: {error}; "
                "mount a PEM certificate (tls.crt) and its matching private key (tls.key)"
            ) from error
        return context
