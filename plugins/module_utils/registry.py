# Copyright: hygon.dcu contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Reader for the driver's instance registry, ``/etc/dmi_mig_config``.

The registry is the only place that maps a library card index to a PCI address (``dev<N>``)
and the only place an instance's uuid exists (``ci/dev<N>gi<G>ci<C>.conf``). Anything odd in
it (directories left by a container runtime, unreadable files, strange names, links) is
reported as a finding: reading never raises, and every open is relative to a directory
descriptor with O_NOFOLLOW, so a link can never take the reader outside the registry.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Collection
from dataclasses import dataclass, field

from .hostpath import host_path

REGISTRY_PATH = "/etc/dmi_mig_config"
COMPUTE_DIR = "ci"
GPU_DIR = "gi"

_NUMBER = r"(0|[1-9][0-9]{0,5})"
CARD_FILE_NAME = re.compile(rf"dev{_NUMBER}")
CONF_FILE_NAME = re.compile(rf"dev{_NUMBER}gi{_NUMBER}ci{_NUMBER}\.conf")
PCI_ADDRESS = re.compile(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")
INSTANCE_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")

# Conf files are a dozen short lines; anything bigger is not one.
MAX_FILE_BYTES = 64 * 1024

_REGISTRY_DIRS = (REGISTRY_PATH, f"{REGISTRY_PATH}/{COMPUTE_DIR}", f"{REGISTRY_PATH}/{GPU_DIR}")
_GPU_KEYS = ("pci", "id", "profile_id", "cu_count", "memory_size_MB")
_COMPUTE_KEYS = ("pci", "gi_id", "id", "profile_id", "cu_count")
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
# O_NONBLOCK: a FIFO planted on a conf name must not hang the reader.
_FILE_FLAGS = (
    os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0)
)


@dataclass(frozen=True)
class Finding:
    """Something in the registry that is not a well-formed conf file.

    kind: ``poison`` (a directory on a ``ci/`` name), ``link``, ``unreadable``, ``bad_name``,
    ``not_a_file``, ``malformed`` (a conf file that does not parse or contradicts its name).
    """

    kind: str
    path: str  # canonical path
    detail: str


@dataclass(frozen=True)
class ConfFile:
    """One ``ci/dev<N>gi<G>ci<C>.conf`` file. Ids come from the (validated) name."""

    card_index: int
    gpu_instance_id: int
    compute_instance_id: int
    path: str  # canonical, e.g. /etc/dmi_mig_config/ci/dev0gi3ci0.conf
    host_path: str
    uuid: str | None
    pci: str | None = None
    gpu_profile_id: int | None = None
    compute_profile_id: int | None = None
    gpu_cu_count: int | None = None
    compute_cu_count: int | None = None
    memory_mib: int | None = None


@dataclass
class Registry:
    present: bool
    cards: dict[int, str] = field(default_factory=dict)  # library index -> PCI address
    gpu_instance_files: list[str] = field(default_factory=list)  # canonical paths
    conf_files: list[ConfFile] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)

    def conf_file(
        self, card_index: int, gpu_instance_id: int, compute_instance_id: int
    ) -> ConfFile | None:
        for entry in self.conf_files:
            key = (entry.card_index, entry.gpu_instance_id, entry.compute_instance_id)
            if key == (card_index, gpu_instance_id, compute_instance_id):
                return entry
        return None

    def conf_files_for(self, card_index: int, gpu_instance_id: int) -> list[ConfFile]:
        return [
            entry
            for entry in self.conf_files
            if (entry.card_index, entry.gpu_instance_id) == (card_index, gpu_instance_id)
        ]

    @property
    def poison(self) -> list[Finding]:
        return [finding for finding in self.findings if finding.kind == "poison"]

    def findings_for_card(self, card_index: int) -> list[Finding]:
        """Findings that may hide an instance of card ``card_index``: the registry's own
        directories (``/``, ``ci/``, ``gi/``) and ``ci/`` entries named for that card or for
        no card at all. ``gi/`` entries are not read for ownership, so they do not count."""
        compute_prefix = f"{REGISTRY_PATH}/{COMPUTE_DIR}/"
        return [
            finding
            for finding in self.findings
            if finding.path in _REGISTRY_DIRS
            or (
                finding.path.startswith(compute_prefix)
                and card_of(finding.path) in (card_index, None)
            )
        ]


@dataclass(frozen=True)
class ParsedConf:
    gpu: dict[str, str]
    compute: dict[str, str]
    uuid: str | None
    problems: tuple[str, ...]


