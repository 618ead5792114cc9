"""Partition grants: which pod's container owns which live instance.

One JSON file per instance, written atomically (temp file, fsync, rename, fsync of the
directory) BEFORE Allocate answers, so a crash at any instant leaves either no grant (the
instance is an orphan, collected under the card lock) or a complete one. Files are 0600 in a
0700 directory. A file that cannot be read or parsed is reported, never treated as absent.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field

SCHEMA = 1
SUFFIX = ".json"
TEMP_SUFFIX = ".tmp"


class GrantError(Exception):
    """The grants directory cannot be used safely."""


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
        data = asdict(self)
        data["containers"] = list(self.containers)
        data["device_ids"] = list(self.device_ids)
        return json.dumps(data, sort_keys=True, indent=1) + "\n"

    @classmethod
    def from_json(cls, text: str) -> Grant:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        if data.get("schema") != SCHEMA:
            raise ValueError(f"unknown schema {data.get('schema')!r} (this plugin reads {SCHEMA})")
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
    unreadable: list[tuple[str, str]] = field(default_factory=list)  # (path, why)

    def __iter__(self) -> Iterator[Grant]:
        return iter(self.grants)


class GrantStore:
    def __init__(self, directory: str) -> None:
        self.directory = directory

    def ensure(self) -> None:
        os.makedirs(self.directory, mode=0o700, exist_ok=True)
        info = os.lstat(self.directory)
        if not stat.S_ISDIR(info.st_mode):
            raise GrantError(f"grants path {self.directory} is not a directory")
        if stat.S_IMODE(info.st_mode) != 0o700:
            os.chmod(self.directory, 0o700)

    def _path(self, name: str) -> str:
        return os.path.join(self.directory, name)

    def write(self, grant: Grant) -> None:
        self.ensure()
        final = self._path(grant.file_name)
        temp = final + TEMP_SUFFIX
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        try:
            os.fchmod(fd, 0o600)
            os.write(fd, grant.to_json().encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, final)
        self._sync_dir()

    def remove(self, grant: Grant) -> None:
        try:
            os.unlink(self._path(grant.file_name))
        except FileNotFoundError:
            return
        self._sync_dir()

    def _sync_dir(self) -> None:
        fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def remove_temporaries(self) -> list[str]:
        """Delete temp files a killed writer left. Only at start, before any writer runs."""
        removed = []
        if os.path.isdir(self.directory):
            for name in os.listdir(self.directory):
                if name.endswith(TEMP_SUFFIX):
                    os.unlink(self._path(name))
                    removed.append(name)
        return removed

    def load(self) -> GrantSet:
        result = GrantSet()
        if not os.path.isdir(self.directory):
            return result
        for name in sorted(os.listdir(self.directory)):
            path = self._path(name)
            if name.endswith(TEMP_SUFFIX):
                # Not renamed into place (yet), so not a grant; see remove_temporaries.
                continue
            if not name.endswith(SUFFIX):
                result.unreadable.append((path, "not a grant file name (expected <uuid>.json)"))
                continue
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
                with os.fdopen(fd, encoding="utf-8") as handle:
                    grant = Grant.from_json(handle.read())
            except (OSError, ValueError, TypeError, KeyError) as exc:
                result.unreadable.append((path, f"{type(exc).__name__}: {exc}"))
                continue
            if grant.file_name != name:
                result.unreadable.append((path, f"names uuid {grant.uuid}, not its file name"))
                continue
            result.grants.append(grant)
        return result
