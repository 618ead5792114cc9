"""Resource vocabulary turned into device lists: which token ids the kubelet sees, and which
are Healthy.

Extended-resource counts are independent integers to the scheduler, so each resource advertises
exactly what can still be carved plus what is held: Healthy = tokens held by live allocations
(always, so the kubelet never sees a running pod's device go bad) + as many free tokens as the
node can still give. The rest of the fixed pool is Unhealthy: withheld as capacity shrinks.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from hygon_dcu_plugin.placement import CardView, max_remaining, remaining
from hygon_dcu_plugin.vocabulary import FAMILY, SLICED, WHOLE_CARD, profile_resource

HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"


@dataclass(frozen=True)
class Device:
    id: str
    healthy: bool


def token_id(resource: str, number: int) -> str:
    if resource == FAMILY:
        stem = "partition"
    elif resource == SLICED:
        stem = "slice"
    else:
        stem = resource.rsplit(".mig-", 1)[-1]
    return f"{stem}-{number:03d}"


def _empty(card: CardView) -> CardView:
    return CardView(card.index, card.pci, card.slice_count, card.profiles, frozenset())


def pool_sizes(cards: Sequence[CardView]) -> dict[str, int]:
    """Token pool per partition resource: what an empty node could give at most."""
    sizes = {FAMILY: sum(max_remaining(_empty(card)) for card in cards)}
    for name in profile_names(cards):
        sizes[profile_resource(name)] = sum(
            remaining(p, frozenset()) for card in cards for p in card.profiles if p.name == name
        )
    return sizes


def profile_names(cards: Sequence[CardView]) -> list[str]:
    return sorted({p.name for card in cards for p in card.profiles})


def free_capacity(cards: Sequence[CardView]) -> dict[str, int]:
    """How many more partitions each resource can still give on this node."""
    free = {FAMILY: sum(max_remaining(card) for card in cards if card.profiles)}
    for name in profile_names(cards):
        free[profile_resource(name)] = sum(
            remaining(p, card.occupied) for card in cards for p in card.profiles if p.name == name
        )
    return free


def token_devices(
    resource: str, pool_size: int, in_use: Collection[str], free: int
) -> list[Device]:
    """The resource's pool with held tokens and `free` more tokens Healthy.

    The pool grows past what an empty node could give when held tokens no longer stand for
    live partitions (after a reboot, until their pods go), so `free` is always advertised.
    """
    size = pool_size
    held_in_pool = sum(1 for n in range(size) if token_id(resource, n) in in_use)
    while size - held_in_pool < free:
        held_in_pool += token_id(resource, size) in in_use
        size += 1
    pool = [token_id(resource, n) for n in range(size)]
    devices: list[Device] = []
    budget = free
    for token in pool:
        if token in in_use:
            devices.append(Device(token, True))
        elif budget > 0:
            devices.append(Device(token, True))
            budget -= 1
        else:
            devices.append(Device(token, False))
    # A held token outside the pool (the pool shrank, e.g. a card went away) stays Healthy.
    devices.extend(Device(token, True) for token in sorted(set(in_use) - set(pool)))
    return devices


def partition_plan(
    cards: Sequence[CardView],
    in_use: Mapping[str, Collection[str]],
    unlisted: Mapping[str, int] | None = None,
) -> dict[str, list[Device]]:
    """Every resource a partition node serves; hygon.com/dcu reads 0 there.

    `in_use`: token ids the kubelet lists as assigned. `unlisted`: per resource, our grants the
    kubelet does not list with an id of it (``held.held_tokens``). The kubelet lists a
    container's ids only after its Allocate returned, and admits a pod's resources one at a
    time, so for a moment a held partition has no listed token: a free token stands in for it,
    keeping the count exact (held + what still fits) at every instant.
    """
    sizes = pool_sizes(cards)
    free = free_capacity(cards)
    plan: dict[str, list[Device]] = {WHOLE_CARD: [], SLICED: []}
    for resource, size in sizes.items():
        tokens = set(in_use.get(resource, ()))
        spare = (unlisted or {}).get(resource, 0)
        plan[resource] = token_devices(resource, size, tokens, free[resource] + spare)
    return plan


def whole_card_plan(card_health: Mapping[str, bool]) -> dict[str, list[Device]]:
    """Mode off: one device per card (id = PCI address) and no partition capacity."""
    return {
        WHOLE_CARD: [Device(pci, healthy) for pci, healthy in sorted(card_health.items())],
        FAMILY: [],
    }


def slice_plan(pool_size: int, in_use: Collection[str], free: int) -> list[Device]:
    """Mode off: ``hygon.com/dcu.sliced``, a token per slice the node's cards may hold (the
    per-card maximum on each), held ones and as many more as can still be placed Healthy."""
    return token_devices(SLICED, pool_size, in_use, free)


def healthy_count(devices: Sequence[Device]) -> int:
    return sum(1 for d in devices if d.healthy)
