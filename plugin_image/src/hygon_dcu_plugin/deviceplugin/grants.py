"""Partition grants: which pod's container owns which live instance; and the store that holds
them and the slice grants (``slice_grants.py``).

One JSON file per instance, written atomically (temp file, fsync, rename, fsync of the
directory) BEFORE Allocate answers, so a crash at any instant leaves either no grant (the
instance is an orphan, collected under the card lock) or a complete one. Files are 0600 in a
0700 directory. A file that cannot be read or parsed is reported, never treated as absent.

The directory itself is trusted only while it is a real directory (never a link) holding the
store's MARK. ``load`` reports why it is not (with no grants unless it is a directory),
``write`` refuses anything but a directory, and nothing here creates or marks it on its own:
``create`` and ``mark`` are the reclaimer's decision (docs/dev/runtime.md).
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import StrEnum

from ansible_collections.hygon.dcu.plugins.module_utils.registry import read_file_at

from hygon_dcu_plugin.deviceplugin import grant_json
from hygon_dcu_plugin.deviceplugin.slice_grants import SLICE_FILE_NAME, SliceGrant

SCHEMA = 1
SUFFIX = ".json"
TEMP_SUFFIX = ".tmp"
# The store's mark, written only when no live partition can lack its grant (a new store on a
# node with none live, or one whose grants name every live partition): without it the
# directory may have been emptied, recreated or swapped, and its silence proves nothing.
MARK = "complete"
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class GrantError(Exception):
    """The grants directory cannot be used safely."""


class StoreFault(StrEnum):
    """Why the grants store cannot be trusted (docs/dev/runtime.md, "The plugin's own state")."""

    MISSING = "missing"
    LINK = "link"
    NOT_A_DIRECTORY = "not_a_directory"
    UNREADABLE = "unreadable"
    UNMARKED = "unmarked"  # a directory without MARK: nothing says it holds every grant


# The plugin may start (MISSING) or accept (UNMARKED) a store itself, but only when no live
# partition can be missing its grant; the other faults need the operator.
STARTABLE = frozenset({StoreFault.MISSING, StoreFault.UNMARKED})


@dataclass(frozen=True)
class StoreProblem:
    fault: StoreFault
    detail: str  # what was seen, naming the path
    directory: str

    def explain(self, why_not_started: str | None = None) -> str:
        """What was seen, what the plugin holds back, and what the operator does: one line."""
        seen = self.detail if why_not_started is None else f"{self.detail}; {why_not_started}"
        return (
            f"{seen}. No orphan is collected and Allocate refuses until this is fixed: "
            f"{self._fix()}"
        )

    def _fix(self) -> str:
        where = self.directory
        restore = {
            StoreFault.LINK: f"the plugin never follows a link there; put the real directory "
            f"at {where} (or set grants_dir to it)",
            StoreFault.NOT_A_DIRECTORY: f"move it aside and put this node's grants directory "
            f"back at {where}",
            StoreFault.UNREADABLE: f"give {where} back to root (mode 0700)",
        }.get(
            self.fault,
            f"if this node's grants directory still exists elsewhere, put it back at {where} "
            "(or set grants_dir back to it)",
        )
        return (
            f"{restore}. If the grants are lost, delete the pods that use partitions on this "
            "node and destroy their instances with hy-smi (with none left the plugin starts "
            "a new store itself), or, once no pod on this node uses a partition, create "
            f"{os.path.join(where, MARK)} in a 0700 directory to have every instance no "
            "grant names collected"
        )


@dataclass(frozen=True)
class Grant:
    uuid: str
    card_pci: str
    card_index: int
    gpu_instance_id: int
    compute_instance_id: int
    profile: str
    placement_start: int
    placement_size: int
    conf_path: str
    namespace: str
    pod_name: str
    pod_uid: str
    containers: tuple[str, ...]
    device_ids: tuple[str, ...]
    created_at: float
    schema: int = SCHEMA

    @property
    def file_name(self) -> str:
        return self.uuid + SUFFIX

    @property
    def pod_key(self) -> str:
        return f"{self.namespace}/{self.pod_name}"

    def owns(self, card_pci: str, gpu_instance_id: int, uuid: str | None) -> bool:
        return (self.card_pci, self.gpu_instance_id, self.uuid) == (
            card_pci,
            gpu_instance_id,
            uuid,
        )

    def to_json(self) -> str:
        return grant_json.dump(self)

    @classmethod
    def from_json(cls, text: str) -> Grant:
        data = grant_json.load(text, SCHEMA)
        data["containers"] = tuple(str(c) for c in data["containers"])
        data["device_ids"] = tuple(str(d) for d in data["device_ids"])
        grant = cls(**data)
        for name, kind in (
            ("uuid", str),
            ("card_pci", str),
            ("gpu_instance_id", int),
            ("card_index", int),
            ("namespace", str),
            ("pod_uid", str),
        ):
            if not isinstance(getattr(grant, name), kind):
                raise ValueError(f"field {name} is not a {kind.__name__}")
        return grant


@dataclass
class GrantSet:
    grants: list[Grant] = field(default_factory=list)
    slices: list[SliceGrant] = field(default_factory=list)
    unreadable: list[tuple[str, str]] = field(default_factory=list)  # (path, why)
    problem: StoreProblem | None = None  # set: the grants (if any) may not be all of them

    def __iter__(self) -> Iterator[Grant]:
        return iter(self.grants)


class GrantStore:
    def __init__(self, directory: str) -> None:
        self.directory = directory

    # the directory ----------------------------------------------------------------------
    def _open(self) -> int | StoreProblem:
        """The directory, opened without following a link, or why it cannot be."""
        try:
            return os.open(self.directory, _DIR_FLAGS)
        except OSError as exc:
            return self._why_not_open(exc)

    def _why_not_open(self, exc: OSError) -> StoreProblem:
        where = self.directory
        try:
            info = os.lstat(where)
        except FileNotFoundError:
            return StoreProblem(StoreFault.MISSING, f"grants directory {where} is missing", where)
        except OSError:
            info = None
        if info is not None and stat.S_ISLNK(info.st_mode):
            try:
                target = f" (to {os.readlink(where)})"
            except OSError:
                target = ""
            return StoreProblem(
                StoreFault.LINK, f"grants directory {where} is a link{target}", where
            )
        if info is not None and not stat.S_ISDIR(info.st_mode):
            return StoreProblem(
                StoreFault.NOT_A_DIRECTORY, f"grants path {where} is not a directory", where
            )
        why = exc.strerror or str(exc)
        return StoreProblem(
            StoreFault.UNREADABLE, f"grants directory {where} cannot be read ({why})", where
        )

    def _unmarked(self, fd: int) -> StoreProblem | None:
        try:
            info = os.stat(MARK, dir_fd=fd, follow_symlinks=False)
        except OSError:
            info = None
        if info is not None and stat.S_ISREG(info.st_mode):
            return None
        return StoreProblem(
            StoreFault.UNMARKED,
            f"grants directory {self.directory} has no {MARK} file, so it may lack grants of "
            "live partitions (state directory cleaned or replaced, or grants_dir changed)",
            self.directory,
        )

    def check(self) -> StoreProblem | None:
        """Why the store cannot be trusted to hold every grant now, or None."""
        fd = self._open()
        if isinstance(fd, StoreProblem):
            return fd
        try:
            return self._unmarked(fd)
        finally:
            os.close(fd)

    def create(self, why: str) -> None:
        """A new, marked store. Only for the caller that knows no live partition lacks a grant."""
        parent = os.path.dirname(os.path.normpath(self.directory))
        if parent:
            os.makedirs(parent, exist_ok=True)
        os.mkdir(self.directory, 0o700)
        self.mark(why)

    def mark(self, why: str) -> None:
        """Mark the store as holding every grant (see MARK; the caller decides that)."""
        text = (
            f"The hygon.dcu device plugin holds a grant here for every partition it granted "
            f"on this node since {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} ({why}). "
            "Without this file it collects no orphans and refuses Allocate (docs/image.md).\n"
        )
        self._write_file(MARK, text)

    # grants -----------------------------------------------------------------------------
    def _opened(self) -> int:
        fd = self._open()
        if isinstance(fd, StoreProblem):
            raise GrantError(fd.detail)
        return fd

    def _write_file(self, name: str, text: str) -> None:
        fd = self._opened()
        try:
            if stat.S_IMODE(os.fstat(fd).st_mode) != 0o700:
                os.fchmod(fd, 0o700)
            temp = name + TEMP_SUFFIX
            flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
            out = os.open(temp, flags, 0o600, dir_fd=fd)
            try:
                os.fchmod(out, 0o600)
                os.write(out, text.encode())
                os.fsync(out)
            finally:
                os.close(out)
            os.replace(temp, name, src_dir_fd=fd, dst_dir_fd=fd)
            os.fsync(fd)
        finally:
            os.close(fd)

    def write(self, grant: Grant | SliceGrant) -> None:
        """Write (or replace) a grant; GrantError when the directory is missing, a link or not
        a directory (it is never created here)."""
        self._write_file(grant.file_name, grant.to_json())

    def remove(self, grant: Grant | SliceGrant) -> None:
        fd = self._opened()
        try:
            os.unlink(grant.file_name, dir_fd=fd)
            os.fsync(fd)
        except FileNotFoundError:
            return
        finally:
            os.close(fd)

    def remove_temporaries(self) -> list[str]:
        """Delete temp files a killed writer left. Only at start, before any writer runs."""
        fd = self._open()
        if isinstance(fd, StoreProblem):
            return []
        try:
            removed = sorted(n for n in os.listdir(fd) if n.endswith(TEMP_SUFFIX))
            for name in removed:
                os.unlink(name, dir_fd=fd)
            return removed
        finally:
            os.close(fd)

    def load(self) -> GrantSet:
        fd = self._open()
        if isinstance(fd, StoreProblem):
            return GrantSet(problem=fd)
        try:
            result = GrantSet(problem=self._unmarked(fd))
            for name in sorted(os.listdir(fd)):
                self._load_one(fd, name, result)
            return result
        finally:
            os.close(fd)

    def _load_one(self, fd: int, name: str, result: GrantSet) -> None:
        path = os.path.join(self.directory, name)
        if name == MARK or name.endswith(TEMP_SUFFIX):
            # A temp file is not renamed into place (yet), so not a grant; see
            # remove_temporaries.
            return
        if not name.endswith(SUFFIX):
            result.unreadable.append(
                (path, "not a grant file name (expected <uuid>.json or vdev<N>.json)")
            )
            return
        kind = SliceGrant if SLICE_FILE_NAME.fullmatch(name) else Grant
        try:
            # A regular file only (a FIFO would block the pass), no link, bounded.
            grant = kind.from_json(read_file_at(fd, name).decode("utf-8"))
        except (OSError, ValueError, TypeError, KeyError) as exc:
            result.unreadable.append((path, f"{type(exc).__name__}: {exc}"))
            return
        if grant.file_name != name:
            what = (
                f"vdev {grant.vdev_id}" if isinstance(grant, SliceGrant) else f"uuid {grant.uuid}"
            )
            result.unreadable.append((path, f"names {what}, not its file name"))
            return
        if isinstance(grant, SliceGrant):
            result.slices.append(grant)
        else:
            result.grants.append(grant)
