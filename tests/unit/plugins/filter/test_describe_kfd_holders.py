"""describe_kfd_holders: the holders of /dev/kfd as one phrase, in the node layer's words."""

from __future__ import annotations

from typing import Any

from ansible_collections.hygon.dcu.plugins.filter.describe_kfd_holders import (
    FilterModule,
    describe_kfd_holders,
)


def holder(pid: int, command: str, pod_uid: str | None = None) -> dict[str, Any]:
    # As hygon.dcu.kfd_holders_info returns each one.
    return {"pid": pid, "command": command, "fd_count": 1, "pod_uid": pod_uid, "container_id": None}


def test_each_holder_is_named_with_its_command_and_pod() -> None:
    holders = [
        holder(4242, "python3 train.py", "6f1d2c3b-4a5e-4f60-8a9b-0c1d2e3f4a5b"),
        holder(77, "hy-smi  --showuse"),
    ]

    assert describe_kfd_holders(holders) == (
        "pid 4242 (python3 train.py) in pod 6f1d2c3b-4a5e-4f60-8a9b-0c1d2e3f4a5b; "
        "pid 77 (hy-smi --showuse)"
    )


def test_a_long_command_line_is_cut() -> None:
    assert describe_kfd_holders([holder(1, "x" * 200)]) == f"pid 1 ({'x' * 157}...)"


def test_no_holder_is_an_empty_phrase() -> None:
    assert describe_kfd_holders([]) == ""


def test_the_plugin_exposes_the_filter_by_its_name() -> None:
    assert FilterModule().filters() == {"describe_kfd_holders": describe_kfd_holders}
