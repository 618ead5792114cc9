"""Ways a file the plugin reads can be damaged on a node, for the fail-closed suites of
partitions and slices: each leaves a file that must not be trusted (or no file at all)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

Damage = Callable[[Path], None]


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])


def _garble(path: Path) -> None:
    # Every line reversed but a uuid's (still not a file to trust).
    lines = path.read_text().splitlines()
    path.write_text("\n".join(line[::-1] if "uuid" not in line else line for line in lines))


def drop_lines_with(word: str) -> Damage:
    def drop(path: Path) -> None:
        text = path.read_text()
        path.write_text("".join(ln for ln in text.splitlines(True) if word not in ln))

    return drop


def _binary(path: Path) -> None:
    path.write_bytes(bytes(range(256)) * 4)


def _huge(path: Path) -> None:
    # 50 MB whose first lines are the real file: only a size cap can refuse it.
    text = path.read_bytes()
    with path.open("ab") as handle:
        handle.truncate(50 * 1024 * 1024)
    assert path.read_bytes()[: len(text)] == text


def _symlink(path: Path) -> None:
    # The target sits outside the directory, so repairing the link leaves it as it was.
    real = path.parent.parent / "aside"
    path.rename(real)
    path.symlink_to(f"../{real.name}")


def _fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def _directory(path: Path) -> None:
    # What a container runtime leaves when the file it should bind is missing.
    path.unlink()
    path.mkdir()


FILE_DAMAGE: dict[str, Damage] = {
    "truncated": _truncate,
    "garbled": _garble,
    "binary": _binary,
    "50MB": _huge,
    "symlink": _symlink,
    "fifo": _fifo,
    "directory": _directory,
}
