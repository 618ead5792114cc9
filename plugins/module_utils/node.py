# Copyright: hygon.dcu contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""One Hygon node as the modules and the device plugin see it.

Joins the library's view (mode, cards, profiles, live GPU and compute instances) with the
driver's registry (card PCI addresses, instance uuids), and carves or removes instances in the
only order the driver accepts. Every host path goes through ``host_root`` so a simulated node
is just another root directory.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Collection
from dataclasses import dataclass
from enum import Enum

from .cards import (
    Card,
    Placement,
    Profile,
    Span,
    fit_count,
    occupied_by,
)
from .hostpath import host_path
from .hydmi import (
    ComputeInstanceProfileInfo,
    GpuInstanceInfo,
    HydmiError,
    HydmiLibrary,
    LibraryUnusable,
    classify,
    profile_name,
)
from .registry import (
    Registry,
    SweepResult,
    conf_path,
    read_conf,
    read_registry,
    sweep_poison,
)
from .shared_library import text_field

# Called with each step's name as it completes: the crash tests stop a create there. The one
# definition the device plugin's allocator, reclaimer and runtime take too.
Checkpoint = Callable[[str], None]


class NodeError(Exception):
    """A node-layer refusal that is not a library return code."""


class UuidMismatch(NodeError):
    """The GPU instance id is live, but its uuid is not the one expected: someone else's."""

    def __init__(
        self, card_index: int, gpu_instance_id: int, expected: str, actual: list[str]
    ) -> None:
        self.card_index = card_index
        self.gpu_instance_id = gpu_instance_id
        self.expected = expected
        self.actual = actual
        live = ", ".join(actual) if actual else "no conf file"
        super().__init__(
            f"card {card_index} GPU instance {gpu_instance_id}: expected uuid {expected}, "
            f"live instance has {live}; the id was reused, nothing destroyed"
        )


class InstanceNotFound(NodeError):
    """No live GPU instance with that id on that card."""


class PlacementRefused(NodeError):
    """The card offers no such profile, or the profile has no such legal placement."""


class RegistryIncomplete(NodeError):
    """The instance was created but its conf file (and so its uuid) is missing."""


@dataclass(frozen=True)
class Instance:
    card_index: int
    pci: str | None
    gpu_instance_id: int
    compute_instance_id: int | None  # None: a GPU instance without its compute instance
    profile: Profile | None
    placement: Placement
    uuid: str | None  # from the conf file; None when there is none
    conf_path: str | None  # canonical: /etc/dmi_mig_config/ci/dev0gi3ci0.conf
    conf_host_path: str | None  # host_root-prefixed


# StrEnum is 3.11+; the node layer runs on the node's Python, 3.9 at the oldest (docs/install.md).
class ModeSource(str, Enum):  # noqa: UP042
    """Where the node's mode was read: the library, or the registry when the library is unusable."""

    LIBRARY = "library"
    REGISTRY = "registry"


@dataclass(frozen=True)
class ModeState:
    current: bool | None
    pending: bool | None
    source: ModeSource
    error: str | None = None


@dataclass(frozen=True)
class _LiveGpuInstance:
    handle: ctypes.c_void_p
    info: GpuInstanceInfo
    profile: Profile


def _checkpoint(checkpoint: Checkpoint | None, step: str) -> None:
    if checkpoint is not None:
        checkpoint(step)


def _legal(
    card_index: int,
    profiles: tuple[Profile, ...],
    profile: Profile | int,
    placement: Span | int,
) -> tuple[Profile, Placement]:
    """The card's own profile and placement equal to those asked for, or PlacementRefused."""
    if isinstance(profile, Profile):
        found = next((p for p in profiles if p == profile), None)
        asked = f"{profile.name} (id {profile.id}) as given"
    else:
        found = next((p for p in profiles if p.id == profile), None)
        asked = f"id {profile}"
    if found is None:
        offered = ", ".join(f"{p.name} (id {p.id})" for p in profiles) or "none"
        raise PlacementRefused(f"card {card_index} offers no profile {asked}; offered: {offered}")
    if isinstance(placement, int):
        chosen = next((p for p in found.placements if p.start == placement), None)
        where = f"starting at slice {placement}"
    else:
        span = (placement.start, placement.size)
        chosen = next((p for p in found.placements if (p.start, p.size) == span), None)
        where = f"{placement.start}:{placement.size}"
    if chosen is None:
        legal = " ".join(str(p) for p in found.placements) or "none"
        raise PlacementRefused(
            f"profile {found.name} has no placement {where} on card {card_index}; "
            f"legal placements: {legal}"
        )
    return found, chosen


