"""describe_poison_directories: registry findings as one phrase."""

from __future__ import annotations

from ansible_collections.hygon.dcu.plugins.filter.describe_poison_directories import (
    FilterModule,
    describe_poison_directories,
)


def test_each_directory_is_named_with_its_detail() -> None:
    findings = [
        {"kind": "poison", "path": "/etc/dmi_mig_config/ci/dev0gi4ci0.conf", "detail": "not empty"},
        {"kind": "poison", "path": "/etc/dmi_mig_config/ci/dev1gi2ci0.conf", "detail": "busy"},
    ]

    assert describe_poison_directories(findings) == (
        "/etc/dmi_mig_config/ci/dev0gi4ci0.conf (not empty); "
        "/etc/dmi_mig_config/ci/dev1gi2ci0.conf (busy)"
    )


def test_no_directory_is_an_empty_phrase() -> None:
    assert describe_poison_directories([]) == ""


def test_the_plugin_exposes_the_filter_by_its_name() -> None:
    assert FilterModule().filters() == {"describe_poison_directories": describe_poison_directories}
