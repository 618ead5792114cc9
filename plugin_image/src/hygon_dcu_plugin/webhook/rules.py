"""The admission rules for Hygon DCU partition requests, as one pure function of a pod.

A pod that reaches a node with a request the allocator cannot serve fails with
UnexpectedAdmissionError and is never retried, so every request the allocator would refuse is
refused here first, with a message that names the container and says how to fix the spec.

Decisions where Kubernetes leaves room:
- Limits are the request. For extended resources the API server defaults requests to limits
  and refuses requests without limits; the allocator reads the profile from limits. So a
  partition resource in requests only is refused, and requests that differ from limits are.
- Partitions only in app containers (``spec.containers``). The kubelet hands an init
  container's devices on to the app containers, and PodResources ``List`` (how the allocator
  finds the container it serves) walks ``spec.containers`` only: a partition in a regular init
  container or a native sidecar (init container with ``restartPolicy: Always``) could not be
  attributed to one container.
- Ephemeral containers may not have resources at all (the API server refuses them); a
  ``hygon.com/`` resource on one is refused here too in case it ever gets that far.
- Quantities are Kubernetes quantities: "1", "1.0" and "1000m" are all one; "500m" is not a
  whole number and is refused with its own message. (The API server stores and sends the
  canonical form, "1", so the other spellings reach us only from a client that bypasses it.)

Whatever the pod, the work is linear in its size and every message is bounded: names and
values are shortened, lists of names are cut with a count of the rest, and
``find_violations`` keeps only the first violations (counting the others).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal
from enum import Enum, StrEnum
from typing import Any

from hygon_dcu_plugin.vocabulary import FAMILY, PROFILE_PREFIX, SLICED, WHOLE_CARD
from hygon_dcu_plugin.webhook.quantity import QuantityError, parse_quantity, whole_number

VENDOR_PREFIX = "hygon.com/"
PARTITION_PREFIX = FAMILY + "."

_EXAMPLE = f"{FAMILY}: 1 and {PROFILE_PREFIX}2g.15gb: 1"
# Longer names and values are shortened in messages; a valid name is at most 63 characters
# (a container) or 253 (a resource), so only invalid ones are ever cut.
_MAX_SHOWN_CHARS = 100
# Lists of names in one message show this many, then how many more there are.
_MAX_SHOWN_NAMES = 3
_ONE_PER_CONTAINER = "one partition per container; use one pod per partition"


class Rule(StrEnum):
    """Why a pod was refused; also the ``rule`` label of the denial metric."""

    FAMILY_WITHOUT_PROFILE = "family-without-profile"
    PROFILE_WITHOUT_FAMILY = "profile-without-family"
    QUANTITY_NOT_ONE = "quantity-not-one"
    QUANTITY_NOT_WHOLE = "quantity-not-whole"
    TWO_PROFILES = "two-profiles"
    REQUESTS_LIMITS_DISAGREE = "requests-limits-disagree"
    REQUESTS_WITHOUT_LIMITS = "requests-without-limits"
    UNKNOWN_PARTITION_RESOURCE = "unknown-partition-resource"
    PARTITION_IN_SIDECAR = "partition-in-sidecar"
    PARTITION_IN_INIT_CONTAINER = "partition-in-init-container"
    EPHEMERAL_CONTAINER_RESOURCE = "ephemeral-container-resource"
    MIXED_WITH_PARTITIONS = "mixed-with-partitions"
    MALFORMED_POD = "malformed-pod"


@dataclass(frozen=True)
class Violation:
    """One broken rule: which container, and a message that says how to fix the spec."""

    rule: Rule
    container: str
    message: str


@dataclass(frozen=True)
class Findings:
    """The first violations of a pod, and how many and which rules there were in all."""

    kept: list[Violation]
    total: int
    rules: frozenset[Rule]


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
        return f'{self.kind.value} "{_shorten(self.name)}"'

    def vendor_resources(self) -> list[str]:
        names = {*self.requests, *self.limits}
        return sorted(
            name for name in names if isinstance(name, str) and name.startswith(VENDOR_PREFIX)
        )

    def holds_partition(self) -> bool:
        return self.kind is not _Kind.EPHEMERAL and any(map(_is_partition, self.vendor_resources()))


class _MalformedPod(ValueError):
    pass


def check_pod(pod: Mapping[str, Any]) -> list[Violation]:
    """Every rule the pod breaks, in spec order; an empty list admits the pod."""
    return list(_violations(pod))


def find_violations(pod: Mapping[str, Any], keep: int) -> Findings:
    """The first ``keep`` violations of ``check_pod``, without holding the others."""
    kept: list[Violation] = []
    total = 0
    rules: set[Rule] = set()
    for violation in _violations(pod):
        total += 1
        rules.add(violation.rule)
        if len(kept) < keep:
            kept.append(violation)
    return Findings(kept, total, frozenset(rules))


def _violations(pod: Mapping[str, Any]) -> Iterator[Violation]:
    # Walk the containers three times instead of holding them: once to check the shape and
    # find the partitioned ones, once for each container's own rules, once for mixing.
    partitioned: list[str] = []
    partitioned_count = 0
    try:
        for container in _containers(pod):
            if container.holds_partition():
                partitioned_count += 1
                if len(partitioned) < _MAX_SHOWN_NAMES:
                    partitioned.append(container.label)
    except _MalformedPod as error:
        yield Violation(Rule.MALFORMED_POD, "", f"{error}: the pod cannot be checked")
        return
    for container in _containers(pod):
        yield from _check_container(container)
    if partitioned_count:
        holders = _listing(partitioned, partitioned_count)
        for container in _containers(pod):
            yield from _check_mixing(container, holders)


def _is_partition(name: str) -> bool:
    return name == FAMILY or name.startswith(PARTITION_PREFIX)


def _check_container(container: _Container) -> Iterator[Violation]:
    vendor = container.vendor_resources()
    if container.kind is _Kind.EPHEMERAL:
        if vendor:
            yield Violation(
                Rule.EPHEMERAL_CONTAINER_RESOURCE,
                container.name,
                f"{container.label} requests {_names(vendor)}: ephemeral containers cannot "
                "have resources; remove them from the ephemeral container",
            )
        return
    partitions = [name for name in vendor if _is_partition(name)]
    if not partitions:
        return
    if container.kind is _Kind.SIDECAR:
        yield Violation(
            Rule.PARTITION_IN_SIDECAR,
            container.name,
            f"{container.label} (restartPolicy: Always) requests {_names(partitions)}: "
            "a sidecar is an init container, whose devices are handed on to the app "
            "containers, so its partition cannot be attributed; request the partition in an "
            "app container under spec.containers instead",
        )
        return
    if container.kind is _Kind.INIT:
        yield Violation(
            Rule.PARTITION_IN_INIT_CONTAINER,
            container.name,
            f"{container.label} requests {_names(partitions)}: an init container's devices "
            "are handed on to the app containers, so its partition cannot be attributed; "
            "request the partition in an app container under spec.containers instead",
        )
        return
    yield from _check_app_partitions(container, partitions)


def _check_app_partitions(container: _Container, partitions: list[str]) -> Iterator[Violation]:
    label = container.label
    amounts: dict[str, int] = {}
    for name in partitions:
        amount, problems = _amount(container, name)
        yield from problems
        if amount is not None:
            amounts[name] = amount

    profiles = [name for name in partitions if name.startswith(PROFILE_PREFIX)]
    profiles = [name for name in profiles if len(name) > len(PROFILE_PREFIX)]
    unknown = [name for name in partitions if name != FAMILY and name not in profiles]
    for name in unknown:
        yield Violation(
            Rule.UNKNOWN_PARTITION_RESOURCE,
            container.name,
            f"{label} requests {_shorten(name)}, which is not a partition resource: profile "
            f"resources are named {PROFILE_PREFIX}<profile>; request {_EXAMPLE}",
        )
    for name, amount in amounts.items():
        if amount != 1 and name not in unknown:
            yield Violation(
                Rule.QUANTITY_NOT_ONE,
                container.name,
                f"{label} requests {_shorten(name)}: {amount}; {_ONE_PER_CONTAINER} "
                f"(set it to 1 and create one pod for each partition)",
            )
    if FAMILY in partitions and not profiles:
        yield Violation(
            Rule.FAMILY_WITHOUT_PROFILE,
            container.name,
            f"{label} requests {FAMILY} without a profile: add exactly one "
            f"{PROFILE_PREFIX}<profile> resource next to it, e.g. {_EXAMPLE}",
        )
    if profiles and FAMILY not in partitions:
        yield Violation(
            Rule.PROFILE_WITHOUT_FAMILY,
            container.name,
            f"{label} requests {_names(profiles)} without the family: add {FAMILY}: 1 "
            "next to the profile (the family is what the node allocates)",
        )
    if len(profiles) > 1:
        yield Violation(
            Rule.TWO_PROFILES,
            container.name,
            f"{label} requests {len(profiles)} profiles ({_names(profiles)}): "
            f"{_ONE_PER_CONTAINER}; keep exactly one profile in this container",
        )


def _amount(container: _Container, name: str) -> tuple[int | None, list[Violation]]:
    """The container's quantity of ``name`` (limits first), and what is wrong with it."""
    label = container.label
    problems: list[Violation] = []
    values: dict[str, int] = {}
    for field, source in (("limits", container.limits), ("requests", container.requests)):
        if name not in source:
            continue
        raw = source[name]
        try:
            exact: Decimal = parse_quantity(raw)
        except QuantityError:
            problems.append(
                Violation(
                    Rule.QUANTITY_NOT_WHOLE,
                    container.name,
                    f"{label} has {field} {_shorten(name)}: {_show(raw)}, which is not a quantity: "
                    "partitions are counted in whole units; set it to 1",
                )
            )
            continue
        whole = whole_number(exact)
        if whole is None:
            problems.append(
                Violation(
                    Rule.QUANTITY_NOT_WHOLE,
                    container.name,
                    f"{label} has {field} {_shorten(name)}: {_show(raw)}, which is not a whole "
                    "number: partitions are counted in whole units; set it to 1",
                )
            )
            continue
        values[field] = whole
    if name not in container.limits:
        problems.append(
            Violation(
                Rule.REQUESTS_WITHOUT_LIMITS,
                container.name,
                f"{label} sets {_shorten(name)} in requests but not in limits: set it in limits "
                "(requests of extended resources default to the limits, and the node reads "
                "the profile from the limits)",
            )
        )
    elif "requests" in values and "limits" in values and values["requests"] != values["limits"]:
        problems.append(
            Violation(
                Rule.REQUESTS_LIMITS_DISAGREE,
                container.name,
                f"{label} has requests {_shorten(name)}: {values['requests']} but limits "
                f"{_shorten(name)}: {values['limits']}: extended resources need equal requests and "
                "limits; set both to 1 or leave out the requests (they default to the limits)",
            )
        )
    amount = values.get("limits", values.get("requests"))
    return amount, problems


