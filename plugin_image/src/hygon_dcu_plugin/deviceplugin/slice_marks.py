"""Attribution marks: the file the vendor's exporter reads to label a slice's metrics with its
pod, ``/etc/vdev/dynamic/<pod uid>_<container>_<card index>_<vdev id>`` (docs/dev/hardware.md,
"Logical slices"). Written after the slice grant and before Allocate answers; removed after
the slice is destroyed. A mark is a courtesy to that exporter: the grant, not the mark, says
whose a slice is, so a mark that cannot be written refuses the Allocate (the exporter would
show the slice as nobody's) and one that cannot be removed is logged and retried.

Every part of the name is checked before it becomes a file name, and the directory is opened
without following a link: the plugin writes there as root.
"""

from __future__ import annotations

import os
import re
import stat
import time

from ansible_collections.hygon.dcu.plugins.module_utils.hostpath import host_path

MARK_DIR = "/etc/vdev/dynamic"
# A pod uid (the API server's are UUIDs) and a container name (a DNS label): neither may hold
# "_" (the mark's separator) or "/".
_UID = re.compile(r"[0-9A-Za-z][0-9A-Za-z-]{0,63}")
_CONTAINER = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class MarkError(Exception):
    """The mark cannot be named or written; the message says why."""


def mark_name(pod_uid: str, container: str, card_index: int, vdev_id: int) -> str:
    if not _UID.fullmatch(pod_uid):
        raise MarkError(f"pod uid {pod_uid[:80]!r} cannot name a mark file")
    if not _CONTAINER.fullmatch(container):
        raise MarkError(f"container name {container[:80]!r} cannot name a mark file")
    return f"{pod_uid}_{container}_{card_index}_{vdev_id}"


class Marks:
    def __init__(self, host_root: str) -> None:
        self.directory = host_path(host_root, MARK_DIR)

    def _open(self, create: bool) -> int:
        if create:
            try:
                os.mkdir(self.directory, 0o755)
            except FileExistsError:
                pass
            except OSError as exc:
                raise MarkError(f"cannot create {MARK_DIR}: {exc.strerror}") from exc
        try:
            fd = os.open(self.directory, _DIR_FLAGS)
        except OSError as exc:
            raise MarkError(f"cannot open {MARK_DIR} (a link is refused): {exc.strerror}") from exc
        if os.fstat(fd).st_mode & stat.S_IWOTH:
            os.close(fd)
            raise MarkError(f"{MARK_DIR} is world-writable; make it 0755, owned by root")
        return fd

    def write(self, name: str) -> None:
        """The mark, 0644, holding the time it was written (what the exporter expects)."""
        fd = self._open(create=True)
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
            try:
                out = os.open(name, flags, 0o644, dir_fd=fd)
            except OSError as exc:
                raise MarkError(f"cannot write {MARK_DIR}/{name}: {exc.strerror}") from exc
            try:
                os.fchmod(out, 0o644)
                os.write(out, f"{int(time.time())}\n".encode())
                os.fsync(out)
            finally:
                os.close(out)
        finally:
            os.close(fd)

    def remove(self, name: str) -> None:
        """Remove the mark; gone already is fine. MarkError when it cannot be removed."""
        if not name:
            return
        try:
            fd = self._open(create=False)
        except MarkError:
            if not os.path.lexists(self.directory):
                return
            raise
        try:
            os.unlink(name, dir_fd=fd)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise MarkError(f"cannot remove {MARK_DIR}/{name}: {exc.strerror}") from exc
        finally:
            os.close(fd)

    def present(self) -> set[str]:
        try:
            fd = self._open(create=False)
        except MarkError:
            return set()
        try:
            return set(os.listdir(fd))
        finally:
            os.close(fd)
