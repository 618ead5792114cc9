"""The guard on the product's own accounts' pod UPDATEs (webhook/pod_writes.py): each may change
its own keys and nothing else; every other user is not checked. Decided by ``review.decide`` on
reviews shaped as the API server sends them, and once over HTTPS through the running server.

The cluster tier sends the real accounts' real patches through the real API server
(tests/cluster/e2e/test_10_deploy.py, test_60_extender.py).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hygon_dcu_plugin.request import Reason
from hygon_dcu_plugin.vocabulary import (
    RESERVATION_ANNOTATION,
    RESERVED_LABEL,
    annotation_key,
)
from hygon_dcu_plugin.webhook.pod_writes import MAX_GRANT_CHARS, UNGUARDED, PodWriters
from hygon_dcu_plugin.webhook.review import BadReview, decide
from webhook_support import Authority, admission_review, serving

PLUGIN = "system:serviceaccount:hygon-dcu-system:hygon-dcu-device-plugin"
EXTENDER = "system:serviceaccount:hygon-dcu-system:hygon-dcu-extender"
WRITERS = PodWriters(PLUGIN, EXTENDER)
GRANT = '{"card": "0000:3b:00.0", "container": "train", "placement": "0:2", "profile": "2g.16gb"}'


def stored_pod() -> dict[str, Any]:
    """A pod as the API server holds it: owned, labelled, annotated, with managed fields."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "train-7d9f",
            "namespace": "ml",
            "uid": "6f1e2c0a-4b8e-4c1e-9d7a-2f0c3b5a9e11",
            "resourceVersion": "4711",
            "labels": {"app": "train", "pod-template-hash": "7d9f"},
            "annotations": {
                "team": "vision",
                annotation_key("sidecar"): GRANT,
                RESERVATION_ANNOTATION: '{"v": 0}',
            },
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "train", "uid": "r-1"}
            ],
            "managedFields": [{"manager": "kube-controller-manager", "operation": "Update"}],
        },
        "spec": {
            "serviceAccountName": "default",
            "containers": [
                {"name": "train", "image": "registry.example/train:1"},
                {"name": "sidecar", "image": "registry.example/sidecar:1"},
            ],
            "tolerations": [],
        },
        "status": {"phase": "Pending"},
    }


def _review_of(change: Callable[[dict[str, Any]], None], username: str) -> dict[str, Any]:
    old = stored_pod()
    new = copy.deepcopy(old)
    change(new)
    # What the API server itself rewrites on the write, whoever makes it.
    new["metadata"]["managedFields"].append({"manager": "writer", "operation": "Update"})
    new["metadata"]["resourceVersion"] = "4712"
    return admission_review(new, operation="UPDATE", old_object=old, username=username)


def _annotate(key: str, value: str | None) -> Callable[[dict[str, Any]], None]:
    def change(pod: dict[str, Any]) -> None:
        annotations = pod["metadata"].setdefault("annotations", {})
        if value is None:
            annotations.pop(key, None)
        else:
            annotations[key] = value

    return change


def _label(key: str, value: str | None) -> Callable[[dict[str, Any]], None]:
    def change(pod: dict[str, Any]) -> None:
        if value is None:
            pod["metadata"]["labels"].pop(key, None)
        else:
            pod["metadata"]["labels"][key] = value

    return change


