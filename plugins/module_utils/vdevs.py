# Copyright: hygon.dcu contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""A node's logical slices (the vendor's virtual devices, "vdevs"): which are live, the conf
file the driver wrote for each, and one create or destroy at a time.

The library is the truth of what is live; a conf file is what a container is given. A create
answers no id, so the new vdev is what is live after it and was not before: callers serialise
creates on a node (docs/dev/hardware.md, "Logical slices"). Anything this cannot be sure of
raises: nothing here destroys what it did not identify.
"""

from __future__ import annotations

import errno
import os
import re
from dataclasses import dataclass, replace

from .dmi import DmiLibrary, VdevGone
from .hostpath import host_path
from .registry import PCI_ADDRESS, open_dir, read_file_at

VDEV_DIR = "/etc/vdev"
CONF_FILE_NAME = re.compile(r"vdev(0|[1-9][0-9]{0,3})\.conf")
# The conf's lines, in the driver's order: two 64-bit CU mask words, low word first.
CONF_KEYS = (
    "PciBusId",
    "cu_mask",
    "cu_mask",
    "cu_count",
    "mem",
    "device_id",
    "vdev_id",
    "pipe_id",
    "enable",
)
_MASK = re.compile(r"0x[0-9a-fA-F]{16}")
_NUMBER = re.compile(r"0|[1-9][0-9]{0,9}")
_MEMORY = re.compile(r"(0|[1-9][0-9]{0,9}) MiB")
MIB = 1024 * 1024


class VdevError(Exception):
    """What the node says of its vdevs cannot be trusted; nothing was changed because of it."""


@dataclass(frozen=True)
class VdevConf:
    pci: str
    cu_mask: int  # bit i: compute unit i of the card
    compute_units: int
    memory_mib: int
    card: int
    vdev_id: int
    pipe_id: int
    enabled: bool


@dataclass(frozen=True)
class Vdev:
    id: int
    card: int
    compute_units: int
    memory_mib: int
    conf_path: str  # canonical: /etc/vdev/vdev<N>.conf
    conf: VdevConf | None  # None with conf_problem when the file is missing or wrong
    conf_problem: str | None = None


@dataclass(frozen=True)
class VdevCard:
    """A card as the virtual-device library sees it: its whole compute units and memory."""

    index: int
    compute_units: int
    memory_mib: int


@dataclass(frozen=True)
class VdevReading:
    vdevs: list[Vdev]
    # Conf files of no live vdev (a create that died half-way, a destroy that left one).
    stray_confs: list[str]
    # Every conf file present, live or stray.
    conf_paths: list[str]


def conf_path(vdev_id: int) -> str:
    return f"{VDEV_DIR}/vdev{vdev_id}.conf"


def parse_vdev_conf(text: str) -> VdevConf:
    """The driver's conf, exactly its nine lines in order; ValueError says what is wrong."""
    lines = text.splitlines()
    if len(lines) != len(CONF_KEYS):
        raise ValueError(f"{len(lines)} lines, not {len(CONF_KEYS)}")
    values: list[str] = []
    for number, key in enumerate(CONF_KEYS, start=1):
        name, separator, value = lines[number - 1].partition(": ")
        if not separator or name != key:
            raise ValueError(f"line {number} is not '{key}: ...'")
        values.append(value)
    pci, low, high, count, memory, card, vdev_id, pipe, enable = values
    if not PCI_ADDRESS.fullmatch(pci.lower()):
        raise ValueError(f"PciBusId {pci[:32]!r} is not a PCI address")
    if not (_MASK.fullmatch(low) and _MASK.fullmatch(high)):
        raise ValueError("cu_mask is not two 16-digit hex words")
    mask = int(low, 16) | int(high, 16) << 64
    numbers = {"cu_count": count, "device_id": card, "vdev_id": vdev_id, "pipe_id": pipe}
    for key, raw in numbers.items():
        if not _NUMBER.fullmatch(raw):
            raise ValueError(f"{key} {raw[:32]!r} is not a number")
    size = _MEMORY.fullmatch(memory)
    if size is None:
        raise ValueError(f"mem {memory[:32]!r} is not '<n> MiB'")
    if enable not in ("0", "1"):
        raise ValueError(f"enable {enable[:32]!r} is not 0 or 1")
    bits = bin(mask).count("1")  # int.bit_count() is 3.10+
    if bits != int(count) or int(count) == 0:
        raise ValueError(f"cu_mask holds {bits} compute units, cu_count says {count}")
    return VdevConf(
        pci=pci.lower(),
        cu_mask=mask,
        compute_units=int(count),
        memory_mib=int(size.group(1)),
        card=int(card),
        vdev_id=int(vdev_id),
        pipe_id=int(pipe),
        enabled=enable == "1",
    )


