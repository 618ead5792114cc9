"""The rules for a pod's Hygon DCU partition requests, as one pure function of a pod.

A pod that reaches a node with a request the allocator cannot serve fails with
UnexpectedAdmissionError and is never retried, so every request the allocator would refuse is
refused here first, with a message that names the container and says how to fix the spec.

What one container asks for, and every rule about its own resources (limits are the request,
quantities exactly 1, one profile, no whole card next to a partition), is decided by
``hygon_dcu_plugin.request.parse_container``, the same reading the allocator makes. Here are
the rules about where a container sits in its pod, where Kubernetes leaves room:
- Partitions only in app containers (``spec.containers``). The kubelet hands an init
  container's devices on to the app containers, and PodResources ``List`` (how the allocator
  finds the container it serves) walks ``spec.containers`` only: a partition in a regular init
  container or a native sidecar (init container with ``restartPolicy: Always``) could not be
  attributed to one container.
- Ephemeral containers may not have resources at all (the API server refuses them); a
  ``hygon.com/`` resource on one is refused here too in case it ever gets that far.
- Logical slices (``hygon.com/dcu.sliced``) likewise only in app containers, one per
  container (``parse_container``); whole cards and slices may sit in different containers of
  one pod (a node with the mode off serves both).
- A whole card or a slice anywhere in a pod where a container holds a partition is refused:
  the pod could never be scheduled.
- A request by size that no profile any node publishes can cover (``offered``, from the
  geometry Leases: ``webhook/offered.py``) is refused: it could never be placed. Without that
  evidence (``offered`` None or empty) the size is not checked against the nodes. Likewise a
  slice no card any node offers for slices could hold even empty (``slice_cards``).

Whatever the pod, the work is linear in its size and every message is bounded: names and
values are shortened, lists of names are cut with a count of the rest, and
``read_pod`` keeps only the first violations (counting the others). The admission
webhook denies with these rules and the scheduler extender refuses every node with them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from hygon_dcu_plugin.request import (
    PartitionRequest,
    ProfileRequest,
    Reason,
    RefusedRequest,
    SizedProfile,
    SizeRequest,
    SliceRequest,
    Violation,
    is_partition,
    is_slice,
    mixed_with_partitions,
    parse_container,
)
from hygon_dcu_plugin.shown import MAX_SHOWN_NAMES, listing, shorten, show_names
from hygon_dcu_plugin.slice_placement import SliceCard, slice_size
from hygon_dcu_plugin.vocabulary import VENDOR_PREFIX, WHOLE_CARD

__all__ = ["Findings", "PodReading", "Violation", "check_pod", "read_pod"]


# The message holds whole violation messages up to this size, then a count of the rest.
MAX_MESSAGE_CHARS = 4096
# Violations kept to build the message from; more could never fit in it.
KEPT_VIOLATIONS = 32


@dataclass(frozen=True)
class Findings:
    """The first violations of a pod, and how many and which reasons there were in all."""

    kept: list[Violation]
    total: int
    rules: frozenset[Reason]

    def message(self) -> str:
        """The kept violations' messages joined, cut to MAX_MESSAGE_CHARS with a count of the
        rest: the webhook's denial and the extender's refusal alike."""
        parts: list[str] = []
        size = 0
        for violation in self.kept:
            # Room is left for the note about what is cut.
            if size + len(violation.message) + 2 > MAX_MESSAGE_CHARS - 80:
                break
            parts.append(violation.message)
            size += len(violation.message) + 2
        left_out = self.total - len(parts)
        if left_out:
            parts.append(
                f"and {left_out} more violation{'s' if left_out > 1 else ''} not shown; "
                "fix these and create the pod again to see them"
            )
        return "; ".join(parts)


class _Kind(Enum):
    APP = "container"
    INIT = "init container"
    SIDECAR = "sidecar init container"
    EPHEMERAL = "ephemeral container"


@dataclass(frozen=True, slots=True)
class _Container:
    kind: _Kind
    name: str
    requests: Mapping[str, Any]
    limits: Mapping[str, Any]

    @property
    def label(self) -> str:
        return f'{self.kind.value} "{shorten(self.name)}"'

    def vendor_resources(self) -> list[str]:
        names = {*self.requests, *self.limits}
        return sorted(
            name for name in names if isinstance(name, str) and name.startswith(VENDOR_PREFIX)
        )

    def holds_partition(self) -> bool:
        return self.kind is not _Kind.EPHEMERAL and any(map(is_partition, self.vendor_resources()))


class _MalformedPod(ValueError):
    pass


Offered = Sequence[SizedProfile] | None
# The cards the nodes offer for logical slices, each as an empty one (its whole size).
OfferedSlices = Sequence[SliceCard] | None


def check_pod(
    pod: Mapping[str, Any], offered: Offered = None, *, slice_cards: OfferedSlices = None
) -> list[Violation]:
    """Every rule the pod breaks, in spec order; an empty list admits the pod."""
    return list(_violations(pod, offered, ([], []), slice_cards))


@dataclass(frozen=True)
class PodReading:
    """A pod read once: what it breaks (``findings``) and, when it breaks nothing, what each
    app container asking for a partition asks (``partitions``, in spec order), and each one
    asking for a logical slice (``slices``)."""

    findings: Findings
    partitions: list[tuple[str, PartitionRequest]]
    slices: list[tuple[str, SliceRequest]]


def read_pod(
    pod: Mapping[str, Any],
    offered: Offered = None,
    keep: int = KEPT_VIOLATIONS,
    *,
    slice_cards: OfferedSlices = None,
) -> PodReading:
    """The one reading of a pod the webhook and the extender each make: the first ``keep``
    violations of ``check_pod`` (without holding the others) and the partition requests."""
    kept: list[Violation] = []
    total = 0
    rules: set[Reason] = set()
    partitions: list[tuple[str, PartitionRequest]] = []
    slices: list[tuple[str, SliceRequest]] = []
    for violation in _violations(pod, offered, (partitions, slices), slice_cards):
        total += 1
        rules.add(violation.reason)
        if len(kept) < keep:
            kept.append(violation)
    return PodReading(Findings(kept, total, frozenset(rules)), partitions, slices)


# Where a pod's reading collects the requests that break no rule: partitions, slices.
_Asked = tuple[list[tuple[str, PartitionRequest]], list[tuple[str, SliceRequest]]]


def _violations(
    pod: Mapping[str, Any],
    offered: Offered,
    asked: _Asked,
    slice_cards: OfferedSlices = None,
) -> Iterator[Violation]:
    """Every violation, in spec order; each app container's partition or slice request that
    breaks no rule of its own is appended to ``asked`` on the way."""
    # Walk the containers three times instead of holding them: once to check the shape and
    # find the partitioned ones, once for each container's own rules, once for mixing.
    partitioned: list[str] = []
    partitioned_count = 0
    try:
        for container in _containers(pod):
            if container.holds_partition():
                partitioned_count += 1
                if len(partitioned) < MAX_SHOWN_NAMES:
                    partitioned.append(container.label)
    except _MalformedPod as error:
        yield Violation(Reason.MALFORMED_POD, "", f"{error}: the pod cannot be checked")
        return
    for container in _containers(pod):
        yield from _check_container(container, offered, asked, slice_cards)
    if partitioned_count:
        holders = listing(partitioned, partitioned_count)
        for container in _containers(pod):
            yield from _check_mixing(container, holders)


def _check_container(
    container: _Container,
    offered: Offered,
    asked: _Asked,
    slice_cards: OfferedSlices = None,
) -> Iterator[Violation]:
    """The container's violations; its partition or slice request, when it breaks nothing,
    goes to ``asked``."""
    vendor = container.vendor_resources()
    if container.kind is _Kind.EPHEMERAL:
        if vendor:
            yield Violation(
                Reason.EPHEMERAL_CONTAINER_RESOURCE,
                container.name,
                f"{container.label} requests {show_names(vendor)}: ephemeral containers cannot "
                "have resources; remove them from the ephemeral container",
            )
        return
    partitions = [name for name in vendor if is_partition(name)]
    slices = [name for name in vendor if is_slice(name)]
    if not partitions and not slices:
        return
    if container.kind in (_Kind.SIDECAR, _Kind.INIT) and slices:
        yield Violation(
            Reason.SLICE_IN_INIT_CONTAINER,
            container.name,
            f"{container.label} requests {show_names(slices)}: an init container's devices "
            "are handed on to the app containers, so its slice cannot be attributed (and the "
            "vendor gives slices to app containers only); request the slice in an app "
            "container under spec.containers instead",
        )
        if not partitions:
            return
    if container.kind is _Kind.SIDECAR:
        yield Violation(
            Reason.PARTITION_IN_SIDECAR,
            container.name,
            f"{container.label} (restartPolicy: Always) requests {show_names(partitions)}: "
            "a sidecar is an init container, whose devices are handed on to the app "
            "containers, so its partition cannot be attributed; request the partition in an "
            "app container under spec.containers instead",
        )
        return
    if container.kind is _Kind.INIT:
        yield Violation(
            Reason.PARTITION_IN_INIT_CONTAINER,
            container.name,
            f"{container.label} requests {show_names(partitions)}: an init container's devices "
            "are handed on to the app containers, so its partition cannot be attributed; "
            "request the partition in an app container under spec.containers instead",
        )
        return
    request = parse_container(container.name, container.limits, container.requests)
    if isinstance(request, RefusedRequest):
        yield from request.violations
    elif isinstance(request, SizeRequest) and offered and not request.smallest(offered):
        largest = max(offered, key=lambda p: (p.memory_mib, p.cu_count))
        yield Violation(
            Reason.SIZE_NOT_OFFERED,
            container.name,
            f"{container.label} requests a partition of at least {request.describe()}, which "
            f"no node offers (the largest profile: {largest.name} with {largest.memory_mib} "
            f"MiB and {largest.cu_count} compute units); request a smaller size",
        )
    elif (
        isinstance(request, SliceRequest) and slice_cards and not _slice_fits(request, slice_cards)
    ):
        card = max(slice_cards, key=lambda c: (c.memory_mib, c.compute_units))
        yield Violation(
            Reason.SIZE_NOT_OFFERED,
            container.name,
            f"{container.label} requests a slice of {request.describe()}, which no card of "
            f"any node can hold (the largest: {card.memory_mib} MiB and "
            f"{card.compute_units} compute units); request a smaller slice",
        )
    elif isinstance(request, ProfileRequest | SizeRequest):
        asked[0].append((container.name, request))
    elif isinstance(request, SliceRequest):
        asked[1].append((container.name, request))


def _slice_fits(request: SliceRequest, cards: Sequence[SliceCard]) -> bool:
    """Some card could hold the slice, were it empty."""
    return any(card.fits(*slice_size(request, card)) for card in cards)


def _check_mixing(container: _Container, holders: str) -> Iterator[Violation]:
    """``holders`` names the containers that hold a partition (at least one does)."""
    if container.kind is _Kind.APP and container.holds_partition():
        return  # its own request, read by parse_container, says so already
    others = [name for name in container.vendor_resources() if name == WHOLE_CARD or is_slice(name)]
    if not others:
        return
    if container.holds_partition():
        where = "next to its own partition request"
    else:
        where = f"while {holders} requests a partition"
    yield mixed_with_partitions(container.name, container.label, others, where)


def _containers(pod: Mapping[str, Any]) -> Iterator[_Container]:
    spec = _mapping(pod, "spec", "pod")
    for field, kind in (
        ("initContainers", _Kind.INIT),
        ("containers", _Kind.APP),
        ("ephemeralContainers", _Kind.EPHEMERAL),
    ):
        entries = spec.get(field)
        if entries is None:
            continue
        if not isinstance(entries, list):
            raise _MalformedPod(f"spec.{field} is not a list")
        for index, entry in enumerate(entries):
            where = f"spec.{field}[{index}]"
            if not isinstance(entry, Mapping):
                raise _MalformedPod(f"{where} is not an object")
            name = entry.get("name")
            if not isinstance(name, str) or not name:
                name = where
            if kind is _Kind.INIT and entry.get("restartPolicy") == "Always":
                kind_here = _Kind.SIDECAR
            else:
                kind_here = kind
            resources = _mapping(entry, "resources", where)
            yield _Container(
                kind=kind_here,
                name=name,
                requests=_mapping(resources, "requests", f"{where}.resources"),
                limits=_mapping(resources, "limits", f"{where}.resources"),
            )


def _mapping(parent: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    value = parent.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise _MalformedPod(f"{where}.{key} is not an object")
    return value
