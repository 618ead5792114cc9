"""What only some tests need from the API server, plugged into the fake: a controller that
runs before each request, a fault on matching requests, a hook that lets another writer act
in the middle of a client's sequence."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .replies import Reply, failure
from .requests import Request

if TYPE_CHECKING:
    from .server import FakeApiServer


class Behaviour:
    """Called for every request, outside the store's lock: ``before`` may answer in the
    server's place (return a Reply) or change the store; ``after`` sees the answer."""

    def before(self, api: FakeApiServer, request: Request) -> Reply | None:
        return None

    def after(self, api: FakeApiServer, request: Request, reply: Reply) -> None:
        return None


def _remaining(times: int | None) -> bool:
    return times is None or times > 0


@dataclass(eq=False)
class Fault(Behaviour):
    """Matching requests wait on ``hold`` (a hung server) and/or are answered with ``status``
    (an outage, a refusal, an expired continue token), ``times`` of them (None: every one)."""

    matches: Callable[[Request], bool]
    status: int | None = 503
    reason: str = "ServiceUnavailable"
    message: str = "injected by the test"
    times: int | None = None
    hold: threading.Event | None = None
    hold_seconds: float = 30.0
    hits: int = 0

    def before(self, api: FakeApiServer, request: Request) -> Reply | None:
        if not self.matches(request) or not _remaining(self.times):
            return None
        self.hits += 1
        if self.times is not None:
            self.times -= 1
        if self.hold is not None:
            self.hold.wait(self.hold_seconds)
        if self.status is None:
            return None
        return failure(self.status, self.reason, self.message)


@dataclass(eq=False)
class Hook(Behaviour):
    """Run ``action`` before (or, with ``after=True``, after) each matching request, ``times``
    of them (None: every one): someone else writing between a client's read and its write."""

    matches: Callable[[Request], bool]
    action: Callable[[FakeApiServer, Request], object]
    after_request: bool = False
    times: int | None = None

    def _fire(self, api: FakeApiServer, request: Request) -> None:
        if self.matches(request) and _remaining(self.times):
            if self.times is not None:
                self.times -= 1
            self.action(api, request)

    def before(self, api: FakeApiServer, request: Request) -> Reply | None:
        if not self.after_request:
            self._fire(api, request)
        return None

    def after(self, api: FakeApiServer, request: Request, reply: Reply) -> None:
        if self.after_request and reply.status < 400:
            self._fire(api, request)
