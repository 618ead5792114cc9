"""Reading a request from a connection within deadlines and a byte allowance.

A socket timeout bounds one read, not a request: a client sending a byte just inside each
timeout would hold its connection (and its thread) for ever. Here the first byte of a request
starts its deadlines: a short one for the request line and headers, a longer one for the whole
request with its body; and the request may read only as many bytes as it was allowed (the
headers' allowance, then its Content-Length). Until that first byte the connection is idle:
the wait for it is bounded by the idle timeout alone, and the server is told when the byte
comes (``on_start``), so that it counts the connection as busy from then on.
"""

from __future__ import annotations

import io
import select
import socket
import time
from collections.abc import Callable
from typing import Any


class HeadersTooLarge(Exception):
    """The request line and headers did not end within their allowance."""


class RequestDeadlineExceeded(TimeoutError):
    """The request started but did not arrive in time."""


class RequestRefused(Exception):
    """The server will not serve this connection's next request (``on_start`` said no): close
    the connection without an answer."""


def wait_readable(connection: socket.socket, timeout: float) -> bool:
    """Whether bytes (or the end of the stream) arrived on ``connection`` within ``timeout``
    seconds; bytes the TLS layer already decrypted count."""
    pending: Callable[[], int] | None = getattr(connection, "pending", None)
    if pending is not None and pending():
        return True
    poller = select.poll()  # not select.select: descriptors may be above FD_SETSIZE
    poller.register(connection, select.POLLIN)
    return bool(poller.poll(max(0.0, timeout) * 1000))


class ConnectionReader(io.RawIOBase):
    """Raw reads from a (TLS) socket, for a BufferedReader the HTTP handler reads from."""

    def __init__(
        self,
        connection: socket.socket,
        *,
        idle_timeout: float,
        head_timeout: float,
        request_timeout: float,
        write_timeout: float,
        on_start: Callable[[], bool] = lambda: True,
    ) -> None:
        super().__init__()
        self._connection = connection
        self._idle_timeout = idle_timeout
        self._head_timeout = min(head_timeout, request_timeout)
        self._request_timeout = request_timeout
        self._write_timeout = write_timeout
        self._on_start = on_start
        self._started: float | None = None
        self._allowed = 0
        self._headers_done = False

    def readable(self) -> bool:
        return True

    def start_request(self, header_bytes: int) -> None:
        """Wait for the next request (up to the idle timeout), allowing header_bytes of it."""
        self._started = None
        self._allowed = header_bytes
        self._headers_done = False

    def start(self) -> float:
        """The request's first byte is here: its deadlines run from now (returned). Called by
        readinto, or by the handler for a request read from bytes buffered with the previous
        one."""
        started = self._started = time.monotonic()
        if not self._on_start():
            raise RequestRefused
        return started

    def allow_body(self, length: int) -> None:
        self._headers_done = True
        self._allowed += length

    @property
    def body_allowed(self) -> bool:
        """Whether the current request's body was (or is being) read."""
        return self._headers_done

    @property
    def started(self) -> bool:
        """Whether a byte of the current request has arrived."""
        return self._started is not None

    def remaining(self) -> float:
        """Seconds left until the current request's deadline."""
        if self._started is None:
            return self._request_timeout
        return max(0.0, self._started + self._request_timeout - time.monotonic())

    def _late(self) -> RequestDeadlineExceeded:
        if self._headers_done:
            return RequestDeadlineExceeded(
                f"the request did not arrive within {self._request_timeout:g} s"
            )
        return RequestDeadlineExceeded(
            f"the request line and headers did not arrive within {self._head_timeout:g} s"
        )

    def readinto(self, buffer: Any) -> int:
        if self._allowed <= 0:
            if not self._headers_done:
                raise HeadersTooLarge
            return 0
        started = self._started
        if started is None:
            if not wait_readable(self._connection, self._idle_timeout):
                raise TimeoutError  # an idle keep-alive connection, not a late request
            started = self.start()
        limit = self._request_timeout if self._headers_done else self._head_timeout
        timeout = started + limit - time.monotonic()
        if timeout <= 0:
            raise self._late()
        view = memoryview(buffer).cast("B")[: self._allowed]
        self._connection.settimeout(timeout)
        try:
            count = self._connection.recv_into(view)
        except TimeoutError as error:
            raise self._late() from error
        finally:
            self._connection.settimeout(self._write_timeout)
        self._allowed -= count
        return count
