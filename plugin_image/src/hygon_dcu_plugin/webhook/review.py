"""admission.k8s.io/v1 AdmissionReview in, AdmissionReview out (no I/O here).

Every answer is bounded whatever the review: the parse by ``serving.body``, the strings echoed
back or logged by the caps below, the denial message by ``pod_rules.MAX_MESSAGE_CHARS`` (it says how
many violations it leaves out).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hygon_dcu_plugin.pod_rules import (
    Findings,
    Offered,
    OfferedSlices,
    read_pod,
)
from hygon_dcu_plugin.serving.body import BadBody
from hygon_dcu_plugin.webhook.pod_writes import UNGUARDED, NotAPod, PodWriters, check_update

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"
# The API server's uids are UUIDs (36 characters); one far longer is not from it.
MAX_UID_CHARS = 128
# Namespaces and names are DNS names, at most 253 characters; longer ones are cut in the log.
MAX_NAME_CHARS = 253


class BadReview(BadBody):
    """The body is JSON but not an AdmissionReview this webhook can answer (HTTP 400)."""


# What a review that checks nothing finds: it is admitted.
NOTHING_FOUND = Findings([], 0, frozenset())


@dataclass(frozen=True)
class Decision:
    uid: str
    findings: Findings
    # What was reviewed, for the log line.
    operation: str = ""
    namespace: str = ""
    name: str = ""

    @property
    def allowed(self) -> bool:
        return self.findings.total == 0

    def message(self) -> str:
        """The violations' messages joined and bounded (``Findings.message``)."""
        return self.findings.message()

    def response(self) -> dict[str, Any]:
        answer: dict[str, Any] = {"uid": self.uid, "allowed": self.allowed}
        if not self.allowed:
            answer["status"] = {"code": 403, "reason": "Forbidden", "message": self.message()}
        return {"apiVersion": API_VERSION, "kind": KIND, "response": answer}


def decide(
    review: Mapping[str, Any],
    offered: Offered = None,
    slice_cards: OfferedSlices = None,
    writers: PodWriters = UNGUARDED,
) -> Decision:
    """Check the request of one AdmissionReview and decide it: a pod's CREATE by the rules of
    ``pod_rules.check_pod`` (``offered`` and ``slice_cards`` are what the nodes publish), a
    pod's UPDATE by one of the product's ``writers`` by ``pod_writes``."""
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
    if not isinstance(uid, str) or not uid or len(uid) > MAX_UID_CHARS:
        raise BadReview(
            "no-uid",
            f"the AdmissionReview request has no uid (a string of 1 to {MAX_UID_CHARS} characters)",
        )
    operation = _text(request.get("operation"))
    namespace = _text(request.get("namespace"))
    name = _text(request.get("name"))
    resource = request.get("resource")
    is_pod = (
        isinstance(resource, Mapping)
        and resource.get("group", "") == ""
        and resource.get("resource") == "pods"
        and not request.get("subResource")
    )
    if is_pod and operation == "UPDATE":
        return Decision(uid, _check_writer(request, writers), operation, namespace, name)
    # Only a pod's CREATE carries resources that can change: extended resources are immutable
    # afterwards (in-place resize covers cpu and memory only), so anything else is admitted.
    if not is_pod or operation != "CREATE":
        return Decision(uid, NOTHING_FOUND, operation, namespace, name)
    pod = request.get("object")
    if not isinstance(pod, Mapping):
        raise BadReview("no-object", "the CREATE request for a pod carries no pod object")
    if not name:
        metadata = pod.get("metadata")
        if isinstance(metadata, Mapping):
            name = _text(metadata.get("name")) or _text(metadata.get("generateName"))
    findings = read_pod(pod, offered, slice_cards=slice_cards).findings
    return Decision(uid, findings, operation, namespace, name)


def _check_writer(request: Mapping[str, Any], writers: PodWriters) -> Findings:
    """A pod UPDATE: checked when one of the product's accounts makes it, else admitted."""
    user = request.get("userInfo")
    username = user.get("username") if isinstance(user, Mapping) else None
    writable = writers.writable(username if isinstance(username, str) else "")
    if writable is None:
        return NOTHING_FOUND
    new, old = request.get("object"), request.get("oldObject")
    if not isinstance(new, Mapping) or not isinstance(old, Mapping):
        raise BadReview("no-object", "the UPDATE request for a pod lacks object or oldObject")
    try:
        violation = check_update(old, new, writable)
    except NotAPod as error:
        raise BadReview("not-a-pod", str(error)) from error
    if violation is None:
        return NOTHING_FOUND
    return Findings([violation], 1, frozenset({violation.reason}))


def _text(value: object) -> str:
    """A string field of the review for the log: "" unless a string, cut when too long."""
    if not isinstance(value, str):
        return ""
    return value if len(value) <= MAX_NAME_CHARS else value[:MAX_NAME_CHARS] + "..."
