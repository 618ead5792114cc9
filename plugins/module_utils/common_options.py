# Copyright: hygon.dcu contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The options the node modules share, specified once.

Each function returns the ``argument_spec`` entries documented by one doc fragment of
``plugins/doc_fragments/node.py`` (validate-modules checks that the two agree); a module merges
them into its own spec: ``argument_spec={"state": ..., **host_root_spec(), **library_spec()}``.
Fresh dicts every call, so no module can change another's spec.

Also the one definition of what a number option accepts (``whole_number``, ``seconds``): ASCII
digits only, finite, in range.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable
from typing import Any

Spec = dict[str, dict[str, Any]]

HY_SMI = "hy-smi"

# Longest wait or interval an option takes, in seconds: anything longer is a typo.
MAX_SECONDS = 86400
# The kernel's largest pid_max.
MAX_PID = 4194304
# Decimal seconds in ASCII: "2", "0.5", ".5". float() also takes "nan", "inf", "1e3", "1_0"
# and any Unicode digit, none of which an operator means as a number of seconds.
_ASCII_DECIMAL = re.compile(r"[0-9]+(?:\.[0-9]+)?|\.[0-9]+")


def host_root_spec() -> Spec:
    """``host_root``: fragment ``hygon.dcu.node``."""
    return {"host_root": {"type": "path", "default": "/"}}


def library_spec() -> Spec:
    """``library_path``: fragment ``hygon.dcu.node.library``."""
    return {"library_path": {"type": "path"}}


def hy_smi_spec() -> Spec:
    """``hy_smi_path``: fragment ``hygon.dcu.node.hy_smi``."""
    return {"hy_smi_path": {"type": "path"}}


# retry_interval's range in seconds: shorter is a busy loop, longer outlasts any sane wait.
RETRY_MIN = 0.01
RETRY_MAX = 3600.0


def retry_spec() -> Spec:
    """``wait_timeout`` and ``retry_interval``: fragment ``hygon.dcu.node.retry``."""
    return {
        "wait_timeout": {"type": "raw", "default": 0},
        "retry_interval": {"type": "raw", "default": 2.0},
    }


def retry_options(params: dict[str, Any]) -> tuple[int, float]:
    """(wait_timeout, retry_interval) from the module's parameters; ValueError names a bad one."""
    wait_timeout = whole_number(params["wait_timeout"], "wait_timeout")
    retry_interval = seconds(params["retry_interval"], "retry_interval", RETRY_MIN, RETRY_MAX)
    return wait_timeout, retry_interval


def find_hy_smi(
    configured: str | None, which: Callable[[str], str | None]
) -> tuple[str | None, str | None]:
    """(path, refusal) for the vendor tool named by the ``hy_smi_path`` option.

    ``which`` looks a command name up on the node (the module's ``get_bin_path``, which searches
    the task's ``PATH``). A value with a ``/`` must be an executable file; a bare name, like the
    default ``hy-smi``, is looked up with ``which``.
    """
    if configured and "/" in configured:
        if not (os.path.isfile(configured) and os.access(configured, os.X_OK)):
            return None, (
                f"hy_smi_path {configured} is not an executable file; point it at the vendor's "
                "hy-smi (usually under /opt/hyhal/bin)"
            )
        return configured, None
    name = configured or HY_SMI
    found = which(name)
    if found is None:
        return None, (
            f"{name} was not found on PATH; install the vendor's tools (hyhal) or set "
            "hy_smi_path to its location"
        )
    return found, None


def is_ascii_number(text: str) -> bool:
    """True for one or more of the ASCII digits 0-9 and nothing else.

    ``str.isdigit()`` and ``int()`` also take other scripts' digits (U+0660 ARABIC-INDIC DIGIT
    ZERO is 0 to ``int()``) and ``isdigit()`` superscripts (U+00B2 SUPERSCRIPT TWO), which no
    option, card index or pid is written with.
    """
    return text.isascii() and text.isdigit()


def whole_number(value: Any, name: str, maximum: int = MAX_SECONDS) -> int:
    """``value`` (an int, an integral float or ASCII digits) as an int from 0 to ``maximum``.

    Options read with this are declared ``type: raw``: Ansible's ``int`` type takes any Unicode
    digit. Raises ValueError with the refusal to show.
    """
    number: int | None = None
    if isinstance(value, bool):
        number = None
    elif isinstance(value, int):
        number = value
    elif isinstance(value, float) and math.isfinite(value) and value.is_integer():
        number = int(value)
    elif isinstance(value, str) and is_ascii_number(value.strip()):
        number = int(value.strip())
    if number is None or not 0 <= number <= maximum:
        raise ValueError(
            f"{name} must be a whole number from 0 to {maximum} written with the ASCII digits "
            f"0-9; got {value!a}"
        )
    return number


def seconds(value: Any, name: str, minimum: float, maximum: float = MAX_SECONDS) -> float:
    """``value`` (an int, a float or ASCII decimal text) as a finite float in [minimum, maximum].

    Options read with this are declared ``type: raw``: Ansible's ``float`` type takes "nan",
    "inf" and any Unicode digit. Raises ValueError with the refusal to show.
    """
    number: float | None = None
    if isinstance(value, bool):
        number = None
    elif isinstance(value, (int, float)):
        try:
            number = float(value)
        except OverflowError:  # an int too large for a float
            number = None
    elif isinstance(value, str) and _ASCII_DECIMAL.fullmatch(value.strip()):
        number = float(value.strip())
    if number is None or not (math.isfinite(number) and minimum <= number <= maximum):
        raise ValueError(
            f"{name} must be a number of seconds from {minimum:g} to {maximum:g} written with the "
            f"ASCII digits 0-9 and an optional decimal point; got {value!a}"
        )
    return number
