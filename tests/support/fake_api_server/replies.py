"""What the fake answers: a status code and a JSON body, a Status body for failures."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Reply:
    status: int
    body: Any


def status_body(code: int, reason: str, message: str = "") -> dict[str, Any]:
    """A metav1.Status as the API server sends it."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success" if code < 400 else "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def failure(code: int, reason: str, message: str = "") -> Reply:
    return Reply(code, status_body(code, reason, message))
