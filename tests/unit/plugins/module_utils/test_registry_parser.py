"""Registry parser: byte soup, hostile names, directories, links and unreadable files.

The parser must turn anything found under /etc/dmi_mig_config into conf files or findings, never
raise, and never read through a link (so nothing outside the registry can leak in).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid as uuidlib
from pathlib import Path

import pytest
from ansible_collections.hygon.dcu.plugins.module_utils.registry import (
    CONF_FILE_NAME,
    REGISTRY_PATH,
    parse_conf_text,
    read_registry,
    sweep_poison,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

# A uuid that only exists outside the registry: it must never show up in a result.
OUTSIDE_UUID = "0badf00d-0000-4000-8000-00000000dead"


def conf_text(pci: str, gi: int, ci: int, uuid: str, pad: int = 16) -> str:
    def kv(key: str, value: object) -> str:
        return f"{key + ':':<{pad}}{value}\n"

    return (
        kv("pci", pci)
        + kv("id", gi)
        + kv("profile_id", 3)
        + kv("cu_count", 20)
        + kv("memory_size_MB", 16380)
        + kv("pci", pci)
        + kv("gi_id", gi)
        + kv("id", ci)
        + kv("profile_id", 0)
        + kv("cu_count", 20)
        + kv("mig_uuid", uuid)
    )


def make_registry(root: Path) -> Path:
    registry = root / REGISTRY_PATH.lstrip("/")
    (registry / "ci").mkdir(parents=True)
    (registry / "gi").mkdir()
    return registry


def make_outside(root: Path) -> Path:
    outside = root / "outside"
    (outside / "dir").mkdir(parents=True)
    (outside / "dir" / "dev0gi9ci0.conf").write_text(conf_text("0000:09:00.0", 9, 0, OUTSIDE_UUID))
    (outside / "dev0gi8ci0.conf").write_text(conf_text("0000:09:00.0", 8, 0, OUTSIDE_UUID))
    (outside / "empty").mkdir()
    return outside


def test_parses_the_drivers_layout_by_key() -> None:
    text = conf_text("0000:09:00.0", 3, 0, "3b2a1c9e-7f00-4c1d-9a55-0123456789ab")
    parsed = parse_conf_text(text)
    assert parsed.problems == ()
    assert parsed.gpu["id"] == "3" and parsed.compute["id"] == "0"
    assert parsed.gpu["profile_id"] == "3" and parsed.compute["profile_id"] == "0"
    assert parsed.compute["gi_id"] == "3"
    assert parsed.uuid == "3b2a1c9e-7f00-4c1d-9a55-0123456789ab"


def test_reads_cards_conf_files_and_reports_each_oddity(tmp_path: Path) -> None:
    registry = make_registry(tmp_path)
    outside = make_outside(tmp_path)
    (registry / "dev0").write_text("0000:09:00.0\n")
    (registry / "dev1").write_text("0000:0A:00.0\n")  # upper case is normalised
    (registry / "dev01").write_text("0000:0b:00.0\n")
    good = "3b2a1c9e-7f00-4c1d-9a55-0123456789ab"
    (registry / "ci" / "dev0gi3ci0.conf").write_text(conf_text("0000:09:00.0", 3, 0, good))
    (registry / "ci" / "dev0gi4ci0.conf").mkdir()
    (registry / "ci" / "dev0gi5ci0.conf").symlink_to(outside / "dev0gi8ci0.conf")
    (registry / "ci" / "notes.txt").write_text("hello")
    (registry / "ci" / "dev1gi3ci0.conf").write_text(conf_text("0000:0a:00.0", 7, 0, "nope"))
    (registry / "gi" / "dev0gi3.conf").write_text("pci: 0000:09:00.0\n")

    result = read_registry(str(tmp_path))

    assert result.present
    assert result.cards == {0: "0000:09:00.0", 1: "0000:0a:00.0"}
    by_path = {f.path: f.kind for f in result.findings}
    base = f"{REGISTRY_PATH}/ci"
    assert by_path[f"{REGISTRY_PATH}/dev01"] == "bad_name"
    assert by_path[f"{base}/dev0gi4ci0.conf"] == "poison"
    assert by_path[f"{base}/dev0gi5ci0.conf"] == "link"
    assert by_path[f"{base}/notes.txt"] == "bad_name"
    assert by_path[f"{base}/dev1gi3ci0.conf"] == "malformed"
    good_conf = result.conf_file(0, 3, 0)
    assert good_conf is not None and good_conf.uuid == good
    assert good_conf.path == f"{base}/dev0gi3ci0.conf"
    assert good_conf.host_path == str(registry / "ci" / "dev0gi3ci0.conf")
    assert good_conf.gpu_profile_id == 3 and good_conf.memory_mib == 16380
    bad_conf = result.conf_file(1, 3, 0)
    assert bad_conf is not None and bad_conf.uuid is None  # invalid uuid is not passed on
    assert result.gpu_instance_files == [f"{REGISTRY_PATH}/gi/dev0gi3.conf"]
    assert OUTSIDE_UUID not in repr(result)


def test_missing_registry_is_not_present(tmp_path: Path) -> None:
    result = read_registry(str(tmp_path))
    assert not result.present and result.cards == {} and result.findings == []


def test_registry_that_is_a_link_is_not_followed(tmp_path: Path) -> None:
    outside = make_outside(tmp_path)
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "dmi_mig_config").symlink_to(outside)
    result = read_registry(str(tmp_path))
    assert not result.present
    assert [(f.kind, f.path) for f in result.findings] == [("link", REGISTRY_PATH)]


def test_ci_directory_that_is_a_link_is_not_followed(tmp_path: Path) -> None:
    registry = tmp_path / REGISTRY_PATH.lstrip("/")
    registry.mkdir(parents=True)
    outside = make_outside(tmp_path)
    (registry / "ci").symlink_to(outside / "dir")
    result = read_registry(str(tmp_path))
    assert result.conf_files == []
    assert [(f.kind, f.path) for f in result.findings] == [("link", f"{REGISTRY_PATH}/ci")]
    swept = sweep_poison(str(tmp_path))
    assert swept.swept == [] and (outside / "dir").is_dir() and (outside / "empty").is_dir()


def test_fifo_on_a_conf_name_does_not_hang(tmp_path: Path) -> None:
    registry = make_registry(tmp_path)
    os.mkfifo(registry / "ci" / "dev0gi3ci0.conf")
    result = read_registry(str(tmp_path))
    assert [(f.kind, f.path.rsplit("/", 1)[1]) for f in result.findings] == [
        ("not_a_file", "dev0gi3ci0.conf")
    ]


def test_oversized_file_is_a_finding(tmp_path: Path) -> None:
    registry = make_registry(tmp_path)
    (registry / "ci" / "dev0gi3ci0.conf").write_bytes(b"x: y\n" * 20000)
    result = read_registry(str(tmp_path))
    assert result.conf_files == []
    assert [f.kind for f in result.findings] == ["unreadable"]


def test_sweep_removes_only_empty_directories_in_ci(tmp_path: Path) -> None:
    registry = make_registry(tmp_path)
    outside = make_outside(tmp_path)
    ci = registry / "ci"
    (ci / "dev0gi3ci0.conf").mkdir()
    (ci / "dev0gi4ci0.conf").mkdir()
    (ci / "dev0gi4ci0.conf" / "inside").write_text("keep me")
    (ci / "dev0gi5ci0.conf").write_text(conf_text("0000:09:00.0", 5, 0, str(uuidlib.uuid4())))
    (ci / "dev0gi6ci0.conf").symlink_to(outside / "empty")
    (registry / "gi" / "stray").mkdir()

    planned = sweep_poison(str(tmp_path), dry_run=True)
    assert planned.swept == [f"{REGISTRY_PATH}/ci/dev0gi3ci0.conf"]
    assert [f.path for f in planned.kept] == [f"{REGISTRY_PATH}/ci/dev0gi4ci0.conf"]
    assert (ci / "dev0gi3ci0.conf").is_dir()  # a dry run removes nothing

    done = sweep_poison(str(tmp_path))
    assert done.swept == planned.swept
    assert [(f.path, f.kind) for f in done.kept] == [
        (f"{REGISTRY_PATH}/ci/dev0gi4ci0.conf", "poison")
    ]
    assert not (ci / "dev0gi3ci0.conf").exists()
    assert (ci / "dev0gi4ci0.conf" / "inside").read_text() == "keep me"
    assert (ci / "dev0gi5ci0.conf").is_file()
    assert (ci / "dev0gi6ci0.conf").is_symlink() and (outside / "empty").is_dir()
    assert (registry / "gi" / "stray").is_dir()
    assert sweep_poison(str(tmp_path)).swept == []


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to read as another user")
def test_unreadable_file_is_a_finding_for_an_unprivileged_reader() -> None:
    # Root reads every file, so the unreadable case is exercised as user nobody.
    top = Path(tempfile.mkdtemp(prefix="hydmi-reg-"))
    try:
        os.chmod(top, 0o755)  # noqa: S103 - user nobody must traverse it
        registry = make_registry(top)
        for directory in (top / "etc", registry, registry / "ci", registry / "gi"):
            os.chmod(directory, 0o755)  # noqa: S103
        good = str(uuidlib.uuid4())
        (registry / "ci" / "dev0gi3ci0.conf").write_text(conf_text("0000:09:00.0", 3, 0, good))
        secret = registry / "ci" / "dev0gi4ci0.conf"
        secret.write_text(conf_text("0000:09:00.0", 4, 0, str(uuidlib.uuid4())))
        os.chmod(registry / "ci" / "dev0gi3ci0.conf", 0o644)
        os.chmod(secret, 0o000)
        (registry / "dev0").write_text("0000:09:00.0\n")
        os.chmod(registry / "dev0", 0o000)
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:  # child: read the registry as user nobody, report as JSON
            try:
                os.close(read_fd)
                os.setgroups([])
                os.setresgid(65534, 65534, 65534)
                os.setresuid(65534, 65534, 65534)
                found = read_registry(str(top))
                payload = {
                    "conf_files": [[x.path, x.uuid] for x in found.conf_files],
                    "findings": [[f.kind, f.path] for f in found.findings],
                    "cards": found.cards,
                }
                os.write(write_fd, json.dumps(payload).encode())
            finally:
                os._exit(0)
        os.close(write_fd)
        with os.fdopen(read_fd, "rb") as pipe:
            output = pipe.read()
        os.waitpid(pid, 0)
        result = json.loads(output)
        assert result["conf_files"] == [[f"{REGISTRY_PATH}/ci/dev0gi3ci0.conf", good]]
        assert sorted(result["findings"]) == [
            ["unreadable", f"{REGISTRY_PATH}/ci/dev0gi4ci0.conf"],
            ["unreadable", f"{REGISTRY_PATH}/dev0"],
        ]
        assert result["cards"] == {}
    finally:
        shutil.rmtree(top)


# ---------------------------------------------------------------- property tests -----------
_name_chars = st.characters(
    blacklist_characters="/\0", blacklist_categories=["Cs"], max_codepoint=0x2FFF
)
hostile_names = st.text(_name_chars, min_size=1, max_size=40).filter(
    lambda name: name not in (".", "..") and len(name.encode()) < 200
)
conf_names = st.builds(
    "dev{}gi{}ci{}.conf".format,
    st.integers(0, 20),
    st.integers(0, 40),
    st.integers(0, 3),
)
entry_kinds = st.sampled_from(
    ["soup", "conf", "empty_dir", "full_dir", "link_file", "link_dir", "link_inside", "fifo"]
)
entries = st.dictionaries(
    st.one_of(conf_names, hostile_names),
    st.tuples(entry_kinds, st.binary(max_size=600), st.integers(0, 40)),
    max_size=12,
)


def _populate(root: Path, spec: dict[str, tuple[str, bytes, int]]) -> dict[str, str]:
    registry = make_registry(root)
    outside = make_outside(root)
    ci = registry / "ci"
    expected: dict[str, str] = {}
    for name, (kind, soup, pad) in spec.items():
        path = ci / name
        if kind == "soup":
            path.write_bytes(soup)
        elif kind == "conf":
            uuid = str(uuidlib.uuid4())
            text = conf_text("0000:09:00.0", 3, 0, uuid, pad=max(pad, 1))
            path.write_bytes(soup[:40] + b"\n" + text.encode())
            if CONF_FILE_NAME.fullmatch(name):
                expected[name] = uuid
        elif kind == "empty_dir":
            path.mkdir()
        elif kind == "full_dir":
            path.mkdir()
            (path / "x").write_bytes(soup)
        elif kind == "link_file":
            path.symlink_to(outside / "dev0gi8ci0.conf")
        elif kind == "link_dir":
            path.symlink_to(outside / "dir")
        elif kind == "link_inside":
            path.symlink_to("../gi")
        else:
            os.mkfifo(path)
    return expected


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(spec=entries)
def test_any_ci_content_yields_conf_files_or_findings_never_escapes(
    spec: dict[str, tuple[str, bytes, int]],
) -> None:
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        expected = _populate(root, spec)
        result = read_registry(directory)

        registry_host = str(root / REGISTRY_PATH.lstrip("/")) + "/"
        for conf in result.conf_files:
            assert conf.path.startswith(REGISTRY_PATH + "/ci/")
            assert conf.host_path.startswith(registry_host)
        for finding in result.findings:
            assert finding.path.startswith(REGISTRY_PATH)
        assert OUTSIDE_UUID not in repr(result)

        # Every entry in ci/ is accounted for, exactly once, as a conf file or a finding.
        conf_names = [r.path.rsplit("/", 1)[1] for r in result.conf_files]
        finding_names = [
            f.path.rsplit("/", 1)[1]
            for f in result.findings
            if f.path.startswith(REGISTRY_PATH + "/ci/") and f.kind != "malformed"
        ]
        assert sorted(conf_names + finding_names) == sorted(spec)
        for name, (kind, _soup, _pad) in spec.items():
            if kind in ("empty_dir", "full_dir"):
                assert name in finding_names
            if kind.startswith("link"):
                assert (
                    "link",
                    f"{REGISTRY_PATH}/ci/{name}",
                ) in [(f.kind, f.path) for f in result.findings]
        # A well-formed conf behind leading junk still yields its uuid.
        for name, uuid in expected.items():
            conf = next(r for r in result.conf_files if r.path.endswith("/" + name))
            assert conf.uuid == uuid

        swept = sweep_poison(directory)
        empties = sorted(f"{REGISTRY_PATH}/ci/{n}" for n, v in spec.items() if v[0] == "empty_dir")
        assert sorted(swept.swept) == empties
        assert (root / "outside" / "empty").is_dir()
        assert (root / "outside" / "dir" / "dev0gi9ci0.conf").is_file()
        assert (root / REGISTRY_PATH.lstrip("/") / "gi").is_dir()


@settings(max_examples=300, deadline=None)
@given(soup=st.binary(max_size=2000))
def test_any_bytes_parse_without_raising(soup: bytes) -> None:
    parsed = parse_conf_text(soup.decode("utf-8", errors="replace"))
    assert parsed.uuid is None or len(parsed.uuid) == 36


@settings(max_examples=200, deadline=None)
@given(
    pad=st.integers(1, 30),
    gi=st.integers(0, 10_000),
    ci=st.integers(0, 100),
    extra=st.lists(
        st.tuples(
            st.from_regex(r"[a-z_]{1,12}", fullmatch=True),
            st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=20),
        ).filter(
            lambda kv: (
                kv[0]
                not in (
                    "pci",
                    "id",
                    "profile_id",
                    "cu_count",
                    "memory_size_MB",
                    "gi_id",
                    "mig_uuid",
                )
            )
        ),
        max_size=3,
        unique_by=lambda kv: kv[0],
    ),
)
def test_blocks_split_by_key_whatever_the_alignment(
    pad: int, gi: int, ci: int, extra: list[tuple[str, str]]
) -> None:
    uuid = str(uuidlib.uuid4())
    text = conf_text("0000:09:00.0", gi, ci, uuid, pad=pad)
    lines = text.splitlines(keepends=True)
    # Unknown keys in the GPU block must not shift the split point.
    lines[1:1] = [f"{key}: {value}\n" for key, value in extra]
    parsed = parse_conf_text("".join(lines))
    assert parsed.gpu["id"] == str(gi)
    assert parsed.compute["gi_id"] == str(gi)
    assert parsed.compute["id"] == str(ci)
    assert parsed.uuid == uuid


@settings(max_examples=100, deadline=None)
@given(contents=st.lists(st.binary(max_size=80), min_size=1, max_size=4))
def test_card_files_yield_pci_addresses_or_findings(contents: list[bytes]) -> None:
    with tempfile.TemporaryDirectory() as directory:
        registry = make_registry(Path(directory))
        for index, content in enumerate(contents):
            (registry / f"dev{index}").write_bytes(content)
        result = read_registry(directory)
        for index, pci in result.cards.items():
            assert index < len(contents)
            assert len(pci) == 12 and pci == pci.lower() and pci[4] == ":" and pci[10] == "."
        malformed = {f.path for f in result.findings if f.kind == "malformed"}
        assert len(result.cards) + len(malformed) == len(contents)
