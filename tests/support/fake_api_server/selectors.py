"""Label and field selectors as the API server reads them in a list's query."""

from __future__ import annotations

from typing import Any

# The field selectors the API server supports for the kinds listed here by field.
_FIELDS = {
    "metadata.name": lambda obj: obj["metadata"].get("name", ""),
    "metadata.namespace": lambda obj: obj["metadata"].get("namespace", ""),
    "spec.nodeName": lambda obj: (obj.get("spec") or {}).get("nodeName", ""),
    "status.phase": lambda obj: (obj.get("status") or {}).get("phase", ""),
}


class SelectorError(ValueError):
    pass


def _terms(selector: str) -> list[tuple[str, str, str | None]]:
    """(key, operator, value) per term: =, ==, != take a value; a bare key or !key test
    existence."""
    terms: list[tuple[str, str, str | None]] = []
    for term in filter(None, (t.strip() for t in selector.split(","))):
        for operator in ("!=", "==", "="):
            key, found, value = term.partition(operator)
            if found:
                terms.append((key.strip(), "!=" if operator == "!=" else "=", value.strip()))
                break
        else:
            if term.startswith("!"):
                terms.append((term[1:], "absent", None))
            else:
                terms.append((term, "present", None))
    return terms


def labels_match(obj: dict[str, Any], selector: str) -> bool:
    labels = obj["metadata"].get("labels") or {}
    for key, operator, value in _terms(selector):
        if operator == "=" and labels.get(key) != value:
            return False
        if operator == "!=" and labels.get(key) == value:
            return False
        if operator == "present" and key not in labels:
            return False
        if operator == "absent" and key in labels:
            return False
    return True


def fields_match(obj: dict[str, Any], selector: str) -> bool:
    """Raises SelectorError for a field the API server would not select on."""
    for key, operator, value in _terms(selector):
        read = _FIELDS.get(key)
        if read is None or value is None:
            raise SelectorError(f'field label not supported: "{key}"')
        if (read(obj) == value) != (operator == "="):
            return False
    return True
