"""Partition grants: atomic, private, fail closed."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from hygon_dcu_plugin.deviceplugin.grants import MARK, GrantError, GrantStore, StoreFault
from sample_grant import sample_grant


def test_round_trip_with_private_modes(tmp_path: Path) -> None:
    store = GrantStore(str(tmp_path / "grants"))
    store.create("a test")
    store.write(sample_grant())
    loaded = store.load()
    assert loaded.grants == [sample_grant()] and loaded.unreadable == []
    assert stat.S_IMODE(os.stat(tmp_path / "grants").st_mode) == 0o700
    path = tmp_path / "grants" / (sample_grant().uuid + ".json")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    store.remove(sample_grant())
    assert store.load().grants == []


def test_a_loose_directory_mode_is_tightened(tmp_path: Path) -> None:
    directory = tmp_path / "grants"
    directory.mkdir(mode=0o755)
    GrantStore(str(directory)).write(sample_grant())
    assert stat.S_IMODE(os.stat(directory).st_mode) == 0o700


def test_unparsable_grants_are_reported_never_dropped(tmp_path: Path) -> None:
    store = GrantStore(str(tmp_path))
    store.write(sample_grant())
    (tmp_path / "bad.json").write_text("{")
    (tmp_path / "other.txt").write_text("x")
    wrong = sample_grant(uuid="0a0b0c0d-0000-4000-8000-000000000002").to_json()
    (tmp_path / "0a0b0c0d-0000-4000-8000-000000000003.json").write_text(wrong)
    future = sample_grant().to_json().replace('"schema": 1', '"schema": 9')
    (tmp_path / "0a0b0c0d-0000-4000-8000-000000000004.json").write_text(future)
    loaded = store.load()
    assert loaded.grants == [sample_grant()]
    reasons = {Path(p).name: why for p, why in loaded.unreadable}
    assert set(reasons) == {
        "bad.json",
        "other.txt",
        "0a0b0c0d-0000-4000-8000-000000000003.json",
        "0a0b0c0d-0000-4000-8000-000000000004.json",
    }
    assert "unknown schema 9" in reasons["0a0b0c0d-0000-4000-8000-000000000004.json"]
    assert "not its file name" in reasons["0a0b0c0d-0000-4000-8000-000000000003.json"]


def test_a_half_written_temp_file_is_not_a_grant_and_is_removed_at_start(tmp_path: Path) -> None:
    store = GrantStore(str(tmp_path))
    (tmp_path / "x.json.tmp").write_text("{")
    assert store.load().grants == [] and store.load().unreadable == []
    assert store.remove_temporaries() == ["x.json.tmp"]
    assert not (tmp_path / "x.json.tmp").exists()


def test_a_store_is_trusted_only_as_a_marked_real_directory(tmp_path: Path) -> None:
    path = tmp_path / "grants"
    store = GrantStore(str(path))
    problem = store.check()
    assert problem is not None and problem.fault is StoreFault.MISSING
    store.create("a test")
    assert store.check() is None and (path / MARK).is_file()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o700
    store.write(sample_grant())
    # A link to that very store is still a link: nothing is read through it.
    link = GrantStore(str(tmp_path / "link"))
    (tmp_path / "link").symlink_to("grants")
    loaded = link.load()
    assert loaded.problem is not None and loaded.problem.fault is StoreFault.LINK
    assert loaded.grants == []
    (path / MARK).unlink()
    loaded = store.load()
    assert loaded.problem is not None and loaded.problem.fault is StoreFault.UNMARKED
    assert loaded.grants == [sample_grant()]  # still read: a finished pod's is reclaimed
    (tmp_path / "file").write_text("")
    problem = GrantStore(str(tmp_path / "file")).check()
    assert problem is not None and problem.fault is StoreFault.NOT_A_DIRECTORY


def test_writing_a_grant_never_creates_the_store_nor_follows_a_link(tmp_path: Path) -> None:
    with pytest.raises(GrantError, match="missing"):
        GrantStore(str(tmp_path / "grants")).write(sample_grant())
    assert not (tmp_path / "grants").exists()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "grants").symlink_to("elsewhere")
    with pytest.raises(GrantError, match="is a link"):
        GrantStore(str(tmp_path / "grants")).write(sample_grant())
    assert list((tmp_path / "elsewhere").iterdir()) == []
