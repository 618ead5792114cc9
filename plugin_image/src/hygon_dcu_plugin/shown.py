"""How names and values from a pod spec appear in messages: bounded whatever the input.

A valid name is at most 63 characters (a container) or 253 (a resource), so only invalid ones
are ever cut; values are shown as written, short, and never as a whole structure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

MAX_SHOWN_CHARS = 100
# Lists of names in one message show this many, then how many more there are.
MAX_SHOWN_NAMES = 3
# Ints above this many bits have more than MAX_SHOWN_CHARS digits; they are never turned into
# text (which Python refuses anyway beyond 4300 digits).
_MAX_SHOWN_BITS = 332


def shorten(text: str) -> str:
    if len(text) <= MAX_SHOWN_CHARS:
        return text
    return f"{text[:MAX_SHOWN_CHARS]}... ({len(text)} characters)"


def show_value(value: object) -> str:
    """A value from the pod as a message shows it."""
    if isinstance(value, str):
        return repr(value) if len(value) <= MAX_SHOWN_CHARS else shorten(repr(value))
    if isinstance(value, int) and value.bit_length() > _MAX_SHOWN_BITS:
        return f"a number of more than {MAX_SHOWN_CHARS} digits"
    if value is None or isinstance(value, (bool, int, float)):
        text = repr(value)
        return text if len(text) <= MAX_SHOWN_CHARS else f"a number of {len(text)} digits"
    return f"a JSON {'object' if isinstance(value, Mapping) else type(value).__name__}"


def show_names(names: Sequence[str]) -> str:
    """The first names, shortened, and how many more there are."""
    return listing([shorten(name) for name in names[:MAX_SHOWN_NAMES]], len(names))


def listing(shown: Iterable[str], count: int) -> str:
    """``shown`` (the first few of ``count`` items) joined, with how many more there are."""
    items = list(shown)
    text = ", ".join(items)
    if count > len(items):
        text += f" and {count - len(items)} more"
    return text
