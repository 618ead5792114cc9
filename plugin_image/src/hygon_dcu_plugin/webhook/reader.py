"""Reading a request from a connection within a deadline and a byte allowance.

A socket timeout bounds one read, not a request: a client sending a byte just inside each
timeout would hold its connection (and its thread) for ever. Here the first byte of a request
starts a deadline for the whole request line, headers and body, and the request may read only
as many bytes as it was allowed (the headers' allowance, then its Content-Length).
"""

from __future__ import annotations

import io
import socket
import time
from typing import Any


class HeadersTooLarge(Exception):
    """The request line and headers did not end within their allowance."""


class RequestDeadlineExceeded(TimeoutError):
    """The request started but did not arrive in time."""


class ConnectionReader(io.RawIOBase):
    """Raw reads from a (TLS) socket, for a BufferedReader the HTTP handler reads from."""

    def __init__(
        self,
        connection: socket.socket,
        idle_timeout: float,
        request_timeout: float,
        write_timeout: float,
    ) -> None:
        super().__init__()
        self._connection = connection
        self._idle_timeout = idle_timeout
        self._request_timeout = request_timeout
        self._write_timeout = write_timeout
        self._deadline: float | None = None
        self._allowed = 0
        self._headers_done = False

    def readable(self) -> bool:
        return True

    def start_request(self, header_bytes: int) -> None:
        """Wait for the next request (up to the idle timeout), allowing header_bytes of it."""
        self._deadline = None
        self._allowed = header_bytes
        self._headers_done = False

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
        return self._deadline is not None

    def remaining(self) -> float:
        """Seconds left until the current request's deadline."""
        if self._deadline is None:
            return self._request_timeout
        return max(0.0, self._deadline - time.monotonic())

    def readinto(self, buffer: Any) -> int:
        if self._allowed <= 0:
            if not self._headers_done:
                raise HeadersTooLarge
            return 0
        if self._deadline is None:
            timeout = self._idle_timeout
        else:
            timeout = self._deadline - time.monotonic()
            if timeout <= 0:
                raise RequestDeadlineExceeded(
                    f"the request did not arrive within {self._request_timeout:g} s"
                )
        view = memoryview(buffer).cast("B")[: self._allowed]
        self._connection.settimeout(timeout)
        try:
            count = self._connection.recv_into(view)
        except TimeoutError as error:
            if self._deadline is None:
                raise  # an idle keep-alive connection, not a late request
            raise RequestDeadlineExceeded(
                f"the request did not arrive within {self._request_timeout:g} s"
            ) from error
        finally:
            self._connection.settimeout(self._write_timeout)
        if count and self._deadline is None:
            self._deadline = time.monotonic() + self._request_timeout
        self._allowed -= count
        return count
