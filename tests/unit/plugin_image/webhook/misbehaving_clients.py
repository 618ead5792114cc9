"""Clients that hold connections to a server on loopback without making requests, for the
tests of the HTTPS serving kit (the webhook's and the extender's server) under such clients.

A ``Crowd`` opens each kind of connection a probe found holding the servers' slots, and closes
every socket it opened when its ``with`` block ends. A connection the server refuses or closes
is counted, not raised: what the tests judge is whether the server still answers others.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import time
from types import TracebackType

# The first bytes of a TLS handshake record (type 22, version 3.1): a ClientHello begun and
# never finished.
HELLO_START = b"\x16\x03\x01"
# A request line whose headers never end.
HEAD_START = b"GET /healthz HTTP/1.1\r\nHost: x\r\n"


class Crowd:
    """Connections to 127.0.0.1:``port`` from ``source`` (any 127.0.0.0/8 address is
    loopback on Linux, so a test can play a second client address)."""

    def __init__(self, port: int, context: ssl.SSLContext, source: str = "127.0.0.1") -> None:
        self.port = port
        self.context = context
        self.source = source
        self.sockets: list[socket.socket] = []
        self.refused = 0

    def __enter__(self) -> Crowd:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        for held in self.sockets:
            held.close()
        self.sockets.clear()

    def _connect(self) -> socket.socket:
        plain = socket.create_connection(
            ("127.0.0.1", self.port), timeout=10, source_address=(self.source, 0)
        )
        self.sockets.append(plain)
        return plain

    def unhandshaken(self, count: int) -> None:
        """TCP connections that never send a byte."""
        for _index in range(count):
            self._connect()

    def hellos_begun(self, count: int) -> None:
        """TCP connections that begin a TLS handshake and never finish it."""
        for _index in range(count):
            plain = self._connect()
            with contextlib.suppress(OSError):
                plain.sendall(HELLO_START)

    def idle_tls(self, count: int) -> None:
        """TLS connections that complete the handshake and never send a request."""
        for _index in range(count):
            self._handshake()

    def heads_begun(self, count: int, head: bytes = HEAD_START) -> None:
        """TLS connections that send the start of a request head and nothing more."""
        for _index in range(count):
            tls = self._handshake()
            if tls is not None:
                try:
                    tls.sendall(head)
                except OSError:
                    self.refused += 1

    def _handshake(self) -> ssl.SSLSocket | None:
        plain = self._connect()
        try:
            tls = self.context.wrap_socket(plain, server_hostname="127.0.0.1")
        except OSError:  # refused or closed by the server
            self.refused += 1
            return None
        # The TLS socket now owns the descriptor: hold it instead of the detached one.
        self.sockets[-1] = tls
        return tls


def closed_within(connection: socket.socket, seconds: float) -> float | None:
    """Seconds until the server closed ``connection`` (end of stream or reset, whatever it
    sent before), or None if it was still open after ``seconds``."""
    started = time.monotonic()
    deadline = started + seconds
    while (left := deadline - time.monotonic()) > 0:
        connection.settimeout(left)
        try:
            if not connection.recv(65536):
                return time.monotonic() - started
        except TimeoutError:
            return None
        except OSError:  # a reset, or a TLS record cut short
            return time.monotonic() - started
    return None
