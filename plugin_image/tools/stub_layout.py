"""Lay out protoc's Python output so it passes the collection's pep8 and pylint sanity tests.

protoc emits the serialized descriptor as one line thousands of characters long, two-space
indentation, `a=b` assignments and, in the gRPC modules, an unused `import warnings`. ansible-test
sanity checks every Python file of the collection and allows no ignore entries, so the generator
rewrites the layout, never the meaning: the descriptor is split into implicitly concatenated bytes
literals, then the pinned `ruff format` (tests/requirements.txt) lays the file out. A test compares
the syntax trees before and after.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

_DESCRIPTOR = re.compile(
    r"^(?P<head>DESCRIPTOR = _descriptor_pool\.Default\(\)\.AddSerializedFile\()"
    r"(?P<data>b'.*')\)$",
    re.MULTILINE,
)
_CHUNK = 32  # bytes per line: the repr of 32 bytes stays far below pep8's 160 columns


def _split_descriptor(text: str) -> str:
    def split(match: re.Match[str]) -> str:
        data = ast.literal_eval(match.group("data"))
        chunks = [data[i : i + _CHUNK] for i in range(0, len(data), _CHUNK)]
        body = "\n".join(f"    {chunk!r}" for chunk in chunks)
        return f"{match.group('head')}\n{body}\n)"

    return _DESCRIPTOR.sub(split, text)


def _drop_unused_warnings_import(text: str) -> str:
    tree = ast.parse(text)
    used = any(isinstance(node, ast.Name) and node.id == "warnings" for node in ast.walk(tree))
    return text if used else text.replace("import warnings\n", "", 1)


def _ruff_format(text: str) -> str:
    ruff = Path(sys.executable).with_name("ruff")
    result = subprocess.run(
        [str(ruff), "format", "--isolated", "--line-length", "100", "-"],
        input=text,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise SystemExit(f"ruff format failed on generated code: {result.stderr}")
    return result.stdout


def lay_out(name: str, content: bytes) -> bytes:
    """The generated file `name` with a sanity-clean layout (same syntax tree, modulo the
    unused import)."""
    if not name.endswith(".py"):
        return content
    text = content.decode("utf-8")
    if name.endswith("_pb2.py"):
        text = _split_descriptor(text)
    elif name.endswith("_pb2_grpc.py"):
        text = _drop_unused_warnings_import(text)
    return _ruff_format(text).encode("utf-8")
