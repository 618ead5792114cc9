# Copyright: hygon.dcu contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Which processes hold a device file, read straight from ``/proc/*/fd``.

One pass, no process spawned: the vendor's mode switch is refused while anything holds
``/dev/kfd`` and names nobody, so this scan is how an operator learns who to stop. Processes
come and go during the scan; that is normal and skipped. What the scan could not see (fds it may
not read, no process list, no device file to compare with) is returned as gaps, because an empty
list from such a scan does not mean that nobody holds the device.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field

from .common_options import is_ascii_number

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


# Kinds of gap (HolderScan.gaps); callers choose the fix to name by kind.
NO_DEVICE = "no_device"
NO_PROCESS_LIST = "no_process_list"
UNREADABLE_PROCESSES = "unreadable_processes"
_PIDS_NAMED = 10
# The fix for each kind, in the modules' terms (the mig_node role names its own variables).
_GAP_FIXES = {
    NO_DEVICE: (
        "point host_root at the node's root directory (the one holding the device file) or "
        "load the DCU driver"
    ),
    NO_PROCESS_LIST: "run on the node itself, as root, with procfs mounted on /proc",
    UNREADABLE_PROCESSES: "run the module as root (become: true)",
}


@dataclass(frozen=True)
class Gap:
    """Something the scan could not check, so a holder may be missing from its list."""

    kind: str  # NO_DEVICE, NO_PROCESS_LIST or UNREADABLE_PROCESSES
    detail: str  # what was seen, as a sentence an operator can act on


# Linux's major 1 is the kernel's memory devices (null, zero, full, random...), never a DCU. A
# simulated node's device files carry /dev/null's numbers so that they can be opened
# (tests/simulator), and matching by those numbers would count every process with /dev/null open.
_MEMORY_DEVICES_MAJOR = 1


@dataclass(frozen=True)
class _Target:
    paths: frozenset[str]
    basename: str
    identity: tuple[int, int]  # (st_dev, st_ino)
    device_number: int | None  # st_rdev of a character device, compared on every fd


def _target(device: str) -> _Target | Gap:
    """What an fd on ``device`` looks like, or the gap when there is no file to compare with."""
    try:
        info = os.stat(device)
    except FileNotFoundError:
        return Gap(NO_DEVICE, f"{device} does not exist, so no open file can be matched to it")
    except OSError as exc:
        return Gap(NO_DEVICE, f"{device} cannot be looked at ({exc.strerror or exc})")
    device_number = None
    if stat.S_ISCHR(info.st_mode) and os.major(info.st_rdev) != _MEMORY_DEVICES_MAJOR:
        device_number = info.st_rdev
    paths = frozenset({device, os.path.normpath(device)})
    basename = os.path.basename(os.path.normpath(device))
    return _Target(paths, basename, (info.st_dev, info.st_ino), device_number)


def _same_file(directory_fd: int, name: str, target: _Target) -> bool:
    # The same inode (a bind mount seen from another mount namespace), or the same character
    # device through another node (one a container runtime or anyone else made with mknod).
    try:
        info = os.stat(name, dir_fd=directory_fd)
    except OSError:
        return False
    if target.identity == (info.st_dev, info.st_ino):
        return True
    return target.device_number is not None and (
        stat.S_ISCHR(info.st_mode) and info.st_rdev == target.device_number
    )


def _count_matching_fds(fd_dir: str, target: _Target | None) -> int | None:
    """Matching fds of one process; None when its fds cannot be read (EACCES: not root).

    Without a target only whether the fds can be read is found out (0 when they can)."""
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
        if target is None:
            return 0
        count = 0
        for name in names:
            try:
                link = os.readlink(name, dir_fd=directory_fd)
            except OSError:
                continue  # fd closed between listdir and readlink
            if link in target.paths:
                count += 1
                continue
            # A process in another mount namespace (a container given the device node) shows
            # its own path for the same file, and a node made with mknod has any path: compare
            # the file itself. Sockets, pipes and anonymous inodes have no path to compare.
            same_name = link.endswith("/" + target.basename)
            worth_a_look = same_name or (target.device_number is not None and link[:1] == "/")
            if worth_a_look and _same_file(directory_fd, name, target):
                count += 1
        return count
    finally:
        os.close(directory_fd)


