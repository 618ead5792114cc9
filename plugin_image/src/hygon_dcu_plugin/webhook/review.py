"""admission.k8s.io/v1 AdmissionReview in, AdmissionReview out (no I/O here)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hygon_dcu_plugin.webhook.rules import Violation, check_pod

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"


class BadReview(ValueError):
    """The body is not an AdmissionReview this webhook can answer (HTTP 400)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass(frozen=True)
class Decision:
    uid: str
    allowed: bool
    violations: list[Violation] = field(default_factory=list)
    # What was reviewed, for the log line.
    operation: str = ""
    namespace: str = ""
    name: str = ""

    def response(self) -> dict[str, Any]:
        answer: dict[str, Any] = {"uid": self.uid, "allowed": self.allowed}
        if not self.allowed:
            answer["status"] = {
                "code": 403,
                "reason": "Forbidden",
                "message": "; ".join(violation.message for violation in self.violations),
            }
        return {"apiVersion": API_VERSION, "kind": KIND, "response": answer}


def parse_body(body: bytes) -> Mapping[str, Any]:
    try:
        document = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
        raise BadReview("invalid-json", f"the body is not JSON: {error}") from error
    if not isinstance(document, Mapping):
        raise BadReview("not-an-object", "the body is JSON but not an object")
    return document


def decide(review: Mapping[str, Any]) -> Decision:
    """Check the request of one AdmissionReview and decide it."""
    if review.get("apiVersion") != API_VERSION or review.get("kind") != KIND:
        raise BadReview(
            "wrong-kind",
            f"expected apiVersion {API_VERSION} kind {KIND}, got apiVersion "
            f"{review.get('apiVersion')!r} kind {review.get('kind')!r}; configure the webhook "
            "with admissionReviewVersions: [v1]",
        )
    request = review.get("request")
    if not isinstance(request, Mapping):
        raise BadReview("no-request", "the AdmissionReview has no request object")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise BadReview("no-uid", "the AdmissionReview request has no uid")
    operation = str(request.get("operation", ""))
    namespace = str(request.get("namespace") or "")
    name = str(request.get("name") or "")
    resource = request.get("resource")
    is_pod = (
        isinstance(resource, Mapping)
        and resource.get("group", "") == ""
        and resource.get("resource") == "pods"
        and not request.get("subResource")
    )
    # Only a pod's CREATE carries resources that can change: extended resources are immutable
    # afterwards (in-place resize covers cpu and memory only), so anything else is admitted.
    if not is_pod or operation != "CREATE":
        return Decision(uid, True, operation=operation, namespace=namespace, name=name)
    pod = request.get("object")
    if not isinstance(pod, Mapping):
        raise BadReview("no-object", "the CREATE request for a pod carries no pod object")
    if not name:
        metadata = pod.get("metadata")
        if isinstance(metadata, Mapping):
            name = str(metadata.get("name") or metadata.get("generateName") or "")
    violations = check_pod(pod)
    return Decision(uid, not violations, violations, operation, namespace, name)