class Node:
    """The node at ``host_root``, through the library at ``library_path`` (or the search order)."""

    def __init__(self, host_root: str = "/", library_path: str | None = None) -> None:
        self.host_root = host_root
        self.library = HydmiLibrary(host_root, library_path)
        # A card's profile table is fixed by the driver install; it changes only across a reboot
        # or reinstall, which start a new process (and a new Node); sweeping it on every call
        # would be most of the library calls of an Allocate.
        self._profile_tables: dict[tuple[int, int], tuple[Profile, ...]] = {}

    # Registry and host paths
    def host_path(self, canonical: str) -> str:
        return host_path(self.host_root, canonical)

    def registry(self) -> Registry:
        return read_registry(self.host_root)

    def sweep_poison(
        self, dry_run: bool = False, cards: Collection[int] | None = None
    ) -> SweepResult:
        return sweep_poison(self.host_root, dry_run=dry_run, cards=cards)

    # Mode
    def mode(self) -> ModeState:
        """The node-wide mode; from the registry's dev<N> files when the library is unusable."""
        try:
            current, pending = self.library.system_mig_mode()
        except HydmiError as exc:
            present = bool(read_registry(self.host_root).cards)
            return ModeState(
                current=present, pending=None, source=ModeSource.REGISTRY, error=str(exc)
            )
        return ModeState(current=bool(current), pending=bool(pending), source=ModeSource.LIBRARY)

    def partitioned(self) -> bool:
        """True only when the library answers and says the mode is on."""
        try:
            current, _pending = self.library.system_mig_mode()
        except HydmiError:
            return False
        return bool(current)

    # Inventory
    def card_count(self) -> int:
        return self.library.device_count()

    def cards(self) -> list[Card]:
        """Every card the library counts. Raises LibraryUnusable when it cannot count them."""
        registry = read_registry(self.host_root)
        return [self._card(index, registry) for index in range(self.library.device_count())]

    def _card(self, index: int, registry: Registry) -> Card:
        lib = self.library
        pci = registry.cards.get(index)
        errors: list[str] = []
        slice_count = cu_attribute = memory_mib = 0
        model: str | None = None
        profiles: tuple[Profile, ...] = ()
        remaining: dict[int, int] = {}
        occupied: frozenset[int] = frozenset()
        try:
            device = lib.device_by_index(index)
            if pci is not None:
                self._check_pci(index, pci, errors)
            attributes = lib.device_attributes(device)
            slice_count = attributes.gpu_instance_slice_count
            cu_attribute = attributes.cu_count
            memory_mib = attributes.memory_size_MB
            model = text_field(attributes.name) or None
            profiles = self._profiles(index, device, slice_count)
            live = self._gpu_instances(device, profiles)
            occupied = occupied_by((i.info.placement.start, i.info.placement.size) for i in live)
            # Computed, not the library's remaining_capacity: the figure the device plugin
            # advertises is this one, and operators must read the same (a simulator test holds
            # it equal to the library's).
            remaining = {p.id: fit_count(p.placements, occupied) for p in profiles}
        except LibraryUnusable:
            raise
        except HydmiError as exc:
            errors.append(str(exc))
        cu_count = max((p.cu_count * p.gi_count_max for p in profiles), default=cu_attribute)
        return Card(
            index=index,
            pci=pci,
            slice_count=slice_count,
            cu_count=cu_count,
            memory_mib=memory_mib,
            profiles=profiles,
            healthy=not errors,
            error="; ".join(errors) or None,
            model=model,
            remaining=remaining,
            occupied=occupied,
        )

    def _check_pci(self, index: int, pci: str, errors: list[str]) -> None:
        """The registry's dev<N> must lead back to card N through the library."""
        try:
            by_pci = self.library.device_by_pci(pci)
            found = self.library.device_index(by_pci)
        except LibraryUnusable:
            raise
        except HydmiError as exc:
            errors.append(f"card {index} ({pci}) unreachable by PCI address: {exc}")
            return
        if found != index:
            errors.append(f"registry dev{index} names {pci}, which the library calls card {found}")

    def _profiles(
        self, index: int, device: ctypes.c_void_p, slice_count: int
    ) -> tuple[Profile, ...]:
        """Card ``index``'s profile table, swept once per Node (see ``_profile_tables``)."""
        key = (index, slice_count)
        if key not in self._profile_tables:
            self._profile_tables[key] = self._sweep_profiles(device, slice_count)
        return self._profile_tables[key]

    def _sweep_profiles(self, device: ctypes.c_void_p, slice_count: int) -> tuple[Profile, ...]:
        """Sweep widths 1..slice_count; a width the driver does not offer is a gap."""
        profiles: list[Profile] = []
        for width in range(1, slice_count + 1):
            try:
                info = self.library.gpu_instance_profile(device, width - 1)
            except HydmiError as exc:
                if classify(exc.code) == "absent":
                    continue
                raise
            placements = tuple(
                Placement(start, size)
                for start, size in self.library.possible_placements(device, info.id)
            )
            profiles.append(
                Profile(
                    id=info.id,
                    name=profile_name(info.name),
                    slices=info.gpu_slice_count,
                    cu_count=info.cu_count,
                    memory_mib=info.memory_size_MB,
                    gi_count_max=info.gi_count_max,
                    placements=placements,
                )
            )
        return tuple(profiles)

    def _gpu_instances(
        self, device: ctypes.c_void_p, profiles: tuple[Profile, ...]
    ) -> list[_LiveGpuInstance]:
        # The library filters GPU instances by profile id: ask once per profile.
        live: list[_LiveGpuInstance] = []
        for profile in profiles:
            for handle in self.library.gpu_instances(device, profile.id):
                info = self.library.gpu_instance_info(handle)
                live.append(_LiveGpuInstance(handle, info, profile))
        live.sort(key=lambda item: (item.info.placement.start, item.info.id))
        return live

    def _compute_profiles(
        self, gpu_instance: ctypes.c_void_p, slices: int
    ) -> list[ComputeInstanceProfileInfo]:
        found: list[ComputeInstanceProfileInfo] = []
        for index in range(max(slices, 1)):
            try:
                found.append(self.library.compute_instance_profile(gpu_instance, index))
            except HydmiError as exc:
                if classify(exc.code) == "absent":
                    continue
                raise
        return found

    def _whole_compute_profile(
        self, gpu_instance: ctypes.c_void_p, slices: int
    ) -> ComputeInstanceProfileInfo:
        candidates = self._compute_profiles(gpu_instance, slices)
        if not candidates:
            raise HydmiError(
                "nvmlGpuInstanceGetComputeInstanceProfileInfo", 3, "no compute profile offered"
            )
        return max(candidates, key=lambda info: (info.gpu_slice_count, info.cu_count))

    def _compute_instances(
        self, gpu_instance: ctypes.c_void_p, slices: int
    ) -> list[tuple[ctypes.c_void_p, int]]:
        """(handle, compute instance id) for every compute instance of any compute profile."""
        seen: set[int] = set()
        result: list[tuple[ctypes.c_void_p, int]] = []
        for compute_profile in self._compute_profiles(gpu_instance, slices):
            if compute_profile.id in seen:
                continue
            seen.add(compute_profile.id)
            for handle in self.library.compute_instances(gpu_instance, compute_profile.id):
                result.append((handle, self.library.compute_instance_info(handle).id))
        result.sort(key=lambda item: item[1])
        return result

    def instances(self, card_index: int | None = None) -> list[Instance]:
        """Live instances with uuids, one per compute instance (or per bare GPU instance)."""
        registry = read_registry(self.host_root)
        indices = [card_index] if card_index is not None else range(self.library.device_count())
        result: list[Instance] = []
        for index in indices:
            device = self.library.device_by_index(index)
            attributes = self.library.device_attributes(device)
            profiles = self._profiles(index, device, attributes.gpu_instance_slice_count)
            pci = registry.cards.get(index)
            for live in self._gpu_instances(device, profiles):
                placement = Placement(live.info.placement.start, live.info.placement.size)
                computes = self._compute_instances(live.handle, live.profile.slices)
                if not computes:
                    result.append(
                        Instance(
                            index,
                            pci,
                            live.info.id,
                            None,
                            live.profile,
                            placement,
                            None,
                            None,
                            None,
                        )
                    )
                for _handle, compute_id in computes:
                    conf = registry.conf_file(index, live.info.id, compute_id)
                    canonical = conf_path(index, live.info.id, compute_id)
                    result.append(
                        Instance(
                            card_index=index,
                            pci=pci,
                            gpu_instance_id=live.info.id,
                            compute_instance_id=compute_id,
                            profile=live.profile,
                            placement=placement,
                            uuid=conf.uuid if conf else None,
                            conf_path=canonical if conf else None,
                            conf_host_path=self.host_path(canonical) if conf else None,
                        )
                    )
        return result

    # Create and destroy
    def create(
        self,
        card_index: int,
        profile: Profile | int,
        placement: Span | int,
        checkpoint: Checkpoint | None = None,
    ) -> Instance:
        """GPU instance at the placement, its whole-GI compute instance, uuid from the conf file.

        ``profile`` is one of the card's ``Card.profiles`` and ``placement`` one of that
        profile's ``placements`` (or a profile id and a start slice). Either way they are
        compared by value with the card's profile table as this Node reads it: PlacementRefused,
        before the library is asked, when the card offers no such profile or the profile has no
        such legal placement (a free one is the caller's choice; the driver refuses an overlap).
        A failed compute-instance create destroys the GPU instance before the error propagates.
        ``checkpoint`` runs after ``gpu_instance_created`` and ``compute_instance_created``;
        an exception from it propagates without rollback (it stands for the caller dying).
        """
        lib = self.library
        device = lib.device_by_index(card_index)
        attributes = lib.device_attributes(device)
        profiles = self._profiles(card_index, device, attributes.gpu_instance_slice_count)
        profile, placement = _legal(card_index, profiles, profile, placement)
        gpu_instance = lib.create_gpu_instance(device, profile.id, placement.start, placement.size)
        try:
            gpu_instance_id = lib.gpu_instance_info(gpu_instance).id
        except HydmiError as exc:
            self._roll_back(gpu_instance, exc)
            raise
        _checkpoint(checkpoint, "gpu_instance_created")
        try:
            compute_profile = self._whole_compute_profile(gpu_instance, profile.slices)
            compute_instance = lib.create_compute_instance(gpu_instance, compute_profile.id)
        except HydmiError as exc:
            self._roll_back(gpu_instance, exc)
            raise
        try:
            compute_instance_id = lib.compute_instance_info(compute_instance).id
        except HydmiError as exc:
            self._roll_back(gpu_instance, exc, compute_instance)
            raise
        _checkpoint(checkpoint, "compute_instance_created")
        conf, findings = read_conf(self.host_root, card_index, gpu_instance_id, compute_instance_id)
        canonical = conf_path(card_index, gpu_instance_id, compute_instance_id)
        if conf is None or conf.uuid is None:
            detail = "; ".join(f.detail for f in findings) or "file missing"
            error = RegistryIncomplete(
                f"created GPU instance {gpu_instance_id} / compute instance "
                f"{compute_instance_id} on card {card_index}, but {canonical} gives no uuid "
                f"({detail}); the instance was destroyed again"
            )
            self._roll_back(gpu_instance, error, compute_instance)
            raise error
        return Instance(
            card_index=card_index,
            pci=read_registry(self.host_root).cards.get(card_index) or conf.pci,
            gpu_instance_id=gpu_instance_id,
            compute_instance_id=compute_instance_id,
            profile=profile,
            placement=placement,
            uuid=conf.uuid,
            conf_path=canonical,
            conf_host_path=self.host_path(canonical),
        )

    def _roll_back(
        self,
        gpu_instance: ctypes.c_void_p,
        cause: Exception,
        compute_instance: ctypes.c_void_p | None = None,
    ) -> None:
        try:
            if compute_instance is not None:
                self.library.destroy_compute_instance(compute_instance)
            self.library.destroy_gpu_instance(gpu_instance)
        except HydmiError as exc:
            cause.add_note(f"rolling back the GPU instance failed too: {exc}")

    def destroy(
        self,
        card_index: int,
        gpu_instance_id: int,
        expected_uuid: str | None = None,
        checkpoint: Checkpoint | None = None,
    ) -> None:
        """Every compute instance of the GPU instance, then the GPU instance itself.

        ``expected_uuid`` guards against a reused id: when no conf file of this GPU instance
        carries it, UuidMismatch is raised and nothing is destroyed. IN_USE raises
        InstanceInUse (retry later; never forced). ``checkpoint`` runs after each
        ``compute_instance_destroyed``.
        """
        lib = self.library
        device = lib.device_by_index(card_index)
        try:
            gpu_instance = lib.gpu_instance_by_id(device, gpu_instance_id)
            info = lib.gpu_instance_info(gpu_instance)
        except HydmiError as exc:
            if classify(exc.code) == "absent":
                raise InstanceNotFound(
                    f"card {card_index} has no GPU instance {gpu_instance_id} ({exc})"
                ) from exc
            raise
        if expected_uuid is not None:
            conf_files = read_registry(self.host_root).conf_files_for(card_index, gpu_instance_id)
            live = sorted({r.uuid for r in conf_files if r.uuid})
            if expected_uuid not in live:
                raise UuidMismatch(card_index, gpu_instance_id, expected_uuid, live)
        for handle, _compute_id in self._compute_instances(gpu_instance, info.placement.size):
            lib.destroy_compute_instance(handle)
            _checkpoint(checkpoint, "compute_instance_destroyed")
        lib.destroy_gpu_instance(gpu_instance)
