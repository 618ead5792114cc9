"""The one reading of a container's partition request: its resources in, a typed verdict out.

The admission webhook (``pod_rules``), the allocator and the scheduler extender must reach
the same verdict on every container, so none of them reads a partition limit itself.

Public API::

    parse_container(name, limits, requests=None) -> ContainerRequest

``limits`` (and ``requests``) map resource names to quantities as the pod carries them (JSON
strings, or whatever else a client sent). ``ContainerRequest`` is one of:

- ``ProfileRequest(profile)``: exactly one partition of that profile, e.g. "2g.15gb"
  (``.resource`` is its resource name);
- ``SizeRequest(memory_mib, min_cu)``: exactly one partition of at least that much DCU memory
  (and, when given, compute units); each node carves its smallest profile that covers both
  (``SizeRequest.smallest``);
- ``SliceRequest(memory_mib, compute_units)``: exactly one logical slice of a card (the
  vendor's virtual device) with that memory cap and, when given, that many compute units;
- ``WholeCardRequest(count)``: whole cards (``hygon.com/dcu``) and no partition; ``count`` is
  None when the quantity is not a whole number (the API server refuses such pods);
- ``NoPartitionRequest()``: nothing this plugin serves;
- ``RefusedRequest(violations)``: the container cannot be served. ``.reason`` is the verdict
  (the first violation's), ``.violations`` everything wrong in a stable order, each with a
  message that names the container and says how to fix the spec; ``.message()`` is a bounded
  summary.

``Reason`` is the single definition of every refusal reason: those of one container (decided
here) and those of where a container sits in its pod (decided by ``pod_rules``). Its values
are the ``rule`` label of ``hygon_dcu_admission_denials_total`` and the webhook's log;
``Reason.refusal`` is the ``refusal.AllocateRefusal`` that Allocate refuses it with.
``Violation`` is one broken rule; ``is_partition(name)`` tells a partition resource.

Decisions where Kubernetes leaves room:
- Limits are the request. For extended resources the API server defaults requests to limits
  and refuses requests without limits; the allocator reads the profile from limits. So a
  partition resource in requests only is refused, and requests that differ from limits are.
- Quantities are Kubernetes quantities, read exactly (``quantity.parse_quantity``): "1", "01",
  "1.0" and "1000m" are all one; "500m" is not a whole number and is refused with its own
  reason. (The API server stores and sends the canonical form, "1", so the other spellings
  reach us only from a client that bypasses it.)
- A partition next to a whole card or a slice in one container is refused: a partitioned node
  serves only partitions. A slice next to a whole card is refused too: a container gets whole
  cards or one slice.
- A slice names its memory: there is no default size, since a slice's memory is a cap the
  workload lives under. Its compute units are optional (the node gives a slice without them
  its card's compute units in proportion to its memory).

Fail closed: every input, however malformed (a JSON list, 5,000 digits, "1e9999"), gives a
verdict, never an exception; the work is linear in the number of resources and every message
is bounded (``shown``).
"""

from __future__ import annotations

from collections.abc import Generator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol, TypeAlias, TypeVar

from hygon_dcu_plugin.quantity import QuantityError, parse_quantity, whole_number
from hygon_dcu_plugin.refusal import AllocateRefusal
from hygon_dcu_plugin.shown import shorten, show_names, show_value
from hygon_dcu_plugin.vocabulary import (
    COMPUTE_UNITS,
    FAMILY,
    MEMORY_MIB,
    PROFILE_PREFIX,
    SIZE_RESOURCES,
    SLICE_COMPUTE_UNITS,
    SLICE_MEMORY_MIB,
    SLICE_SIZE_RESOURCES,
    SLICED,
    WHOLE_CARD,
    profile_resource,
)