def conf_name(card_index: int, gpu_instance_id: int, compute_instance_id: int) -> str:
    return f"dev{card_index}gi{gpu_instance_id}ci{compute_instance_id}.conf"


def conf_path(card_index: int, gpu_instance_id: int, compute_instance_id: int) -> str:
    name = conf_name(card_index, gpu_instance_id, compute_instance_id)
    return f"{REGISTRY_PATH}/{COMPUTE_DIR}/{name}"


def parse_conf_text(text: str) -> ParsedConf:
    """Split a conf file into its GPU-instance block, compute-instance block and uuid.

    Both blocks use ``key: value`` lines and share keys (``pci``, ``id``, ...), so the block is
    decided line by line: the compute block starts at ``gi_id`` or at the first key the GPU
    block already has.
    """
    gpu: dict[str, str] = {}
    compute: dict[str, str] = {}
    uuid: str | None = None
    problems: list[str] = []
    block = gpu
    for line in text.splitlines():
        key, separator, value = line.partition(":")
        if not separator:
            continue
        key, value = key.strip(), value.strip()
        if not key:
            continue
        if key == "mig_uuid":
            if uuid is not None:
                problems.append("mig_uuid appears twice")
            uuid = value
            continue
        if block is gpu and (key == "gi_id" or key in gpu):
            block = compute
        if key in block:
            problems.append(f"key {key!r} repeats in the compute-instance block")
            continue
        block[key] = value
    if uuid is None:
        problems.append("no mig_uuid line")
    elif not INSTANCE_UUID.fullmatch(uuid):
        problems.append(f"mig_uuid {uuid[:64]!r} is not a 36-character lowercase uuid")
        uuid = None
    for key in _GPU_KEYS:
        if key not in gpu:
            problems.append(f"GPU-instance block lacks {key!r}")
    for key in _COMPUTE_KEYS:
        if key not in compute:
            problems.append(f"compute-instance block lacks {key!r}")
    return ParsedConf(gpu, compute, uuid, tuple(problems))


def _int(value: str | None) -> int | None:
    if value is None or not value.isascii() or not value.isdigit():
        return None
    return int(value)


def _conf_file_from(
    name_match: re.Match[str], path: str, hostpath: str, parsed: ParsedConf
) -> tuple[ConfFile, list[str]]:
    card, gpu_id, compute_id = (int(group) for group in name_match.groups())
    problems = list(parsed.problems)
    pci = parsed.gpu.get("pci") or parsed.compute.get("pci")
    if pci is not None:
        pci = pci.lower()
        if not PCI_ADDRESS.fullmatch(pci):
            problems.append(f"pci {pci[:64]!r} is not a PCI address")
            pci = None
    checks = (
        ("GPU-instance id", parsed.gpu.get("id"), gpu_id),
        ("compute-instance gi_id", parsed.compute.get("gi_id"), gpu_id),
        ("compute-instance id", parsed.compute.get("id"), compute_id),
    )
    for label, raw, expected in checks:
        value = _int(raw)
        if raw is not None and value != expected:
            problems.append(f"{label} {raw[:32]!r} contradicts the file name")
    conf_file = ConfFile(
        card_index=card,
        gpu_instance_id=gpu_id,
        compute_instance_id=compute_id,
        path=path,
        host_path=hostpath,
        uuid=parsed.uuid,
        pci=pci,
        gpu_profile_id=_int(parsed.gpu.get("profile_id")),
        compute_profile_id=_int(parsed.compute.get("profile_id")),
        gpu_cu_count=_int(parsed.gpu.get("cu_count")),
        compute_cu_count=_int(parsed.compute.get("cu_count")),
        memory_mib=_int(parsed.gpu.get("memory_size_MB")),
    )
    return conf_file, problems