def _check_mixing(container: _Container, holders: str) -> Iterator[Violation]:
    """``holders`` names the containers that hold a partition (at least one does)."""
    others = [name for name in container.vendor_resources() if name in (WHOLE_CARD, SLICED)]
    if not others:
        return
    if container.holds_partition():
        where = "next to its own partition request"
    else:
        where = f"while {holders} requests a partition"
    yield Violation(
        Rule.MIXED_WITH_PARTITIONS,
        container.name,
        f"{container.label} requests {', '.join(others)} {where}: a partitioned node "
        "serves only partitions, so this pod could never be scheduled; use partitions or "
        "whole cards in one pod, not both",
    )


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


def _shorten(text: str) -> str:
    if len(text) <= _MAX_SHOWN_CHARS:
        return text
    return f"{text[:_MAX_SHOWN_CHARS]}... ({len(text)} characters)"


def _show(value: object) -> str:
    """A value from the pod as a message shows it: short, and never a whole structure."""
    if isinstance(value, str):
        return repr(value) if len(value) <= _MAX_SHOWN_CHARS else _shorten(repr(value))
    if value is None or isinstance(value, (bool, int, float)):
        text = repr(value)
        return text if len(text) <= _MAX_SHOWN_CHARS else f"a number of {len(text)} digits"
    return f"a JSON {'object' if isinstance(value, Mapping) else type(value).__name__}"


def _names(names: list[str]) -> str:
    return _listing([_shorten(name) for name in names[:_MAX_SHOWN_NAMES]], len(names))


def _listing(shown: Iterable[str], count: int) -> str:
    """``shown`` (the first few of ``count`` items) joined, with how many more there are."""
    items = list(shown)
    text = ", ".join(items)
    if count > len(items):
        text += f" and {count - len(items)} more"
    return text