@dataclass(frozen=True)
class HolderScan:
    holders: list[Holder]
    unreadable_pids: list[int]  # processes whose fds could not be read (run as root)
    gaps: list[Gap] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        """True when every process was seen and compared with an existing device file."""
        return not self.gaps


def _process_list_gap(proc_root: str, names: list[str]) -> Gap | None:
    """Why ``names`` (the listing of ``proc_root``) is not this node's whole process list."""
    if str(os.getpid()) not in names:
        return Gap(
            NO_PROCESS_LIST,
            f"{proc_root} does not list this process, so it is not this node's process list "
            "(procfs is not mounted there)",
        )
    if "1" not in names:
        return Gap(
            NO_PROCESS_LIST,
            f"{proc_root} hides other users' processes (process 1 is not listed: mounted with "
            f"hidepid) from this scan, which runs as uid {os.geteuid()}",
        )
    return None


def _unreadable_gap(unreadable: list[int]) -> Gap:
    named = ", ".join(str(pid) for pid in unreadable[:_PIDS_NAMED])
    more = f" and {len(unreadable) - _PIDS_NAMED} more" if len(unreadable) > _PIDS_NAMED else ""
    return Gap(
        UNREADABLE_PROCESSES,
        f"the open files of {len(unreadable)} process(es) could not be read (pid {named}{more}) "
        f"by this scan, which runs as uid {os.geteuid()}",
    )


def explain_gaps(gaps: Iterable[Gap]) -> str:
    """Each gap with its fix, for a module's message."""
    return "; ".join(f"{gap.detail}: {_GAP_FIXES[gap.kind]}" for gap in gaps)


def scan_holders(
    device: str = "/dev/kfd",
    proc_root: str = "/proc",
    exclude_pids: Iterable[int] = (),
) -> HolderScan:
    """Every process with an open fd on ``device``, sorted by pid, the pids it could not
    inspect, and the gaps that make the list possibly incomplete.

    ``device`` is the path as this process sees it (for a simulated node: host-root-prefixed).
    An fd matches when its link text is that path, when it names a file of the same name that
    is the same file (same inode: a bind mount seen from another mount namespace), or when the
    device is a character device and the fd is open on a character device with the same device
    number (a node made with mknod elsewhere). ``/dev/mkfd`` never matches ``/dev/kfd``: the
    vendor daemon that holds it does not block a mode switch.
    """
    looked_up = _target(device)
    target = looked_up if isinstance(looked_up, _Target) else None
    excluded = {int(pid) for pid in exclude_pids}
    holders: list[Holder] = []
    unreadable: list[int] = []
    gaps = [looked_up] if isinstance(looked_up, Gap) else []
    try:
        names = os.listdir(proc_root)
    except OSError as exc:
        gaps.append(Gap(NO_PROCESS_LIST, f"{proc_root} cannot be listed ({exc.strerror or exc})"))
        return HolderScan(holders, unreadable, gaps)
    listing_gap = _process_list_gap(proc_root, names)
    if listing_gap is not None:
        gaps.append(listing_gap)
    pids = [name for name in names if is_ascii_number(name)]
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
    if unreadable:
        gaps.append(_unreadable_gap(unreadable))
    return HolderScan(holders, unreadable, gaps)


def find_holders(
    device: str = "/dev/kfd",
    proc_root: str = "/proc",
    exclude_pids: Iterable[int] = (),
) -> list[Holder]:
    """The holders found by scan_holders (see there)."""
    return scan_holders(device, proc_root, exclude_pids).holders
