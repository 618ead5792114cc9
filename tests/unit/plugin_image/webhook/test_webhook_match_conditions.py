"""The ValidatingWebhookConfiguration's matchConditions CEL, evaluated on pods.

The expression decides which pods depend on the webhook being up (failurePolicy: Fail): it must
send every pod the rules would deny and no pod without a hygon.com/ resource. It is evaluated
with cel-python, a CEL implementation independent of the API server's cel-go; the semantics
used here (has() on absent fields, exists() over list elements and map keys, startsWith) are
core CEL and behave the same in both.
"""

from __future__ import annotations

from typing import Any

import pytest
from webhook_pod_cases import CASES, FAMILY, P2G, Case, container, pod
from webhook_support import Rendered

celpy = pytest.importorskip("celpy", reason="cel-python (pip install cel-python) evaluates CEL")


def _program(expression: str) -> Any:
    environment = celpy.Environment()
    return environment.program(environment.compile(expression))


@pytest.fixture(scope="module")
def match_condition(renders: dict[str, Rendered]) -> Any:
    rendered = renders["defaults"]
    assert rendered.returncode == 0, rendered.output
    (condition,) = rendered.documents["validatingwebhookconfiguration"]["webhooks"][0][
        "matchConditions"
    ]
    return _program(condition["expression"])


def _selects(program: Any, pod_object: dict[str, Any]) -> bool:
    result = program.evaluate({"object": celpy.json_to_cel(pod_object)})
    assert isinstance(result, celpy.celtypes.BoolType), result
    return bool(result)


def test_every_pod_the_rules_deny_is_sent() -> None:
    """Consistency of the table itself: a denied pod that the condition skipped would be
    created unchecked."""
    assert all(case.matched for case in CASES if not case.allowed)


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.id)
def test_table(match_condition: Any, case: Case) -> None:
    assert _selects(match_condition, case.pod) is case.matched


@pytest.mark.parametrize(
    ("pod_object", "selected"),
    [
        ({"spec": {"containers": [{"name": "a"}]}}, False),
        ({"spec": {"containers": [{"name": "a", "resources": {}}], "initContainers": []}}, False),
        ({"spec": {"containers": [{"name": "a", "resources": {"requests": {"cpu": "1"}}}]}}, False),
        ({"spec": {"containers": [{"name": "a", "resources": {"requests": {FAMILY: "1"}}}]}}, True),
        (
            {
                "spec": {
                    "containers": [{"name": "a"}],
                    "initContainers": [{"name": "i", "resources": {"limits": {P2G: "1"}}}],
                }
            },
            True,
        ),
        (
            {
                "spec": {
                    "containers": [{"name": "a"}],
                    "initContainers": [{"name": "i", "resources": {"requests": {P2G: "1"}}}],
                }
            },
            True,
        ),
        (
            {
                "spec": {
                    "containers": [
                        {
                            "name": "a",
                            "resources": {
                                "limits": {
                                    "nothygon.com/dcu": "1",
                                    "hygon.community/x": "1",
                                    "example.com/hygon.com/": "1",
                                }
                            },
                        }
                    ]
                }
            },
            False,
        ),
        (
            {
                "spec": {
                    "containers": [{"name": "a"}],
                    "ephemeralContainers": [{"name": "e", "resources": {"limits": {FAMILY: "1"}}}],
                }
            },
            False,
        ),
        # No containers at all cannot happen for a valid pod; it still must not error.
        ({"spec": {}}, False),
    ],
    ids=[
        "no-resources",
        "empty-resources-and-init",
        "cpu-only",
        "requests-only",
        "init-limits",
        "init-requests",
        "look-alike-names",
        "ephemeral-only",
        "no-containers",
    ],
)
def test_absent_fields_and_look_alikes(
    match_condition: Any, pod_object: dict[str, Any], selected: bool
) -> None:
    assert _selects(match_condition, pod_object) is selected


def test_has_guards_are_needed() -> None:
    """Without has(), a pod with no initContainers is an evaluation error, which the API
    server treats as a webhook failure: with failurePolicy Fail every such pod would be
    refused. This is why the expression guards each optional field."""
    unguarded = _program("object.spec.initContainers.exists(c, has(c.resources))")
    plain = pod(container("app"))
    with pytest.raises(celpy.CELEvalError):
        unguarded.evaluate({"object": celpy.json_to_cel(plain)})


@pytest.mark.parametrize(
    ("username", "sent"),
    [
        ("system:serviceaccount:hygon-dcu-system:hygon-dcu-device-plugin", True),
        ("system:serviceaccount:hygon-dcu-system:hygon-dcu-extender", True),
        ("system:serviceaccount:hygon-dcu-system:hygon-dcu-scheduler", False),
        ("system:serviceaccount:other:hygon-dcu-device-plugin", False),
        ("kubernetes-admin", False),
        ("", False),
    ],
)
def test_pod_updates_are_sent_for_the_two_accounts_only(
    renders: dict[str, Rendered], username: str, sent: bool
) -> None:
    """With matchConditions no other user's pod update depends on the webhook being up."""
    (condition,) = renders["defaults"].documents["validatingwebhookconfiguration"]["webhooks"][1][
        "matchConditions"
    ]
    request = celpy.json_to_cel({"userInfo": {"username": username}})
    result = _program(condition["expression"]).evaluate({"request": request})
    assert isinstance(result, celpy.celtypes.BoolType), result
    assert bool(result) is sent