class Vdevs:
    """The vdevs of the node under ``host_root``, through the vendor's library."""

    def __init__(self, host_root: str = "/", library_path: str | None = None) -> None:
        self.host_root = host_root
        self.library = DmiLibrary(host_root, library_path)

    def read(self) -> VdevReading:
        """Every live vdev with its conf file. Raises DmiError when the library cannot answer
        and VdevError when its answers disagree (a count that its ids do not add up to)."""
        cards = self.library.device_count()
        per_card = self.library.max_vdevs_per_card()
        expected = self.library.vdev_count()
        confs = self._conf_files()
        present = sorted(conf_path(vdev_id) for vdev_id in confs)
        vdevs: list[Vdev] = []
        for vdev_id in range(cards * per_card):
            try:
                info = self.library.vdev_info(vdev_id)
            except VdevGone:
                continue
            live = Vdev(
                id=vdev_id,
                card=int(info.device_id),
                compute_units=int(info.compute_unit_count),
                memory_mib=int(info.global_mem_size) // MIB,
                conf_path=conf_path(vdev_id),
                conf=None,
            )
            conf, problem = _conf_or_problem(confs.pop(vdev_id, None), live)
            vdevs.append(replace(live, conf=conf, conf_problem=problem))
        if len(vdevs) != expected:
            raise VdevError(
                f"the library counts {expected} vdevs but ids 0..{cards * per_card - 1} hold "
                f"{len(vdevs)}; not acting on a partial view"
            )
        return VdevReading(vdevs, sorted(conf_path(vdev_id) for vdev_id in confs), present)

    def cards(self) -> list[VdevCard]:
        """Every card's compute units and memory (DmiError when the library cannot answer)."""
        found = []
        for index in range(self.library.device_count()):
            info = self.library.device_info(index)
            found.append(
                VdevCard(index, int(info.compute_unit_count), int(info.global_mem_size) // MIB)
            )
        return found

    def per_card(self) -> int:
        """How many vdevs a card may hold."""
        return self.library.max_vdevs_per_card()

    def create(self, card: int, compute_units: int, memory_mib: int) -> Vdev:
        """One vdev on ``card``, found by what is live after and not before. The caller holds
        the node's create lock. VdevError when the new vdev cannot be told apart."""
        before = {vdev.id for vdev in self.read().vdevs}
        self.library.create_vdev(card, compute_units, memory_mib)
        made = [vdev for vdev in self.read().vdevs if vdev.id not in before]
        if len(made) != 1:
            raise VdevError(
                f"after one create on card {card}, {len(made)} vdevs are new "
                f"({', '.join(str(vdev.id) for vdev in made) or 'none'}); another writer?"
            )
        vdev = made[0]
        if (vdev.card, vdev.compute_units, vdev.memory_mib) != (card, compute_units, memory_mib):
            raise VdevError(
                f"the new vdev {vdev.id} is card {vdev.card}, {vdev.compute_units} CUs, "
                f"{vdev.memory_mib} MiB; asked card {card}, {compute_units} CUs, {memory_mib} MiB"
            )
        return vdev

    def destroy(self, vdev_id: int) -> None:
        """VdevBusy while a process uses it; VdevGone when it is not live."""
        self.library.destroy_vdev(vdev_id)

    def conf_paths(self) -> list[str]:
        """The driver's conf files present, listed without the library (and not read)."""
        return sorted(conf_path(vdev_id) for vdev_id in self._conf_files(read=False))

    def _conf_files(self, read: bool = True) -> dict[int, bytes | OSError | None]:
        """The driver's conf files by vdev id: the bytes, or why they could not be read (None
        when not ``read``). VdevError when the directory cannot be listed."""
        try:
            directory = open_dir(host_path(self.host_root, VDEV_DIR))
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise VdevError(f"cannot read {VDEV_DIR}: {exc.strerror}") from exc
        try:
            found: dict[int, bytes | OSError | None] = {}
            for name in os.listdir(directory):
                match = CONF_FILE_NAME.fullmatch(name)
                if match is None:
                    continue
                vdev_id = int(match.group(1))
                found[vdev_id] = None
                if read:
                    try:
                        found[vdev_id] = read_file_at(directory, name)
                    except OSError as exc:
                        found[vdev_id] = exc
            return found
        finally:
            os.close(directory)


def _conf_or_problem(raw: bytes | OSError | None, live: Vdev) -> tuple[VdevConf | None, str | None]:
    """The conf of a live vdev, or why it cannot be given to a container."""
    vdev_id = live.id
    if raw is None:
        return None, f"{conf_path(vdev_id)} is missing"
    if isinstance(raw, OSError):
        why = "a link" if raw.errno == errno.ELOOP else raw.strerror
        return None, f"{conf_path(vdev_id)} cannot be read: {why}"
    try:
        conf = parse_vdev_conf(raw.decode("ascii"))
    except (UnicodeDecodeError, ValueError) as exc:
        return None, f"{conf_path(vdev_id)} is malformed: {exc}"
    said = (conf.vdev_id, conf.card, conf.compute_units, conf.memory_mib)
    if said != (vdev_id, live.card, live.compute_units, live.memory_mib):
        return None, (
            f"{conf_path(vdev_id)} says vdev {conf.vdev_id}, card {conf.card}, "
            f"{conf.compute_units} CUs, {conf.memory_mib} MiB; the library says vdev {vdev_id}, "
            f"card {live.card}, {live.compute_units} CUs, {live.memory_mib} MiB"
        )
    return conf, None
