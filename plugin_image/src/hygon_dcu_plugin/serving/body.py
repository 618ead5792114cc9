"""A request body as one JSON object, parsed within a memory bound (``bounded_json``), and the
refusals the HTTPS servers answer for it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hygon_dcu_plugin.serving import bounded_json


class BadBody(ValueError):
    """The body is not a document this server can answer (HTTP 400); ``reason`` is the
    ``bad_requests_total`` label."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


class BodyTooCostly(BadBody):
    """Parsing the body would take more memory than allowed (HTTP 413)."""


def parse_body(body: bytes, max_cost: int) -> Mapping[str, Any]:
    """The body as a JSON object; BadBody when it is not, before parsing when too costly."""
    try:
        document = bounded_json.loads(body, max_cost)
    except bounded_json.JsonRefused as error:
        if error.too_costly:
            raise BodyTooCostly("body-too-complex", error.message) from error
        raise BadBody("invalid-json", error.message) from error
    if not isinstance(document, Mapping):
        raise BadBody("not-an-object", "the body is JSON but not an object")
    return document