def _both(*changes: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    def change(pod: dict[str, Any]) -> None:
        for one in changes:
            one(pod)

    return change


def _image(pod: dict[str, Any]) -> None:
    pod["spec"]["containers"][0]["image"] = "attacker.example/miner:latest"


def _orphan(pod: dict[str, Any]) -> None:
    del pod["metadata"]["ownerReferences"]


def _toleration(pod: dict[str, Any]) -> None:
    pod["spec"]["tolerations"].append({"operator": "Exists"})


def _reserved_first(pod: dict[str, Any]) -> None:
    pod["metadata"]["annotations"][RESERVATION_ANNOTATION] = '{"v": 1}'
    pod["metadata"]["labels"][RESERVED_LABEL] = "true"


def _decided(change: Callable[[dict[str, Any]], None], username: str) -> tuple[bool, str]:
    decision = decide(_review_of(change, username), writers=WRITERS)
    return decision.allowed, decision.message()


ALLOWED = [
    ("plugin adds a grant", PLUGIN, _annotate(annotation_key("train"), GRANT)),
    ("plugin rewrites a grant", PLUGIN, _annotate(annotation_key("sidecar"), GRANT + " ")),
    ("plugin's grant key of a long name", PLUGIN, _annotate(annotation_key("c" * 63), GRANT)),
    ("plugin only touches server fields", PLUGIN, lambda pod: None),
    ("extender reserves", EXTENDER, _reserved_first),
    ("extender's label removed", EXTENDER, _label(RESERVED_LABEL, None)),
    ("someone else changes the image", "kubernetes-admin", _image),
    ("a controller orphans the pod", "system:serviceaccount:kube-system:gc", _orphan),
    ("another account of the namespace", "system:serviceaccount:hygon-dcu-system:x", _image),
]


@pytest.mark.parametrize(
    ("username", "change"),
    [(username, change) for _id, username, change in ALLOWED],
    ids=[case[0] for case in ALLOWED],
)
def test_allowed(username: str, change: Callable[[dict[str, Any]], None]) -> None:
    assert _decided(change, username) == (True, "")


DENIED = [
    ("plugin relabels", PLUGIN, _label("app", "payments"), "label app"),
    ("plugin adds a label", PLUGIN, _label("stolen", "1"), "label stolen"),
    ("plugin changes the image", PLUGIN, _image, "it changes spec"),
    ("plugin adds a toleration", PLUGIN, _toleration, "it changes spec"),
    ("plugin orphans the pod", PLUGIN, _orphan, "metadata.ownerReferences"),
    ("plugin rewrites another annotation", PLUGIN, _annotate("team", "x"), "annotation team"),
    (
        "plugin removes a grant",
        PLUGIN,
        _annotate(annotation_key("sidecar"), None),
        f"annotation {annotation_key('sidecar')}",
    ),
    (
        "plugin writes the reservation",
        PLUGIN,
        _annotate(RESERVATION_ANNOTATION, "{}"),
        f"annotation {RESERVATION_ANNOTATION}",
    ),
    (
        "plugin's grant too long",
        PLUGIN,
        _annotate(annotation_key("train"), "x" * (MAX_GRANT_CHARS + 1)),
        f"({MAX_GRANT_CHARS + 1} characters, at most {MAX_GRANT_CHARS})",
    ),
    (
        "extender writes a grant",
        EXTENDER,
        _annotate(annotation_key("train"), GRANT),
        f"annotation {annotation_key('train')}",
    ),
    (
        "extender sets its label to another value",
        EXTENDER,
        _label(RESERVED_LABEL, "false"),
        f"label {RESERVED_LABEL}",
    ),
    (
        "extender removes the reservation",
        EXTENDER,
        _annotate(RESERVATION_ANNOTATION, None),
        f"annotation {RESERVATION_ANNOTATION}",
    ),
    (
        "extender's reservation too long",
        EXTENDER,
        _annotate(RESERVATION_ANNOTATION, "x" * (16 * 1024 + 1)),
        "(16385 characters, at most 16384)",
    ),
    (
        "extender reserves and relabels",
        EXTENDER,
        _both(_reserved_first, _label("app", "payments")),
        "label app",
    ),
]


@pytest.mark.parametrize(
    ("username", "change", "names"),
    [(username, change, names) for _id, username, change, names in DENIED],
    ids=[case[0] for case in DENIED],
)
def test_denied(username: str, change: Callable[[dict[str, Any]], None], names: str) -> None:
    allowed, message = _decided(change, username)
    assert not allowed
    assert names in message
    who = "the device plugin" if username == PLUGIN else "the scheduler extender"
    assert message.startswith(f"{who}'s account may change only its own keys of a pod")
    assert "rotate it" in message


def test_the_denial_counts_as_its_own_rule() -> None:
    decision = decide(_review_of(_image, PLUGIN), writers=WRITERS)
    assert decision.findings.rules == frozenset({Reason.WRITE_BEYOND_OWN_KEYS})
    assert decision.response()["response"]["status"]["code"] == 403


def test_many_changes_are_named_a_few_and_counted() -> None:
    def many(pod: dict[str, Any]) -> None:
        for index in range(50):
            pod["metadata"]["labels"][f"l{index:02}"] = "x"

    allowed, message = _decided(many, PLUGIN)
    assert not allowed
    assert "label l00, label l01, label l02 and 47 more" in message
    assert len(message) < 1000


def test_a_server_without_the_usernames_checks_no_update() -> None:
    assert decide(_review_of(_image, PLUGIN), writers=UNGUARDED).allowed


@pytest.mark.parametrize(
    ("breakage", "reason"),
    [
        (lambda request: request.update(oldObject=None), "no-object"),
        (lambda request: request.pop("object"), "no-object"),
        (lambda request: request["object"].update(metadata=[]), "not-a-pod"),
        (lambda request: request["oldObject"]["metadata"].update(labels="x"), "not-a-pod"),
        (lambda request: request["object"]["metadata"].update(annotations=[1]), "not-a-pod"),
    ],
)
def test_a_guarded_update_that_is_not_two_pods_is_a_bad_review(
    breakage: Callable[[dict[str, Any]], object], reason: str
) -> None:
    review = _review_of(_image, PLUGIN)
    breakage(review["request"])
    with pytest.raises(BadReview) as raised:
        decide(review, writers=WRITERS)
    assert raised.value.reason == reason


def test_an_unguarded_user_is_not_read_further() -> None:
    review = _review_of(_image, "kubernetes-admin")
    review["request"]["oldObject"] = None  # nothing about the pods is needed for it
    assert decide(review, writers=WRITERS).allowed


def test_the_running_server_denies_with_the_usernames_it_was_given(
    tmp_path: Path, authority: Authority
) -> None:
    with serving(tmp_path, authority, writers=WRITERS) as running:
        status, answer = running.review(_review_of(_label("app", "payments"), PLUGIN))
        assert status == 200
        assert answer["response"]["allowed"] is False
        assert "label app" in answer["response"]["status"]["message"]
        status, answer = running.review(_review_of(_reserved_first, EXTENDER))
        assert (status, answer["response"]["allowed"]) == (200, True)
        series = 'hygon_dcu_admission_denials_total{rule="write-beyond-own-keys"}'
        assert running.metric(series) == 1.0