__all__ = [
    "MAX_COMPUTE_UNITS",
    "MAX_MEMORY_MIB",
    "PARTITION_PREFIX",
    "ContainerRequest",
    "NoPartitionRequest",
    "PartitionRequest",
    "ProfileRequest",
    "Reason",
    "RefusedRequest",
    "SizeRequest",
    "SizedProfile",
    "SliceRequest",
    "Violation",
    "WholeCardRequest",
    "is_partition",
    "is_slice",
    "mixed_with_partitions",
    "parse_container",
]

PARTITION_PREFIX = FAMILY + "."
SLICE_PREFIX = SLICED + "."

_EXAMPLE = f"{FAMILY}: 1 and {PROFILE_PREFIX}2g.15gb: 1"
_SIZE_EXAMPLE = f"{FAMILY}: 1 and {MEMORY_MIB}: 16384"
# Bounds of a size request: far above any card, so only nonsense is refused.
MAX_MEMORY_MIB = 1 << 24  # 16 TiB
MAX_COMPUTE_UNITS = 4096
_ONE_PER_CONTAINER = "one partition per container; use one pod per partition"
_SLICE_EXAMPLE = f"{SLICED}: 1 and {SLICE_MEMORY_MIB}: 16384"


class Reason(StrEnum):
    """Why a container (or its pod) is refused."""

    # One container's own resources: parse_container.
    FAMILY_WITHOUT_PROFILE = "family-without-profile"
    PROFILE_WITHOUT_FAMILY = "profile-without-family"
    QUANTITY_NOT_ONE = "quantity-not-one"
    QUANTITY_NOT_WHOLE = "quantity-not-whole"
    TWO_PROFILES = "two-profiles"
    REQUESTS_LIMITS_DISAGREE = "requests-limits-disagree"
    REQUESTS_WITHOUT_LIMITS = "requests-without-limits"
    UNKNOWN_PARTITION_RESOURCE = "unknown-partition-resource"
    SIZE_WITH_PROFILE = "size-with-profile"
    COMPUTE_UNITS_WITHOUT_MEMORY = "compute-units-without-memory"
    SIZE_OUT_OF_RANGE = "size-out-of-range"
    UNKNOWN_SLICE_RESOURCE = "unknown-slice-resource"
    SLICE_WITHOUT_MEMORY = "slice-without-memory"
    SLICE_SIZE_WITHOUT_SLICE = "slice-size-without-slice"
    SLICE_WITH_WHOLE_CARD = "slice-with-whole-card"
    # Where the container sits in its pod: pod_rules.
    PARTITION_IN_SIDECAR = "partition-in-sidecar"
    PARTITION_IN_INIT_CONTAINER = "partition-in-init-container"
    SLICE_IN_INIT_CONTAINER = "slice-in-init-container"
    EPHEMERAL_CONTAINER_RESOURCE = "ephemeral-container-resource"
    # Whole cards next to a partition: in the container itself (parse_container) or in
    # another container of the pod (pod_rules).
    MIXED_WITH_PARTITIONS = "mixed-with-partitions"
    # A size no profile of any node covers: pod_rules, from the published geometry.
    SIZE_NOT_OFFERED = "size-not-offered"
    MALFORMED_POD = "malformed-pod"
    # A pod UPDATE by the device plugin's or the extender's account that changes more than
    # their own keys: webhook/pod_writes.
    WRITE_BEYOND_OWN_KEYS = "write-beyond-own-keys"

    @property
    def refusal(self) -> AllocateRefusal:
        """What Allocate refuses a container with for this reason. Its failure labels are
        older and coarser: two reasons keep their own, every other one is bad_request."""
        return _REFUSALS.get(self, AllocateRefusal.BAD_REQUEST)


_REFUSALS = {
    Reason.FAMILY_WITHOUT_PROFILE: AllocateRefusal.NO_PROFILE,
    Reason.TWO_PROFILES: AllocateRefusal.TWO_PROFILES,
}


