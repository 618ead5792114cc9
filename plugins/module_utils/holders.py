# Copyright: hygon.dcu contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Which processes hold a device file, read straight from ``/proc/*/fd``.

One pass, no process spawned: the vendor's mode switch is refused while anything holds
``/dev/kfd`` and names nobody, so this scan is how an operator learns who to stop. Processes
come and go during the scan and some fds are unreadable; both are normal and skipped.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass

# A pod UID in a cgroup path: dashes (cgroupfs driver) or underscores (systemd driver).
_POD_UID = re.compile(
    r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})"
)
# The container id: the path component after the pod's, with an optional runtime prefix
# (cri-containerd-, crio-, docker-) and .scope suffix (systemd driver), or containerd's
# ``...pod<uid>.slice:cri-containerd:<id>`` form.
_CONTAINER_ID = re.compile(r"(?:[a-z-]+[-:])?([0-9a-f]{64})(?:\.scope)?")


@dataclass(frozen=True)
class Holder:
    pid: int
    command: str
    fd_count: int
    pod_uid: str | None
    container_id: str | None

    def describe(self) -> str:
        command = " ".join(self.command.split())
        if len(command) > 160:
            command = command[:157] + "..."
        text = f"pid {self.pid} ({command})"
        if self.pod_uid:
            text += f" in pod {self.pod_uid}"
        return text


def pod_identity(cgroup_text: str) -> tuple[str | None, str | None]:
    """(pod UID, container id) from the text of ``/proc/<pid>/cgroup``, where there is one.

    Handles cgroup v1 (one line per hierarchy) and v2 (``0::/path``), the cgroupfs driver
    (``/kubepods/burstable/pod<uid>/<id>``) and the systemd driver
    (``/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice/
    cri-containerd-<id>.scope``).
    """
    for line in cgroup_text.splitlines():
        path = line.split(":", 2)[-1]
        if "kubepods" not in path:
            continue
        components = [component for component in path.split("/") if component]
        for position, component in enumerate(components):
            match = _POD_UID.search(component)
            if match is None:
                continue
            pod_uid = match.group(1).replace("_", "-")
            candidates = components[position + 1 : position + 2]
            if ".slice:" in component:
                candidates.append(component.split(".slice:", 1)[1])
            container_id = None
            for candidate in candidates:
                found = _CONTAINER_ID.fullmatch(candidate)
                if found is not None:
                    container_id = found.group(1)
                    break
            return pod_uid, container_id
    return None, None


def _read_text(path: str) -> str | None:
    try:
        with open(path, "rb") as handle:
            return handle.read(65536).decode("utf-8", errors="replace")
    except OSError:
        return None


def _command(proc_root: str, pid: str) -> str:
    raw = _read_text(f"{proc_root}/{pid}/cmdline")
    if raw:
        return " ".join(part for part in raw.split("\0") if part)
    comm = _read_text(f"{proc_root}/{pid}/comm")
    return f"[{comm.strip()}]" if comm else "?"


@dataclass(frozen=True)
class _Target:
    paths: frozenset[str]
    basename: str
    identity: tuple[int, int] | None  # (st_dev, st_ino)


def _target(device: str) -> _Target:
    identity = None
    try:
        info = os.stat(device)
    except OSError:
        pass
    else:
        identity = (info.st_dev, info.st_ino)
    paths = frozenset({device, os.path.normpath(device)})
    return _Target(paths, os.path.basename(os.path.normpath(device)), identity)


def _same_file(directory_fd: int, name: str, target: _Target) -> bool:
    # Same inode only: device numbers are not compared, since two nodes (or a simulated
    # node and /dev/null) may share them without being the same device file.
    try:
        info = os.stat(name, dir_fd=directory_fd)
    except OSError:
        return False
    return target.identity == (info.st_dev, info.st_ino)


def _count_matching_fds(fd_dir: str, target: _Target) -> int | None:
    """Matching fds of one process; None when its fds cannot be read (EACCES: not root)."""
    try:
        directory_fd = os.open(fd_dir, os.O_RDONLY | os.O_DIRECTORY)
    except PermissionError:
        return None
    except OSError:
        return 0  # the process exited
    try:
        try:
            names = os.listdir(directory_fd)
        except PermissionError:
            return None
        except OSError:
            return 0
        count = 0
        for name in names:
            try:
                link = os.readlink(name, dir_fd=directory_fd)
            except OSError:
                continue  # fd closed between listdir and readlink
            # A process in another mount namespace (a container given the device node) shows
            # its own path for the same file: same name, so compare the file itself.
            same_name = link.endswith("/" + target.basename)
            if link in target.paths or (same_name and _same_file(directory_fd, name, target)):
                count += 1
        return count
    finally:
        os.close(directory_fd)


@dataclass(frozen=True)
class HolderScan:
    holders: list[Holder]
    unreadable_pids: list[int]  # processes whose fds could not be read (run as root)


def scan_holders(
    device: str = "/dev/kfd",
    proc_root: str = "/proc",
    exclude_pids: Iterable[int] = (),
) -> HolderScan:
    """Every process with an open fd on ``device``, sorted by pid, plus the pids it could not
    inspect.

    ``device`` is the path as this process sees it (for a simulated node: host-root-prefixed).
    An fd matches when its link text is that path, or when it names a file of the same name
    that is the same file (same inode: a bind mount seen from another mount namespace).
    ``/dev/mkfd`` never matches ``/dev/kfd``: the vendor daemon that holds it does not block a
    mode switch.
    """
    target = _target(device)
    excluded = {int(pid) for pid in exclude_pids}
    holders: list[Holder] = []
    unreadable: list[int] = []
    try:
        pids = [name for name in os.listdir(proc_root) if name.isdigit()]
    except OSError:
        return HolderScan(holders, unreadable)
    for pid in pids:
        if int(pid) in excluded:
            continue
        count = _count_matching_fds(f"{proc_root}/{pid}/fd", target)
        if count is None:
            unreadable.append(int(pid))
            continue
        if count == 0:
            continue
        command = _command(proc_root, pid)
        cgroup = _read_text(f"{proc_root}/{pid}/cgroup") or ""
        pod_uid, container_id = pod_identity(cgroup)
        holders.append(Holder(int(pid), command, count, pod_uid, container_id))
    holders.sort(key=lambda holder: holder.pid)
    unreadable.sort()
    return HolderScan(holders, unreadable)


def find_holders(
    device: str = "/dev/kfd",
    proc_root: str = "/proc",
    exclude_pids: Iterable[int] = (),
) -> list[Holder]:
    """The holders found by scan_holders (see there)."""
    return scan_holders(device, proc_root, exclude_pids).holders
