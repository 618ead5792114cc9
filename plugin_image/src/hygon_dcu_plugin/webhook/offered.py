"""The partition profiles any node offers, and the cards offered for logical slices, read
from the device plugins' geometry Leases (docs/dev/extender.md), so the webhook refuses at
creation a size no node could ever cover. ``slice_cards()`` answers like ``profiles()``: the
sizes of the cards offered for slices (each as an empty card), once per size, only those no
other card covers in both memory and compute units.

A background thread lists the Leases every ``refresh_seconds``; ``profiles()`` answers the
last good list while it is younger than ``fresh_seconds``, else None. The check needs evidence
to refuse: None (never listed, or listing failing) and an empty list (no node publishes yet)
both skip it, and the scheduler extender still keeps such a pod Pending with its reason.

Memory stays bounded whatever the number of Leases: the list is read a page at a time, each
page's texts are decoded and dropped, and only the profiles are kept, once each (and, past
MAX_KEPT of them, only those no other profile covers, which give the same verdicts). A list
whose continue token expired (HTTP 410) is started again once; any other failure keeps the
last good answer.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from hygon_dcu_plugin.geometry import GeometryError, GeoProfile, decode, text_of_lease
from hygon_dcu_plugin.slice_placement import SliceCard

log = logging.getLogger(__name__)

# A Lease's annotation texts, read as they are consumed; raises on any failure to list
# (ListExpired when the list must start again).
Lister = Callable[[], Iterable[str]]

# (apiGroup, resource, verb) of the one call lease_lister makes, in the plugins' namespace
# only: the role's admission Role grants exactly this (a unit test compares them).
WEBHOOK_LEASE_ACCESS: tuple[tuple[str, str, str], ...] = (
    ("coordination.k8s.io", "leases", "list"),
)

# Leases per list call. A geometry annotation is refused over geometry.MAX_TEXT (~30 KB), so
# a page of legal ones is at most ~3 MB.
PAGE_SIZE = 100
# A page over this fails the list: only Leases carrying far more than a geometry (the API
# server allows 256 KiB of annotations each) come near it. Parsing one takes ~4 times its size.
MAX_PAGE_BYTES = 4 * 1024 * 1024
# Distinct profiles held before pruning to those no other covers.
MAX_KEPT = 1024

ProfileKey = tuple[str, int, int]


class ListExpired(Exception):
    """The API server expired the list's continue token (HTTP 410): list again from the
    start."""


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
        self._slice_cards: tuple[SliceCard, ...] = ()
        self._listed_at: float | None = None
        self._failing = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _fresh_now(self) -> bool:
        return self._listed_at is not None and self._clock() - self._listed_at <= self._fresh

    def profiles(self) -> tuple[GeoProfile, ...] | None:
        with self._lock:
            return self._profiles if self._fresh_now() else None

    def slice_cards(self) -> tuple[SliceCard, ...] | None:
        with self._lock:
            return self._slice_cards if self._fresh_now() else None

    def refresh(self) -> None:
        """List once; a failure keeps the last list (until it is no longer fresh)."""
        try:
            try:
                found = _offered(self._lister())
            except ListExpired as expired:
                log.info("geometry_list_restarted", extra={"error": str(expired)[:300]})
                found = _offered(self._lister())  # expired again: a failure like any other
        except Exception as exc:  # the API may be down: say so once per failure streak
            if not self._failing:
                log.warning("geometry_list_failed", extra={"error": str(exc)[:300]})
            self._failing = True
            return
        with self._lock:
            self._profiles = tuple(found.profiles.values())
            self._slice_cards = tuple(
                SliceCard(-1, cus, mib) for mib, cus in _frontier(found.slice_sizes)
            )
            self._listed_at = self._clock()
        if self._failing:
            log.info("geometry_list_recovered", extra={"profiles": len(found.profiles)})
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


@dataclass
class _Found:
    profiles: dict[ProfileKey, GeoProfile] = field(default_factory=dict)
    slice_sizes: set[tuple[int, int]] = field(default_factory=set)  # (MiB, compute units)


def _offered(texts: Iterable[str]) -> _Found:
    """Every profile the texts offer, once per (name, memory, compute units), and the sizes of
    the cards offered for slices; one text at a time is decoded, none is kept."""
    found = _Found()
    for text in texts:
        try:
            geometry = decode(text)
        except GeometryError as exc:
            log.warning("geometry_unreadable", extra={"error": str(exc)[:300]})
            continue
        for profile in geometry.profiles():
            found.profiles.setdefault((profile.name, profile.memory_mib, profile.cu_count), profile)
        found.slice_sizes.update((c.memory_mib, c.compute_units) for c in geometry.sliced)
        if len(found.slice_sizes) > MAX_KEPT:
            found.slice_sizes = set(_frontier(found.slice_sizes))
        if len(found.profiles) > MAX_KEPT:
            found.profiles = _uncovered(found.profiles)
            if len(found.profiles) > MAX_KEPT:
                raise ValueError(
                    f"the geometry Leases offer over {MAX_KEPT} profiles that do not cover "
                    "each other, more than this check keeps; are Leases forged?"
                )
    if len(found.slice_sizes) > MAX_KEPT:
        raise ValueError(
            f"the geometry Leases offer over {MAX_KEPT} slice card sizes that do not cover "
            "each other, more than this check keeps; are Leases forged?"
        )
    return found


def _frontier(sizes: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """The (MiB, compute units) no other size covers in both: a slice one of the others could
    hold, these can too."""
    kept: list[tuple[int, int]] = []
    most_cu = -1
    for mib, cus in sorted(set(sizes), key=lambda size: (-size[0], -size[1])):
        if cus > most_cu:
            kept.append((mib, cus))
            most_cu = cus
    return kept


def _uncovered(found: dict[ProfileKey, GeoProfile]) -> dict[ProfileKey, GeoProfile]:
    """The profiles no other one covers (at least its memory and its compute units): a size
    one of the others covers, these cover too, and the largest is among them."""
    kept: dict[ProfileKey, GeoProfile] = {}
    most_cu = -1
    for key, profile in sorted(found.items(), key=lambda item: (-item[0][1], -item[0][2])):
        if profile.cu_count > most_cu:
            kept[key] = profile
            most_cu = profile.cu_count
    return kept


def lease_lister(namespace: str, label_selector: str, timeout: float = 10.0) -> Lister:
    """The real lister: the Leases' geometry annotations through the in-cluster client, a
    page at a time. Imported here only: without --geometry-namespace the webhook loads no
    Kubernetes client. Raises kubernetes.config.ConfigException outside a pod with a service
    account token."""
    from kubernetes import client, config  # noqa: PLC0415
    from kubernetes.client.exceptions import ApiException  # noqa: PLC0415

    config.load_incluster_config()
    api = client.CoordinationV1Api()

    def page(token: str | None) -> tuple[list[str], str | None]:
        try:
            response = api.list_namespaced_lease(
                namespace,
                label_selector=label_selector,
                limit=PAGE_SIZE,
                _continue=token,
                _preload_content=False,  # the JSON, not the client's models of every Lease
                _request_timeout=timeout,
            )
        except ApiException as error:
            if error.status == 410 and token:
                raise ListExpired(f"HTTP 410: {str(error.reason)[:200]}") from error
            raise
        return _texts(json.loads(_body(response)))

    def listed() -> Iterator[str]:
        texts, token = page(None)
        yield from texts
        while token:
            texts, token = page(token)
            yield from texts

    return listed


def _body(response: Any) -> bytes:
    """A raw reply's body, at most MAX_PAGE_BYTES (ValueError over it)."""
    try:
        body: bytes = response.read(MAX_PAGE_BYTES + 1)
        if len(body) > MAX_PAGE_BYTES:
            response.close()  # the rest is not read: the connection cannot be used again
            raise ValueError(
                f"a page of {PAGE_SIZE} geometry Leases is over {MAX_PAGE_BYTES} bytes; "
                "are Leases carrying more than a geometry?"
            )
        return body
    finally:
        response.release_conn()


def _texts(page: object) -> tuple[list[str], str | None]:
    """The geometry annotations of a LeaseList page, and its continue token."""
    if not isinstance(page, dict) or not isinstance(page.get("items"), list):
        raise ValueError("the Lease list reply is not a list")
    texts = []
    for item in page["items"]:
        text = text_of_lease(item)
        if text is not None:
            texts.append(text)
    metadata = page.get("metadata")
    token = metadata.get("continue") if isinstance(metadata, dict) else None
    return texts, token if isinstance(token, str) and token else None
