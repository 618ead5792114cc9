"""The partition profiles any node offers, read from the device plugins' geometry Leases
(docs/dev/extender.md), so the webhook refuses at creation a size no node could ever cover.

A background thread lists the Leases every ``refresh_seconds``; ``profiles()`` answers the
last good list while it is younger than ``fresh_seconds``, else None. The check needs evidence
to refuse: None (never listed, or listing failing) and an empty list (no node publishes yet)
both skip it, and the scheduler extender still keeps such a pod Pending with its reason.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable

from hygon_dcu_plugin.geometry import GeometryError, GeoProfile, decode

log = logging.getLogger(__name__)

# A Lease's annotation texts; raises on any failure to list.
Lister = Callable[[], Iterable[str]]

# (apiGroup, resource, verb) of the one call lease_lister makes, in the plugins' namespace
# only: the role's admission Role grants exactly this (a unit test compares them).
WEBHOOK_LEASE_ACCESS: tuple[tuple[str, str, str], ...] = (
    ("coordination.k8s.io", "leases", "list"),
)


class OfferedProfiles:
    def __init__(
        self,
        lister: Lister,
        *,
        refresh_seconds: float = 30.0,
        fresh_seconds: float = 120.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._lister = lister
        self._refresh = refresh_seconds
        self._fresh = fresh_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._profiles: tuple[GeoProfile, ...] = ()
        self._listed_at: float | None = None
        self._failing = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def profiles(self) -> tuple[GeoProfile, ...] | None:
        with self._lock:
            if self._listed_at is None or self._clock() - self._listed_at > self._fresh:
                return None
            return self._profiles

    def refresh(self) -> None:
        """List once; a failure keeps the last list (until it is no longer fresh)."""
        try:
            texts = list(self._lister())
        except Exception as exc:  # the API may be down: say so once per failure streak
            if not self._failing:
                log.warning("geometry_list_failed", extra={"error": str(exc)[:300]})
            self._failing = True
            return
        found: dict[tuple[str, int, int], GeoProfile] = {}
        for text in texts:
            try:
                geometry = decode(text)
            except GeometryError as exc:
                log.warning("geometry_unreadable", extra={"error": str(exc)[:300]})
                continue
            for profile in geometry.profiles():
                found.setdefault((profile.name, profile.memory_mib, profile.cu_count), profile)
        with self._lock:
            self._profiles = tuple(found.values())
            self._listed_at = self._clock()
        if self._failing:
            log.info("geometry_list_recovered", extra={"profiles": len(found)})
        self._failing = False

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="offered-profiles", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.refresh()
            self._stop.wait(self._refresh)


def lease_lister(namespace: str, label_selector: str, timeout: float = 10.0) -> Lister:
    """The real lister: the Leases' geometry annotations through the in-cluster client.
    Imported here only: without --geometry-namespace the webhook loads no Kubernetes client.
    Raises kubernetes.config.ConfigException outside a pod with a service account token."""
    from kubernetes import client, config  # noqa: PLC0415

    from hygon_dcu_plugin.vocabulary import GEOMETRY_ANNOTATION  # noqa: PLC0415

    config.load_incluster_config()
    api = client.CoordinationV1Api()

    def listed() -> list[str]:
        leases = api.list_namespaced_lease(
            namespace, label_selector=label_selector, _request_timeout=timeout
        )
        texts = []
        for item in leases.items:
            annotations = (item.metadata.annotations if item.metadata else None) or {}
            text = annotations.get(GEOMETRY_ANNOTATION)
            if isinstance(text, str):
                texts.append(text)
        return texts

    return listed
