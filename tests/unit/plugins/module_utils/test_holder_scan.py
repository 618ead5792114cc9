"""Holder scan: real processes holding real files, processes that vanish, cgroup shapes."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.hygon.dcu.plugins.module_utils.holders import (
    find_holders,
    pod_identity,
    scan_holders,
)
from simnode import SimNode

POD = "6f1d2c3b-4a5e-4f60-8a9b-0c1d2e3f4a5b"
CID = "b" * 16 + "0123456789abcdef" * 3

Devices = tuple[Path, Path]

HOLD = (
    "import os, sys, time\n"
    "fds = [os.open(p, os.O_RDONLY) for p in sys.argv[1:]]\n"
    "print('ready', flush=True)\n"
    "time.sleep(120)\n"
)


class Holders:
    def __init__(self) -> None:
        self.processes: list[subprocess.Popen[str]] = []

    def hold(self, *paths: Path, tag: str = "holder") -> subprocess.Popen[str]:
        process = subprocess.Popen(
            [sys.executable, "-c", HOLD, *map(str, paths)],
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "HOLDER_TAG": tag},
        )
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "ready"
        self.processes.append(process)
        return process

    def stop(self) -> None:
        for process in self.processes:
            process.kill()
            process.wait()


@pytest.fixture
def holders() -> Iterator[Holders]:
    started = Holders()
    yield started
    started.stop()


@pytest.fixture
def devices(tmp_path: Path) -> tuple[Path, Path]:
    (tmp_path / "dev").mkdir()
    kfd, mkfd = tmp_path / "dev" / "kfd", tmp_path / "dev" / "mkfd"
    kfd.write_text("")
    mkfd.write_text("")
    return kfd, mkfd


def test_finds_real_holders_with_fd_count_and_command(holders: Holders, devices: Devices) -> None:
    kfd, mkfd = devices
    twice = holders.hold(kfd, kfd, tag="twice")
    holders.hold(mkfd)  # the vendor daemon's device: never a holder of kfd
    once = holders.hold(mkfd, kfd)

    found = find_holders(str(kfd))

    assert [(h.pid, h.fd_count) for h in found] == [(twice.pid, 2), (once.pid, 1)]
    assert all(str(kfd) in h.command and "-c" in h.command for h in found)
    assert twice.pid not in [h.pid for h in find_holders(str(mkfd))]


def test_exclude_pids(holders: Holders, devices: Devices) -> None:
    kfd = devices[0]
    first = holders.hold(kfd)
    second = holders.hold(kfd)
    assert [h.pid for h in find_holders(str(kfd), exclude_pids=[first.pid])] == [second.pid]


def test_no_holders_after_release(holders: Holders, devices: Devices) -> None:
    kfd = devices[0]
    process = holders.hold(kfd)
    assert [h.pid for h in find_holders(str(kfd))] == [process.pid]
    process.kill()
    process.wait()
    assert find_holders(str(kfd)) == []


def test_same_file_under_another_path_is_found(
    holders: Holders, devices: Devices, tmp_path: Path
) -> None:
    # A container sees the bind-mounted node at its own path; here a hard link stands in for the
    # other path (same inode, same file name).
    kfd = devices[0]
    (tmp_path / "container" / "dev").mkdir(parents=True)
    other = tmp_path / "container" / "dev" / "kfd"
    os.link(kfd, other)
    process = holders.hold(other)
    assert [h.pid for h in find_holders(str(kfd))] == [process.pid]


def test_survives_processes_exiting_during_the_scan(holders: Holders, devices: Devices) -> None:
    kfd = devices[0]
    holder = holders.hold(kfd)
    stop = threading.Event()

    def churn() -> None:
        while not stop.is_set():
            # Short-lived processes that briefly hold the file appear and vanish mid-scan.
            subprocess.run(["sh", "-c", f"exec 3<{kfd}; :"], check=False, stdin=subprocess.DEVNULL)

    workers = [threading.Thread(target=churn) for _worker in range(3)]
    for worker in workers:
        worker.start()
    try:
        for _attempt in range(60):
            found = find_holders(str(kfd))
            assert holder.pid in [h.pid for h in found]
    finally:
        stop.set()
        for worker in workers:
            worker.join()


def test_vanished_and_unreadable_entries_in_a_proc_tree(tmp_path: Path) -> None:
    kfd = tmp_path / "kfd"
    kfd.write_text("")
    proc = tmp_path / "proc"
    (proc / "100" / "fd").mkdir(parents=True)
    (proc / "100" / "fd" / "3").symlink_to(kfd)
    (proc / "100" / "fd" / "4").symlink_to(tmp_path / "elsewhere")
    (proc / "100" / "cmdline").write_bytes(b"/usr/bin/worker\0--serve\0")
    (proc / "100" / "cgroup").write_text(f"0::/kubepods/besteffort/pod{POD}/{CID}\n")
    (proc / "200").mkdir()  # listed, then gone: no fd directory
    (proc / "300" / "fd").mkdir(parents=True)
    (proc / "300" / "fd" / "0").symlink_to(kfd)  # no cmdline, no comm, no cgroup
    (proc / "self").mkdir()
    (proc / "notapid").mkdir()
    os.mkfifo(proc / "400")  # not a directory at all

    found = find_holders(str(kfd), proc_root=str(proc))

    assert [(h.pid, h.command, h.fd_count, h.pod_uid, h.container_id) for h in found] == [
        (100, "/usr/bin/worker --serve", 1, POD, CID),
        (300, "?", 1, None, None),
    ]


@pytest.mark.parametrize("shape", ["absent", "empty"])
def test_a_proc_root_without_this_node_s_processes_makes_the_scan_incomplete(
    devices: Devices, tmp_path: Path, shape: str
) -> None:
    # Not listable at all, or a directory with nothing mounted on it: either way "no holder"
    # would be a guess.
    proc = tmp_path / "proc"
    if shape == "empty":
        proc.mkdir()

    scan = scan_holders(str(devices[0]), proc_root=str(proc))

    assert scan.holders == []
    assert scan.complete is False
    assert [gap.kind for gap in scan.gaps] == ["no_process_list"]
    assert str(proc) in scan.gaps[0].detail


def test_a_device_that_does_not_exist_makes_the_scan_incomplete(
    holders: Holders, devices: Devices, tmp_path: Path
) -> None:
    # A host root without dev/kfd (a mistyped hygon_dcu_host_root): nobody can be matched, which
    # must not read as "nobody holds it".
    holders.hold(devices[0])
    missing = tmp_path / "wrong-root" / "dev" / "kfd"

    scan = scan_holders(str(missing))

    assert scan.holders == []
    assert scan.complete is False
    assert [gap.kind for gap in scan.gaps] == ["no_device"]
    assert scan.gaps[0].detail == f"{missing} does not exist, so no open file can be matched to it"
    assert scan_holders(str(devices[0])).complete is True


def _openable_character_device() -> os.stat_result | None:
    """A character device of this machine that a holder can open, other than the memory
    devices (major 1), whose numbers a simulated node's device files reuse."""
    for path in ("/dev/loop-control", "/dev/fuse", "/dev/net/tun", "/dev/ptmx"):
        try:
            info = os.stat(path)
            os.close(os.open(path, os.O_RDONLY | os.O_NONBLOCK))
        except OSError:
            continue
        if stat.S_ISCHR(info.st_mode) and os.major(info.st_rdev) != 1:
            return info
    return None


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod of a character device needs root")
def test_a_holder_through_a_mknod_copy_of_the_device_is_found(
    holders: Holders, tmp_path: Path
) -> None:
    device = _openable_character_device()
    if device is None:
        pytest.skip("no openable character device outside major 1 on this machine")
    kfd = tmp_path / "node" / "dev" / "kfd"
    kfd.parent.mkdir(parents=True)
    os.mknod(kfd, 0o600 | stat.S_IFCHR, device.st_rdev)
    # Another node for the same device, under another name and inode: a container's /dev made
    # by its runtime, or anyone's mknod.
    copy = tmp_path / "elsewhere" / "accel0"
    copy.parent.mkdir()
    os.mknod(copy, 0o600 | stat.S_IFCHR, device.st_rdev)
    through_copy = holders.hold(copy)
    unrelated = holders.hold(Path("/dev/null"))

    found = [h.pid for h in scan_holders(str(kfd)).holders]

    assert through_copy.pid in found
    assert unrelated.pid not in found


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # cgroup v2, cgroupfs driver, containerd
        (f"0::/kubepods/burstable/pod{POD}/{CID}\n", (POD, CID)),
        # cgroup v2, systemd driver, containerd
        (
            "0::/kubepods.slice/kubepods-burstable.slice/"
            f"kubepods-burstable-pod{POD.replace('-', '_')}.slice/cri-containerd-{CID}.scope\n",
            (POD, CID),
        ),
        # cgroup v2, systemd driver, cri-o, guaranteed QoS (no QoS slice)
        (
            f"0::/kubepods.slice/kubepods-pod{POD.replace('-', '_')}.slice/crio-{CID}.scope\n",
            (POD, CID),
        ),
        # cgroup v1, several hierarchies, docker via systemd driver
        (
            "12:pids:/\n"
            "11:memory:/kubepods.slice/kubepods-besteffort.slice/"
            f"kubepods-besteffort-pod{POD.replace('-', '_')}.slice/docker-{CID}.scope\n"
            "1:name=systemd:/kubepods.slice\n",
            (POD, CID),
        ),
        # cgroup v1, cgroupfs driver, cri-o
        (f"4:cpu,cpuacct:/kubepods/besteffort/pod{POD}/crio-{CID}\n", (POD, CID)),
        # containerd's pod-slice:runtime:id form
        (
            "0::/system.slice/containerd.service/"
            f"kubepods-burstable-pod{POD.replace('-', '_')}.slice:cri-containerd:{CID}\n",
            (POD, CID),
        ),
        # pod-level cgroup only (a process in the pod's sandbox cgroup)
        (f"0::/kubepods/pod{POD}\n", (POD, None)),
        # not Kubernetes
        ("0::/system.slice/hymgr.service\n", (None, None)),
        ("0::/user.slice/user-0.slice/session-1.scope\n", (None, None)),
        (f"0::/docker/{CID}\n", (None, None)),
        ("", (None, None)),
        ("garbage without colons\n\n", (None, None)),
    ],
)
def test_pod_identity_shapes(text: str, expected: tuple[str | None, str | None]) -> None:
    assert pod_identity(text) == expected


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to scan as another user")
def test_unreadable_processes_are_reported_not_hidden(holders: Holders, devices: Devices) -> None:
    kfd = devices[0]
    holder = holders.hold(kfd)
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: scan as user nobody, report as JSON
        try:
            os.close(read_fd)
            os.setgroups([])
            os.setresgid(65534, 65534, 65534)
            os.setresuid(65534, 65534, 65534)
            scan = scan_holders(str(kfd))
            payload = {
                "holders": [h.pid for h in scan.holders],
                "unreadable": scan.unreadable_pids,
                "gaps": [gap.kind for gap in scan.gaps],
                "detail": "; ".join(gap.detail for gap in scan.gaps),
            }
            os.write(write_fd, json.dumps(payload).encode())
        finally:
            os._exit(0)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as pipe:
        result = json.loads(pipe.read())
    os.waitpid(pid, 0)
    assert result["holders"] == []
    assert holder.pid in result["unreadable"]
    assert "unreadable_processes" in result["gaps"]
    assert "runs as uid 65534" in result["detail"]
    as_root = scan_holders(str(kfd))
    assert [h.pid for h in as_root.holders] == [holder.pid]
    assert holder.pid not in as_root.unreadable_pids
    assert as_root.complete is True


def test_simulated_kfd_holders_found_mkfd_ignored(sim_node: SimNode, kfd_holder: Any) -> None:
    daemon = kfd_holder(sim_node.mkfd)  # like hymgr: holds /dev/mkfd for good
    # The simulated nodes carry /dev/null's device numbers: /dev/null is not the simulated kfd.
    kfd_holder("/dev/null")
    first = kfd_holder(sim_node.kfd)
    second = kfd_holder(sim_node.kfd)
    found = find_holders(str(sim_node.kfd))
    assert [h.pid for h in found] == sorted([first.pid, second.pid])
    assert daemon.pid not in [h.pid for h in found]
    assert [h.pid for h in find_holders(str(sim_node.mkfd))] == [daemon.pid]
    first.release()
    assert [h.pid for h in find_holders(str(sim_node.kfd))] == [second.pid]
