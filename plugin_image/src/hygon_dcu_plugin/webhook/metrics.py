"""Counters of the webhook's decisions, served in the Prometheus text format."""

from __future__ import annotations

import threading
from collections.abc import Iterable

from hygon_dcu_plugin.webhook.rules import Rule

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_HELP = {
    "hygon_dcu_admission_reviews_total": "Pod admission reviews answered, by decision.",
    "hygon_dcu_admission_denials_total": "Rules broken by denied pods (a pod may break several).",
    "hygon_dcu_admission_bad_requests_total": "Requests refused with an HTTP error, by reason.",
    "hygon_dcu_admission_tls_reloads_total": "Reloads of the serving certificate, by result.",
    "hygon_dcu_admission_tls_handshake_failures_total": "TLS handshakes that failed.",
}


class Metrics:
    """Thread-safe counters; every known series starts at 0 so dashboards see it at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counters: dict[tuple[str, tuple[tuple[str, str], ...]], int] = {}
        for decision in ("allowed", "denied"):
            self._set("hygon_dcu_admission_reviews_total", {"decision": decision})
        for rule in Rule:
            self._set("hygon_dcu_admission_denials_total", {"rule": rule.value})
        for result in ("success", "failure"):
            self._set("hygon_dcu_admission_tls_reloads_total", {"result": result})
        self._set("hygon_dcu_admission_tls_handshake_failures_total", {})

    def _set(self, name: str, labels: dict[str, str], value: int = 0) -> None:
        self._counters[(name, tuple(sorted(labels.items())))] = value

    def _add(self, name: str, labels: dict[str, str]) -> None:
        key = (name, tuple(sorted(labels.items())))
        with self._lock:
            self._counters[key] = self._counters.get(key, 0) + 1

    def review(self, allowed: bool, rules: Iterable[Rule] = ()) -> None:
        decision = "allowed" if allowed else "denied"
        self._add("hygon_dcu_admission_reviews_total", {"decision": decision})
        for rule in sorted(set(rules)):
            self._add("hygon_dcu_admission_denials_total", {"rule": rule.value})

    def bad_request(self, reason: str) -> None:
        self._add("hygon_dcu_admission_bad_requests_total", {"reason": reason})

    def tls_reload(self, success: bool) -> None:
        result = "success" if success else "failure"
        self._add("hygon_dcu_admission_tls_reloads_total", {"result": result})

    def handshake_failure(self) -> None:
        self._add("hygon_dcu_admission_tls_handshake_failures_total", {})

    def render(self) -> str:
        with self._lock:
            counters = sorted(self._counters.items())
        lines: list[str] = []
        current = ""
        for (name, labels), value in counters:
            if name != current:
                current = name
                lines.append(f"# HELP {name} {_HELP[name]}")
                lines.append(f"# TYPE {name} counter")
            if labels:
                text = ",".join(f'{key}="{_escape(val)}"' for key, val in labels)
                lines.append(f"{name}{{{text}}} {value}")
            else:
                lines.append(f"{name} {value}")
        return "\n".join(lines) + "\n"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
