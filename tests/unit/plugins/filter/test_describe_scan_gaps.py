"""describe_scan_gaps: what a holder scan could not see, each with the caller's fix."""

from __future__ import annotations

from ansible_collections.hygon.dcu.plugins.filter.describe_scan_gaps import (
    FilterModule,
    describe_scan_gaps,
)

FIXES = {
    "no_device": "set hygon_dcu_host_root to the node's root",
    "unreadable_processes": "run the node steps as root",
}


def test_each_gap_gets_the_fix_for_its_kind() -> None:
    gaps = [
        {"kind": "no_device", "detail": "/srv/node/dev/kfd does not exist"},
        {"kind": "unreadable_processes", "detail": "the open files of 3 process(es) were hidden"},
    ]

    assert describe_scan_gaps(gaps, FIXES) == (
        "/srv/node/dev/kfd does not exist: set hygon_dcu_host_root to the node's root; "
        "the open files of 3 process(es) were hidden: run the node steps as root"
    )


def test_a_kind_without_a_fix_points_to_the_troubleshooting_guide() -> None:
    gaps = [{"kind": "no_process_list", "detail": "/proc hides other users' processes"}]
    assert describe_scan_gaps(gaps, FIXES) == (
        "/proc hides other users' processes: see docs/troubleshooting.md"
    )


def test_no_gap_is_an_empty_phrase() -> None:
    assert describe_scan_gaps([], FIXES) == ""


def test_the_plugin_exposes_the_filter_by_its_name() -> None:
    assert FilterModule().filters() == {"describe_scan_gaps": describe_scan_gaps}