@dataclass(frozen=True)
class Violation:
    """One broken rule: which container, and a message that says how to fix the spec."""

    reason: Reason
    container: str
    message: str

    @property
    def rule(self) -> Reason:
        """The reason, by the name the webhook's log and denial metric give it."""
        return self.reason


@dataclass(frozen=True, slots=True)
class ProfileRequest:
    """Exactly one partition of ``profile`` (e.g. "2g.15gb")."""

    profile: str

    @property
    def resource(self) -> str:
        return profile_resource(self.profile)


class SizedProfile(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def slices(self) -> int: ...

    @property
    def memory_mib(self) -> int: ...

    @property
    def cu_count(self) -> int: ...


SizedT = TypeVar("SizedT", bound=SizedProfile)


@dataclass(frozen=True, slots=True)
class SizeRequest:
    """Exactly one partition of at least ``memory_mib`` MiB of DCU memory and, when
    ``min_cu`` is set, at least that many compute units."""

    memory_mib: int
    min_cu: int | None = None

    def covers(self, profile: SizedProfile) -> bool:
        return profile.memory_mib >= self.memory_mib and (
            self.min_cu is None or profile.cu_count >= self.min_cu
        )

    def smallest(self, profiles: Iterable[SizedT]) -> list[SizedT]:
        """The profiles that cover the request, smallest first (fewest slices, then least
        memory, then fewest compute units, then name): the order a node tries them in."""
        return sorted(
            (p for p in profiles if self.covers(p)),
            key=lambda p: (p.slices, p.memory_mib, p.cu_count, p.name),
        )

    def describe(self) -> str:
        cu = f" and {self.min_cu} compute units" if self.min_cu is not None else ""
        return f"{self.memory_mib} MiB{cu}"


@dataclass(frozen=True, slots=True)
class SliceRequest:
    """Exactly one logical slice: a ``memory_mib`` MiB cap and, when set, ``compute_units``."""

    memory_mib: int
    compute_units: int | None = None

    def describe(self) -> str:
        cu = f" and {self.compute_units} compute units" if self.compute_units is not None else ""
        return f"{self.memory_mib} MiB{cu}"


@dataclass(frozen=True, slots=True)
class WholeCardRequest:
    """Whole cards and no partition; ``count`` is None when not a whole number."""

    count: int | None


@dataclass(frozen=True, slots=True)
class NoPartitionRequest:
    """Nothing this plugin serves."""


@dataclass(frozen=True, slots=True)
class RefusedRequest:
    """The container cannot be served: at least one violation, the first is the verdict."""

    violations: tuple[Violation, ...]

    @property
    def reason(self) -> Reason:
        return self.violations[0].reason

    def message(self) -> str:
        """The verdict's message, and how many other problems the container has."""
        text = self.violations[0].message
        others = len(self.violations) - 1
        if others:
            text += f" (and {others} more problem{'s' if others > 1 else ''} in its resources)"
        return text


PartitionRequest: TypeAlias = ProfileRequest | SizeRequest
ContainerRequest: TypeAlias = (
    ProfileRequest
    | SizeRequest
    | SliceRequest
    | WholeCardRequest
    | NoPartitionRequest
    | RefusedRequest
)


def is_partition(name: str) -> bool:
    """The family or any name under it (a profile, or an unknown name refused as such)."""
    return name == FAMILY or name.startswith(PARTITION_PREFIX)


def is_slice(name: str) -> bool:
    """The slice family or any name under it (a size, or an unknown name refused as such)."""
    return name == SLICED or name.startswith(SLICE_PREFIX)


def parse_container(
    name: str, limits: Mapping[str, object], requests: Mapping[str, object] | None = None
) -> ContainerRequest:
    """The verdict on one container's resources (see the module docstring)."""
    requests = {} if requests is None else requests
    names = sorted(key for key in {*limits, *requests} if isinstance(key, str))
    partitions = [key for key in names if is_partition(key)]
    slices = [key for key in names if is_slice(key)]
    label = f'container "{shorten(name)}"'
    if not partitions:
        if slices:
            return _slice_request(
                name, label, limits, requests, slices, with_whole_card=WHOLE_CARD in names
            )
        if WHOLE_CARD in limits:
            return WholeCardRequest(_whole(limits[WHOLE_CARD]))
        return NoPartitionRequest()
    violations = list(_partition_violations(name, label, limits, requests, partitions))
    others = [key for key in names if key == WHOLE_CARD or is_slice(key)]
    if others:
        violations.append(
            mixed_with_partitions(name, label, others, "next to its own partition request")
        )
    if violations:
        return RefusedRequest(tuple(violations))
    if MEMORY_MIB in partitions:
        # No violation leaves the family at 1 and a memory size (and maybe compute units) in
        # range, and no profile.
        cu = _whole(limits[COMPUTE_UNITS]) if COMPUTE_UNITS in limits else None
        return SizeRequest(_whole(limits[MEMORY_MIB]) or 0, cu)
    # Otherwise the family and exactly one profile, each at exactly 1.
    (profile,) = (key for key in partitions if key != FAMILY)
    return ProfileRequest(profile[len(PROFILE_PREFIX) :])


def _slice_request(
    name: str,
    label: str,
    limits: Mapping[str, object],
    requests: Mapping[str, object],
    slices: list[str],
    *,
    with_whole_card: bool,
) -> SliceRequest | RefusedRequest:
    violations = list(_slice_violations(name, label, limits, requests, slices))
    if with_whole_card:
        violations.append(
            Violation(
                Reason.SLICE_WITH_WHOLE_CARD,
                name,
                f"{label} requests {WHOLE_CARD} next to a logical slice ({show_names(slices)}): "
                "a container gets whole cards or one slice of a card, not both; keep one, e.g. "
                f"{_SLICE_EXAMPLE}",
            )
        )
    if violations:
        return RefusedRequest(tuple(violations))
    # No violation leaves the slice at 1 and a memory size (and maybe compute units) in range.
    cu = _whole(limits[SLICE_COMPUTE_UNITS]) if SLICE_COMPUTE_UNITS in limits else None
    return SliceRequest(_whole(limits[SLICE_MEMORY_MIB]) or 0, cu)


def mixed_with_partitions(
    container: str, label: str, others: Sequence[str], where: str
) -> Violation:
    """Whole cards (``others``) asked for ``where`` a partition is: the pod cannot be placed."""
    return Violation(
        Reason.MIXED_WITH_PARTITIONS,
        container,
        f"{label} requests {', '.join(others)} {where}: a partitioned node serves only "
        "partitions, so this pod could never be scheduled; use partitions or whole cards in "
        "one pod, not both",
    )


def _whole(value: object) -> int | None:
    try:
        return whole_number(parse_quantity(value))
    except QuantityError:
        return None


def _size_hint(resource: str) -> str:
    """What a size resource counts, with an example."""
    if resource == MEMORY_MIB:
        return f"memory in MiB, e.g. {_SIZE_EXAMPLE}"
    if resource == SLICE_MEMORY_MIB:
        return f"memory in MiB, e.g. {_SLICE_EXAMPLE}"
    if resource == SLICE_COMPUTE_UNITS:
        return f"compute units, e.g. {SLICE_COMPUTE_UNITS}: 16 next to a {SLICE_MEMORY_MIB}"
    return f"compute units, e.g. {COMPUTE_UNITS}: 16 next to a {MEMORY_MIB}"


def _in_range(name: str, label: str, resource: str, amount: int) -> Iterator[Violation]:
    """A size outside 1..its bound: far above any card, so only nonsense is refused."""
    bound = MAX_MEMORY_MIB if resource in (MEMORY_MIB, SLICE_MEMORY_MIB) else MAX_COMPUTE_UNITS
    if not 1 <= amount <= bound:
        yield Violation(
            Reason.SIZE_OUT_OF_RANGE,
            name,
            f"{label} requests {resource}: {amount}; it must be 1..{bound} "
            f"({_size_hint(resource)})",
        )


def _slice_violations(
    name: str,
    label: str,
    limits: Mapping[str, object],
    requests: Mapping[str, object],
    slices: list[str],
) -> Iterator[Violation]:
    amounts = yield from _amounts(name, label, limits, requests, slices)
    sizes = [key for key in slices if key in SLICE_SIZE_RESOURCES]
    for resource in slices:
        if resource != SLICED and resource not in sizes:
            yield Violation(
                Reason.UNKNOWN_SLICE_RESOURCE,
                name,
                f"{label} requests {shorten(resource)}, which is not a slice resource: a slice "
                f"is {SLICED}: 1 with {SLICE_MEMORY_MIB} and optionally {SLICE_COMPUTE_UNITS}",
            )
    for resource in sizes:
        if resource in amounts:
            yield from _in_range(name, label, resource, amounts[resource])
    if amounts.get(SLICED, 1) != 1:
        yield Violation(
            Reason.QUANTITY_NOT_ONE,
            name,
            f"{label} requests {SLICED}: {amounts[SLICED]}; one slice per container (set it "
            "to 1 and give each slice its own container)",
        )
    if SLICED in slices and SLICE_MEMORY_MIB not in slices:
        yield Violation(
            Reason.SLICE_WITHOUT_MEMORY,
            name,
            f"{label} requests {SLICED} without its memory: add {SLICE_MEMORY_MIB}, e.g. "
            f"{_SLICE_EXAMPLE} (a slice's memory is a cap its workload lives under, so it has "
            "no default)",
        )
    if sizes and SLICED not in slices:
        yield Violation(
            Reason.SLICE_SIZE_WITHOUT_SLICE,
            name,
            f"{label} requests {show_names(sizes)} without {SLICED}: add {SLICED}: 1 next to "
            "it (the slice is what the node allocates)",
        )


def _partition_violations(
    name: str,
    label: str,
    limits: Mapping[str, object],
    requests: Mapping[str, object],
    partitions: list[str],
) -> Iterator[Violation]:
    amounts = yield from _amounts(name, label, limits, requests, partitions)

    profiles = [
        key for key in partitions if key.startswith(PROFILE_PREFIX) and key != PROFILE_PREFIX
    ]
    sizes = [key for key in partitions if key in SIZE_RESOURCES]
    unknown = [key for key in partitions if key != FAMILY and key not in (*profiles, *sizes)]
    for resource in unknown:
        yield Violation(
            Reason.UNKNOWN_PARTITION_RESOURCE,
            name,
            f"{label} requests {shorten(resource)}, which is not a partition resource: "
            f"profile resources are named {PROFILE_PREFIX}<profile>; request {_EXAMPLE}",
        )
    for resource in sizes:
        if resource in amounts:
            yield from _in_range(name, label, resource, amounts[resource])
    for resource, amount in amounts.items():
        if amount != 1 and resource not in unknown and resource not in sizes:
            yield Violation(
                Reason.QUANTITY_NOT_ONE,
                name,
                f"{label} requests {shorten(resource)}: {amount}; {_ONE_PER_CONTAINER} "
                f"(set it to 1 and create one pod for each partition)",
            )
    if FAMILY in partitions and not profiles and not sizes:
        yield Violation(
            Reason.FAMILY_WITHOUT_PROFILE,
            name,
            f"{label} requests {FAMILY} but no profile: add a limit {PROFILE_PREFIX}<profile>: 1 "
            f"next to it, e.g. {_EXAMPLE}, or a memory size, e.g. {_SIZE_EXAMPLE} (a partition "
            "without a profile has no size)",
        )
    if (profiles or sizes) and FAMILY not in partitions:
        yield Violation(
            Reason.PROFILE_WITHOUT_FAMILY,
            name,
            f"{label} requests {show_names(profiles + sizes)} without the family: add "
            f"{FAMILY}: 1 next to it (the family is what the node allocates)",
        )
    if profiles and sizes:
        yield Violation(
            Reason.SIZE_WITH_PROFILE,
            name,
            f"{label} requests a profile ({show_names(profiles)}) and a size "
            f"({show_names(sizes)}): ask for one or the other, e.g. {_EXAMPLE} or {_SIZE_EXAMPLE}",
        )
    if COMPUTE_UNITS in sizes and MEMORY_MIB not in sizes:
        yield Violation(
            Reason.COMPUTE_UNITS_WITHOUT_MEMORY,
            name,
            f"{label} requests {COMPUTE_UNITS} without {MEMORY_MIB}: a size request names the "
            f"memory first, e.g. {_SIZE_EXAMPLE} and {COMPUTE_UNITS}: 16",
        )
    if len(profiles) > 1:
        yield Violation(
            Reason.TWO_PROFILES,
            name,
            f"{label} requests {len(profiles)} profiles ({show_names(profiles)}): "
            f"{_ONE_PER_CONTAINER}; keep exactly one profile in this container (a container "
            "sees one partition, so request exactly one profile)",
        )


def _amounts(
    name: str,
    label: str,
    limits: Mapping[str, object],
    requests: Mapping[str, object],
    resources: list[str],
) -> Generator[Violation, None, dict[str, int]]:
    """Yields what is wrong with each resource's quantity; returns those that read."""
    amounts: dict[str, int] = {}
    for resource in resources:
        amount = yield from _amount(name, label, limits, requests, resource)
        if amount is not None:
            amounts[resource] = amount
    return amounts


def _amount(
    name: str,
    label: str,
    limits: Mapping[str, object],
    requests: Mapping[str, object],
    resource: str,
) -> Generator[Violation, None, int | None]:
    """Yields what is wrong with the quantity of ``resource``; returns it (limits first)."""
    values: dict[str, int] = {}
    # A size is a whole number of its unit; every other partition resource is counted at 1.
    if resource in SIZE_RESOURCES or resource in SLICE_SIZE_RESOURCES:
        whole_fix = f"sizes are whole numbers; {_size_hint(resource)}"
        equal_fix = "set both to the same size"
    else:
        whole_fix = "partitions are counted in whole units; set it to 1"
        equal_fix = "set both to 1"
    for field, source in (("limits", limits), ("requests", requests)):
        if resource not in source:
            continue
        raw = source[resource]
        try:
            exact = parse_quantity(raw)
        except QuantityError:
            yield Violation(
                Reason.QUANTITY_NOT_WHOLE,
                name,
                f"{label} has {field} {shorten(resource)}: {show_value(raw)}, which is not a "
                f"quantity: {whole_fix}",
            )
            continue
        whole = whole_number(exact)
        if whole is None:
            yield Violation(
                Reason.QUANTITY_NOT_WHOLE,
                name,
                f"{label} has {field} {shorten(resource)}: {show_value(raw)}, which is not a "
                f"whole number: {whole_fix}",
            )
            continue
        values[field] = whole
    if resource not in limits:
        yield Violation(
            Reason.REQUESTS_WITHOUT_LIMITS,
            name,
            f"{label} sets {shorten(resource)} in requests but not in limits: set it in limits "
            "(requests of extended resources default to the limits, and the node reads the "
            "profile from the limits)",
        )
    elif "requests" in values and "limits" in values and values["requests"] != values["limits"]:
        yield Violation(
            Reason.REQUESTS_LIMITS_DISAGREE,
            name,
            f"{label} has requests {shorten(resource)}: {values['requests']} but limits "
            f"{shorten(resource)}: {values['limits']}: extended resources need equal requests "
            f"and limits; {equal_fix} or leave out the requests (they default to the limits)",
        )
    return values.get("limits", values.get("requests"))
