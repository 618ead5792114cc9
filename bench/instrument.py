"""Per-call time accounting inside the benchmark process.

The plugin's own code is not touched: for the length of a benchmark, the class methods that
reach the management library, the node lock and the kubelet are wrapped, and each wrapper adds
its time to the calling thread's ledger. A gRPC server thread runs one Allocate at a time, so
the ledger of that thread during the call is the call's breakdown.

The methods are wrapped by name, so a renamed or moved method would leave its time uncounted
without a word: installing the ledger raises `MissingMethod` instead, naming the class and the
method.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ansible_collections.hygon.dcu.plugins.module_utils.hydmi import HydmiLibrary
from ansible_collections.hygon.dcu.plugins.module_utils.node import Node
from hygon_dcu_plugin.deviceplugin.allocator import Allocator
from hygon_dcu_plugin.deviceplugin.locks import Locks
from hygon_dcu_plugin.deviceplugin.podresources import PodResourcesClient
from hygon_dcu_plugin.deviceplugin.reclaimer import Reclaimer
from hygon_dcu_plugin.deviceplugin.runtime import Runtime


class MissingMethod(RuntimeError):
    """A method the ledger wraps is not defined on its class any more."""

    def __init__(self, owner: type, name: str) -> None:
        super().__init__(
            f"bench/instrument.py wraps {owner.__module__}.{owner.__qualname__}.{name}, but "
            f"class {owner.__qualname__} defines no method {name!r}: update bench/instrument.py"
        )


def own_method(owner: type, name: str) -> Any:
    """The method `name` as defined on `owner` itself (not inherited), or MissingMethod."""
    found = owner.__dict__.get(name)
    if not callable(found):
        raise MissingMethod(owner, name)
    return found


@dataclass(frozen=True)
class CallCost:
    """Where one server-side call spent its time (seconds)."""

    total: float
    library: float  # inside HydmiLibrary.call (the vendor library, here the simulator)
    library_calls: int
    lock_wait: float  # waiting for the node lock (other Allocates ahead in the queue)
    kubelet: float  # PodResources List round trips to the kubelet
    # Recomputing the advertised counts after the change (Runtime.refresh), including waiting
    # for another thread's refresh, minus the library and kubelet time inside it.
    refresh: float = 0.0

    @property
    def ours(self) -> float:
        """Everything else: identification, placement, grants, the answer, and waiting for
        the interpreter (threads share one GIL)."""
        return max(0.0, self.total - self.library - self.lock_wait - self.kubelet - self.refresh)


class _Ledger(threading.local):
    library = 0.0
    library_calls = 0
    lock_wait = 0.0
    kubelet = 0.0
    refresh = 0.0


class Ledger:
    def __init__(self) -> None:
        self._local = _Ledger()
        self._lock = threading.Lock()
        self.allocates: list[tuple[tuple[Any, ...], CallCost]] = []  # (call args, cost)
        self.passes: list[tuple[tuple[Any, ...], CallCost]] = []
        self.changes: list[tuple[str, float]] = []  # ("create"|"destroy", when it returned)

    def _reset(self) -> None:
        self._local.library = self._local.lock_wait = self._local.kubelet = 0.0
        self._local.refresh = 0.0
        self._local.library_calls = 0

    def _cost(self, total: float) -> CallCost:
        return CallCost(
            total,
            self._local.library,
            self._local.library_calls,
            self._local.lock_wait,
            self._local.kubelet,
            self._local.refresh,
        )

    def clear(self) -> None:
        with self._lock:
            self.allocates.clear()
            self.passes.clear()
            self.changes.clear()

    @contextmanager
    def installed(self) -> Iterator[Ledger]:
        """Wrap the methods for the duration of the block, then put the originals back."""
        ledger = self
        originals: list[tuple[type, str, Any]] = []

        def patch(owner: type, name: str, make: Callable[[Any], Any]) -> None:
            original = own_method(owner, name)
            originals.append((owner, name, original))
            setattr(owner, name, functools.wraps(original)(make(original)))

        def timed_library(original: Callable[..., None]) -> Callable[..., None]:
            def call(self: HydmiLibrary, name: str, *args: Any) -> None:
                started = time.perf_counter()
                try:
                    original(self, name, *args)
                finally:
                    ledger._local.library += time.perf_counter() - started
                    ledger._local.library_calls += 1

            return call

        def timed_list(original: Callable[..., Any]) -> Callable[..., Any]:
            def listing(self: PodResourcesClient) -> Any:
                started = time.perf_counter()
                try:
                    return original(self)
                finally:
                    ledger._local.kubelet += time.perf_counter() - started

            return listing

        def timed_node_lock(original: Callable[..., Any]) -> Callable[..., Any]:
            @contextmanager
            def node(self: Locks) -> Iterator[None]:
                started = time.perf_counter()
                with original(self):
                    ledger._local.lock_wait += time.perf_counter() - started
                    yield

            return node

        def changed(what: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
            def wrap(original: Callable[..., Any]) -> Callable[..., Any]:
                def run(self: object, *args: Any, **kwargs: Any) -> Any:
                    result = original(self, *args, **kwargs)
                    with ledger._lock:
                        ledger.changes.append((what, time.perf_counter()))
                    return result

                return run

            return wrap

        def timed_refresh(original: Callable[..., None]) -> Callable[..., None]:
            def refresh(self: Runtime) -> None:
                local = ledger._local
                inner = local.library + local.kubelet
                started = time.perf_counter()
                try:
                    original(self)
                finally:
                    spent = time.perf_counter() - started
                    local.refresh += spent - (local.library + local.kubelet - inner)

            return refresh

        def measured(
            into: list[tuple[tuple[Any, ...], CallCost]],
        ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
            def wrap(original: Callable[..., Any]) -> Callable[..., Any]:
                def run(self: object, *args: Any) -> Any:
                    ledger._reset()
                    started = time.perf_counter()
                    try:
                        return original(self, *args)
                    finally:
                        cost = ledger._cost(time.perf_counter() - started)
                        with ledger._lock:
                            into.append((args, cost))

                return run

            return wrap

        try:
            # Inside the try: if one is missing, the ones already wrapped are put back.
            patch(HydmiLibrary, "call", timed_library)
            patch(PodResourcesClient, "list", timed_list)
            patch(Locks, "node", timed_node_lock)
            patch(Runtime, "refresh", timed_refresh)
            patch(Node, "create", changed("create"))
            patch(Node, "destroy", changed("destroy"))
            patch(Allocator, "allocate", measured(self.allocates))
            patch(Reclaimer, "run_pass", measured(self.passes))
            yield self
        finally:
            for owner, name, original in reversed(originals):
                setattr(owner, name, original)
