# Copyright: hygon.dcu contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Loading a vendor C library with ctypes: the first candidate dlopen accepts, RTLD_LOCAL, and
each symbol resolved with its argument types the first time it is called, so a missing symbol
fails that call only. The two vendor bindings (``hydmi``, ``dmi``) each give their names,
signatures and how a return code becomes an exception."""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

# Tried under host_root when the dynamic loader's default search fails.
LIBRARY_DIRS = ("/opt/hyhal/lib", "/opt/dtk/lib")


class LoadFailure(Exception):
    """The library could not be opened, or does not export a symbol we call."""

    def __init__(self, call: str, missing_symbol: bool, detail: str) -> None:
        self.call = call
        self.missing_symbol = missing_symbol
        self.detail = detail
        super().__init__(f"{call}: {detail}")


def library_candidates(
    names: Sequence[str], host_root: str = "/", library_path: str | None = None
) -> list[str]:
    """Paths handed to dlopen, in order. An explicit path is the only candidate."""
    if library_path:
        return [library_path]
    candidates = list(names)
    for directory in LIBRARY_DIRS:
        base = os.path.join(host_root, directory.lstrip("/"))
        candidates.extend(os.path.join(base, name) for name in names)
    return candidates


class SharedLibrary:
    """One loaded copy of a library; ``function`` raises LoadFailure, never returns None."""

    def __init__(
        self,
        candidates: list[str],
        signatures: Mapping[str, tuple[Any, ...]],
    ) -> None:
        self.candidates = candidates
        self.signatures = signatures
        self.path: str | None = None
        self._dll: ctypes.CDLL | None = None
        self._functions: dict[str, Callable[..., int]] = {}
        self.load_failure: LoadFailure | None = None
        failures: list[str] = []
        for candidate in candidates:
            try:
                self._dll = ctypes.CDLL(candidate, mode=os.RTLD_LOCAL)
            except OSError as exc:
                failures.append(f"{candidate}: {exc}")
                continue
            self.path = candidate
            return
        self.load_failure = LoadFailure("dlopen", False, "tried " + "; ".join(failures))

    @property
    def loaded(self) -> bool:
        return self._dll is not None

    def function(self, name: str) -> Callable[..., int]:
        cached = self._functions.get(name)
        if cached is not None:
            return cached
        if self._dll is None:
            detail = self.load_failure.detail if self.load_failure else "not loaded"
            raise LoadFailure(name, False, detail)
        try:
            function = getattr(self._dll, name)
        except AttributeError:
            raise LoadFailure(name, True, "symbol not exported") from None
        function.argtypes = self.signatures[name]
        function.restype = ctypes.c_int
        self._functions[name] = function
        return function  # type: ignore[no-any-return]


def text_field(raw: bytes) -> str:
    """A C string field: up to its first NUL, undecodable bytes replaced."""
    return raw.split(b"\0", 1)[0].decode("utf-8", errors="replace")