def read_file_at(directory_fd: int, name: str) -> bytes:
    """Read a regular file relative to an open directory without following links."""
    fd = os.open(name, _FILE_FLAGS, dir_fd=directory_fd)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        chunks: list[bytes] = []
        size = 0
        while size <= MAX_FILE_BYTES:
            chunk = os.read(fd, MAX_FILE_BYTES + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > MAX_FILE_BYTES:
            raise OSError(errno.EFBIG, f"larger than {MAX_FILE_BYTES} bytes")
        return b"".join(chunks)
    finally:
        os.close(fd)


def open_dir(path: str, at: int | None = None) -> int:
    return os.open(path, _DIR_FLAGS, dir_fd=at)


def _describe(exc: OSError) -> str:
    return exc.strerror or str(exc)


def _dir_failure_kind(name: str, at: int | None = None) -> str:
    """Why a directory open failed: O_NOFOLLOW on a link answers ELOOP or ENOTDIR."""
    try:
        return "link" if stat.S_ISLNK(os.lstat(name, dir_fd=at).st_mode) else "unreadable"
    except OSError:
        return "unreadable"


class _Reader:
    def __init__(self, host_root: str) -> None:
        self.host_root = host_root
        self.root = host_path(host_root, REGISTRY_PATH)
        self.registry = Registry(present=False)

    def finding(self, kind: str, canonical: str, detail: str) -> None:
        self.registry.findings.append(Finding(kind, canonical, detail))

    def read(self) -> Registry:
        try:
            root_fd = open_dir(self.root)
        except FileNotFoundError:
            return self.registry
        except OSError as exc:
            self.finding(_dir_failure_kind(self.root), REGISTRY_PATH, _describe(exc))
            return self.registry
        self.registry.present = True
        try:
            self._read_top(root_fd)
        finally:
            os.close(root_fd)
        return self.registry

    def _entries(self, directory_fd: int, canonical: str) -> list[os.DirEntry[str]]:
        try:
            with os.scandir(directory_fd) as iterator:
                return sorted(iterator, key=lambda entry: entry.name)
        except OSError as exc:
            self.finding("unreadable", canonical, _describe(exc))
            return []

    def _read_top(self, root_fd: int) -> None:
        for entry in self._entries(root_fd, REGISTRY_PATH):
            canonical = f"{REGISTRY_PATH}/{entry.name}"
            if entry.name in (COMPUTE_DIR, GPU_DIR):
                self._read_subdir(root_fd, entry, canonical)
                continue
            if not entry.name.startswith("dev"):
                continue  # the driver may keep other files here; they are not ours to judge
            match = CARD_FILE_NAME.fullmatch(entry.name)
            if match is None:
                self.finding("bad_name", canonical, "expected dev<N>")
                continue
            if entry.is_symlink():
                self.finding("link", canonical, "dev<N> is a link; not followed")
                continue
            try:
                raw = read_file_at(root_fd, entry.name)
            except OSError as exc:
                self.finding("unreadable", canonical, _describe(exc))
                continue
            lines = raw.decode("utf-8", errors="replace").strip().splitlines()
            pci = lines[0].strip().lower() if lines else ""
            if not PCI_ADDRESS.fullmatch(pci):
                detail = f"first line {pci[:64]!r} is not a PCI address"
                self.finding("malformed", canonical, detail)
                continue
            self.registry.cards[int(match.group(1))] = pci

    def _read_subdir(self, root_fd: int, entry: os.DirEntry[str], canonical: str) -> None:
        if entry.is_symlink():
            self.finding("link", canonical, "registry subdirectory is a link; not followed")
            return
        try:
            directory_fd = open_dir(entry.name, root_fd)
        except OSError as exc:
            self.finding(_dir_failure_kind(entry.name, root_fd), canonical, _describe(exc))
            return
        try:
            if entry.name == COMPUTE_DIR:
                self._read_compute_dir(directory_fd, canonical)
            else:
                self._read_gpu_dir(directory_fd, canonical)
        finally:
            os.close(directory_fd)

    def _read_gpu_dir(self, directory_fd: int, canonical_dir: str) -> None:
        for entry in self._entries(directory_fd, canonical_dir):
            canonical = f"{canonical_dir}/{entry.name}"
            if entry.is_symlink():
                self.finding("link", canonical, "not followed")
            elif entry.is_dir(follow_symlinks=False):
                self.finding("not_a_file", canonical, "a directory in gi/")
            else:
                self.registry.gpu_instance_files.append(canonical)

    def _read_compute_dir(self, directory_fd: int, canonical_dir: str) -> None:
        for entry in self._entries(directory_fd, canonical_dir):
            canonical = f"{canonical_dir}/{entry.name}"
            finding = classify_compute_entry(entry)
            if finding is not None:
                self.finding(finding[0], canonical, finding[1])
                continue
            self._read_conf(directory_fd, entry.name, canonical)

    def _read_conf(self, directory_fd: int, name: str, canonical: str) -> None:
        match = CONF_FILE_NAME.fullmatch(name)
        if match is None:
            return
        try:
            raw = read_file_at(directory_fd, name)
        except OSError as exc:
            self.finding("unreadable", canonical, _describe(exc))
            return
        parsed = parse_conf_text(raw.decode("utf-8", errors="replace"))
        conf_file, problems = _conf_file_from(
            match, canonical, host_path(self.host_root, canonical), parsed
        )
        self.registry.conf_files.append(conf_file)
        if problems:
            self.finding("malformed", canonical, "; ".join(problems[:5]))


def classify_compute_entry(entry: os.DirEntry[str]) -> tuple[str, str] | None:
    """A finding (kind, detail) for a ``ci/`` entry that cannot be a conf file, else None."""
    if entry.is_symlink():
        return ("link", "not followed")
    if entry.is_dir(follow_symlinks=False):
        return ("poison", "a directory on a ci/ name blocks every later create of that id")
    if CONF_FILE_NAME.fullmatch(entry.name) is None:
        return ("bad_name", "expected dev<N>gi<G>ci<C>.conf")
    if not entry.is_file(follow_symlinks=False):
        return ("not_a_file", "not a regular file")
    return None


def card_of(name: str) -> int | None:
    """The card index in a ``dev<N>gi<G>ci<C>.conf`` name, else None."""
    match = CONF_FILE_NAME.fullmatch(name.rsplit("/", 1)[-1])
    return int(match.group(1)) if match else None


def read_registry(host_root: str = "/") -> Registry:
    """Everything the registry holds; never raises for what it finds inside."""
    return _Reader(host_root).read()


def read_conf(
    host_root: str, card_index: int, gpu_instance_id: int, compute_instance_id: int
) -> tuple[ConfFile | None, list[Finding]]:
    """One conf file, read the same way as by read_registry."""
    registry = read_registry(host_root)
    conf_file = registry.conf_file(card_index, gpu_instance_id, compute_instance_id)
    wanted = conf_path(card_index, gpu_instance_id, compute_instance_id)
    findings = [finding for finding in registry.findings if finding.path == wanted]
    return conf_file, findings


@dataclass
class SweepResult:
    swept: list[str] = field(default_factory=list)  # canonical paths removed (or to remove)
    kept: list[Finding] = field(default_factory=list)  # directories that could not go


def sweep_poison(
    host_root: str = "/", dry_run: bool = False, cards: Collection[int] | None = None
) -> SweepResult:
    """Remove directories from ``ci/``: rmdir semantics, empty ones only, never recursive.

    With ``dry_run`` nothing is removed; the result names what a real sweep would remove.
    With ``cards``, only directories named for those cards (``dev<N>...``) are touched.
    """
    result = SweepResult()
    canonical_dir = f"{REGISTRY_PATH}/{COMPUTE_DIR}"
    try:
        root_fd = open_dir(host_path(host_root, REGISTRY_PATH))
    except OSError:
        return result
    try:
        try:
            directory_fd = open_dir(COMPUTE_DIR, root_fd)
        except OSError:
            return result
        try:
            with os.scandir(directory_fd) as iterator:
                entries = sorted(iterator, key=lambda entry: entry.name)
            for entry in entries:
                if entry.is_symlink() or not entry.is_dir(follow_symlinks=False):
                    continue
                if cards is not None and card_of(entry.name) not in cards:
                    continue
                canonical = f"{canonical_dir}/{entry.name}"
                _sweep_one(directory_fd, entry.name, canonical, dry_run, result)
        except OSError as exc:
            result.kept.append(Finding("unreadable", canonical_dir, _describe(exc)))
        finally:
            os.close(directory_fd)
    finally:
        os.close(root_fd)
    return result


def _sweep_one(
    directory_fd: int, name: str, canonical: str, dry_run: bool, result: SweepResult
) -> None:
    if dry_run:
        try:
            inner = open_dir(name, directory_fd)
        except OSError as exc:
            result.kept.append(Finding("poison", canonical, _describe(exc)))
            return
        try:
            with os.scandir(inner) as iterator:
                empty = next(iterator, None) is None
        finally:
            os.close(inner)
        if empty:
            result.swept.append(canonical)
        else:
            result.kept.append(Finding("poison", canonical, "directory is not empty; left alone"))
        return
    try:
        os.rmdir(name, dir_fd=directory_fd)
    except FileNotFoundError:
        return
    except OSError as exc:
        detail = (
            "directory is not empty; left alone" if exc.errno == errno.ENOTEMPTY else _describe(exc)
        )
        result.kept.append(Finding("poison", canonical, detail))
        return
    result.swept.append(canonical)
