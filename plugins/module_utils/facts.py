# Copyright: hygon.dcu contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Node-layer objects as plain JSON-ready dicts: the shape modules return as facts."""

from __future__ import annotations

from typing import Any

from .cards import Card, Profile
from .holders import Gap, Holder
from .node import Instance, ModeState
from .registry import Finding
from .vdevs import Vdev


def mode_name(enabled: bool | None) -> str | None:
    if enabled is None:
        return None
    return "enabled" if enabled else "disabled"


def mode_facts(mode: ModeState) -> dict[str, Any]:
    return {
        "current": mode_name(mode.current),
        "pending": mode_name(mode.pending),
        "source": mode.source.value,
        "error": mode.error,
    }


def profile_facts(profile: Profile) -> dict[str, Any]:
    return {
        "id": profile.id,
        "name": profile.name,
        "slices": profile.slices,
        "cu_count": profile.cu_count,
        "memory_mib": profile.memory_mib,
        "gi_count_max": profile.gi_count_max,
        "placements": [str(placement) for placement in profile.placements],
    }


def card_facts(card: Card) -> dict[str, Any]:
    return {
        "index": card.index,
        "pci": card.pci,
        "model": card.model,
        "slice_count": card.slice_count,
        "cu_count": card.cu_count,
        "memory_mib": card.memory_mib,
        "healthy": card.healthy,
        "error": card.error,
        "profiles": [profile_facts(profile) for profile in card.profiles],
        "occupied_slices": sorted(card.occupied),
        "remaining": {profile.name: card.remaining.get(profile.id, 0) for profile in card.profiles},
        "free_placements": {
            profile.name: [str(p) for p in card.free_placements(profile)]
            for profile in card.profiles
        },
    }


def instance_facts(instance: Instance) -> dict[str, Any]:
    return {
        "card": instance.card_index,
        "pci": instance.pci,
        "gpu_instance_id": instance.gpu_instance_id,
        "compute_instance_id": instance.compute_instance_id,
        "profile": instance.profile.name if instance.profile else None,
        "profile_id": instance.profile.id if instance.profile else None,
        "placement": str(instance.placement),
        "uuid": instance.uuid,
        "conf_path": instance.conf_path,
    }


def describe_instance(instance: Instance) -> str:
    profile = instance.profile.name if instance.profile else "unknown profile"
    where = f"card {instance.card_index}"
    if instance.pci:
        where += f" ({instance.pci})"
    text = (
        f"{where} GPU instance {instance.gpu_instance_id} {profile} "
        f"at placement {instance.placement}"
    )
    if instance.uuid:
        text += f" uuid {instance.uuid}"
    elif instance.compute_instance_id is None:
        text += " (no compute instance)"
    return text


def finding_facts(finding: Finding) -> dict[str, Any]:
    return {"kind": finding.kind, "path": finding.path, "detail": finding.detail}


def holder_facts(holder: Holder) -> dict[str, Any]:
    return {
        "pid": holder.pid,
        "command": holder.command,
        "fd_count": holder.fd_count,
        "pod_uid": holder.pod_uid,
        "container_id": holder.container_id,
    }


def gap_facts(gap: Gap) -> dict[str, Any]:
    return {"kind": gap.kind, "detail": gap.detail}


def vdev_facts(vdev: Vdev) -> dict[str, Any]:
    return {
        "id": vdev.id,
        "card": vdev.card,
        "compute_units": vdev.compute_units,
        "memory_mib": vdev.memory_mib,
        "conf_path": vdev.conf_path,
        "conf_problem": vdev.conf_problem,
    }


def describe_vdev(vdev: Vdev) -> str:
    return (
        f"vdev {vdev.id} on card {vdev.card} ({vdev.compute_units} CUs, {vdev.memory_mib} MiB, "
        f"{vdev.conf_path})"
    )
