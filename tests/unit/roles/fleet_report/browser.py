"""Headless Chromium for the fleet report's page: the DOM after rendering (``--dump-dom``), a
screenshot (``--screenshot``) and a small PNG reader (the standard library has none), so tests
can check what a person opening the page would see."""

from __future__ import annotations

import shutil
import struct
import subprocess
import zlib
from dataclasses import dataclass
from pathlib import Path

WINDOW = (1280, 1400)


def chromium() -> str | None:
    return shutil.which("chromium")


def _argv(user_data_dir: Path) -> list[str]:
    binary = chromium()
    assert binary is not None
    return [
        binary,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={user_data_dir}",
        "--hide-scrollbars",
        "--force-device-scale-factor=1",
        f"--window-size={WINDOW[0]},{WINDOW[1]}",
    ]


def dump_dom(page: Path, user_data_dir: Path) -> str:
    proc = subprocess.run(
        [*_argv(user_data_dir), "--dump-dom", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return proc.stdout


def screenshot(page: Path, png: Path, user_data_dir: Path) -> Path:
    subprocess.run(
        [*_argv(user_data_dir), f"--screenshot={png}", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert png.is_file(), f"chromium wrote no screenshot at {png}"
    return png


@dataclass(frozen=True)
class Image:
    width: int
    height: int
    channels: int
    rows: list[bytes]

    def pixel(self, x: int, y: int) -> tuple[int, int, int]:
        row, at = self.rows[y], x * self.channels
        return row[at], row[at + 1], row[at + 2]


def _paeth(a: int, b: int, c: int) -> int:
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    if pa <= pb and pa <= pc:
        return a
    return b if pb <= pc else c


def read_png(path: Path) -> Image:
    """8-bit RGB or RGBA, non-interlaced: what Chromium's screenshots are."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    at, idat = 8, b""
    width = height = channels = 0
    while at < len(data):
        (length,) = struct.unpack(">I", data[at : at + 4])
        kind, body = data[at + 4 : at + 8], data[at + 8 : at + 8 + length]
        at += 12 + length
        if kind == b"IHDR":
            width, height, depth, colour, _c, _f, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and colour in (2, 6) and interlace == 0, (depth, colour, interlace)
            channels = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += body
        elif kind == b"IEND":
            break
    raw = zlib.decompress(idat)
    stride = width * channels
    rows: list[bytes] = []
    previous = bytearray(stride)
    for y in range(height):
        start = y * (stride + 1)
        method, line = raw[start], bytearray(raw[start + 1 : start + 1 + stride])
        if method == 1:
            for i in range(channels, stride):
                line[i] = (line[i] + line[i - channels]) & 0xFF
        elif method == 2:
            line = bytearray((a + b) & 0xFF for a, b in zip(line, previous, strict=True))
        elif method == 3:
            for i in range(stride):
                left = line[i - channels] if i >= channels else 0
                line[i] = (line[i] + ((left + previous[i]) >> 1)) & 0xFF
        elif method == 4:
            for i in range(stride):
                left = line[i - channels] if i >= channels else 0
                up_left = previous[i - channels] if i >= channels else 0
                line[i] = (line[i] + _paeth(left, previous[i], up_left)) & 0xFF
        else:
            assert method == 0, f"PNG filter {method}"
        rows.append(bytes(line))
        previous = line
    return Image(width, height, channels, rows)
