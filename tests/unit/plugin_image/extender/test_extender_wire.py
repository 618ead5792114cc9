"""The extender's wire format as kube-scheduler 1.20 speaks it (Go field names, no JSON tags)
and as later releases do (lower-case tags), and malformed bodies: a 400 with a reason, never
an exception or a 500 (hypothesis, against the real HTTPS server)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hygon_dcu_plugin.extender.wire import (
    MAX_NODES,
    MAX_REASON_CHARS,
    WireError,
    binding_result,
    filter_result,
    parse_args,
    parse_binding,
    priority_list,
)
from hygon_dcu_plugin.vocabulary import COMPUTE_UNITS, FAMILY, MEMORY_MIB, PROFILE_PREFIX
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from webhook_support import Authority

from .fake_cluster import FakeCluster
from .support import T0, Geometries, profile_limits, serving, text

UID = "6f0c3c5e-2b1a-4d8e-9a51-0d2b8f9c7e11"
POD: dict[str, Any] = {
    "metadata": {"name": "train", "namespace": "ml", "uid": UID},
    "spec": {"containers": [{"name": "main", "resources": {"limits": profile_limits("2g.15gb")}}]},
}


@pytest.mark.parametrize(
    "keys",
    [
        ("Pod", "Nodes", "NodeNames"),  # 1.20: Go field names
        ("pod", "nodes", "nodenames"),  # later releases' tags
        ("POD", "nodes", "nodeNames"),  # Go matches any case
    ],
)
def test_extender_args_are_read_whatever_the_case_of_their_keys(keys: tuple[str, ...]) -> None:
    pod_key, nodes_key, names_key = keys
    args = parse_args({pod_key: POD, nodes_key: None, names_key: ["node-a", "node-b", "node-a"]})
    assert (args.pod.namespace, args.pod.name, args.pod.uid) == ("ml", "train", UID)
    assert args.node_names == ("node-a", "node-b")  # once each, in order
    assert args.pod_object is POD


@pytest.mark.parametrize(
    "keys",
    [
        ("PodName", "PodNamespace", "PodUID", "Node"),
        ("podName", "podNamespace", "podUID", "node"),
        ("podname", "podnamespace", "poduid", "NODE"),
    ],
)
def test_binding_args_are_read_whatever_the_case_of_their_keys(keys: tuple[str, ...]) -> None:
    values = ("train", "ml", UID, "node-a")
    args = parse_binding(dict(zip(keys, values, strict=True)))
    assert (args.pod.name, args.pod.namespace, args.pod.uid, args.node) == values


def test_answers_use_the_lower_case_keys_every_release_reads() -> None:
    # 1.20 decodes them case-insensitively into NodeNames, FailedNodes, Error, Host, Score.
    assert filter_result(["a"], {"b": "why"}) == {
        "nodenames": ["a"],
        "failedNodes": {"b": "why"},
        "error": "",
    }
    assert filter_result([], {})["nodenames"] == []  # a list, never null
    assert priority_list({"a": 3}) == [{"host": "a", "score": 3}]
    assert binding_result() == {"error": ""}
    long = filter_result([], {"b": "x" * 5000})["failedNodes"]["b"]
    assert len(long) == MAX_REASON_CHARS and long.endswith("...")


def _binding(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"PodName": "train", "PodNamespace": "ml", "PodUID": UID, "Node": "n"}
    return {**base, **changes}


@pytest.mark.parametrize(
    ("document", "reason", "says"),
    [
        ([], "not-an-object", "is not a JSON object"),
        ({"NodeNames": ["a"]}, "no-pod", "no Pod object"),
        ({"Pod": {"spec": {}}, "NodeNames": ["a"]}, "no-pod", "no metadata"),
        ({"Pod": {"metadata": POD["metadata"]}, "NodeNames": ["a"]}, "no-pod", "no spec"),
        ({"Pod": POD}, "no-nodes", "no NodeNames"),
        ({"Pod": POD, "Nodes": {"items": []}}, "node-list", "nodeCacheCapable: true"),
        ({"Pod": POD, "NodeNames": "node-a"}, "bad-nodes", "not a list"),
        ({"Pod": POD, "NodeNames": ["Node_A"]}, "bad-name", "NodeNames[0] 'Node_A'"),
        ({"Pod": POD, "NodeNames": [7]}, "bad-name", "NodeNames[0] is not a name"),
        ({"Pod": POD, "NodeNames": ["a"] * (MAX_NODES + 1)}, "too-many-nodes", "at most"),
        ({"Pod": POD, "pod": POD, "NodeNames": ["a"]}, "duplicate-field", "Pod twice"),
        (
            {"Pod": {**POD, "metadata": {**POD["metadata"], "uid": "../x"}}, "NodeNames": ["a"]},
            "bad-uid",
            "not a pod uid",
        ),
        (
            {"Pod": {**POD, "metadata": {**POD["metadata"], "namespace": "a.b"}}},
            "bad-name",
            "DNS label",
        ),
    ],
)
def test_malformed_extender_args_are_refused_with_a_reason(
    document: object, reason: str, says: str
) -> None:
    with pytest.raises(WireError) as refused:
        parse_args(document)
    assert refused.value.reason == reason
    assert says in refused.value.message
    assert "\n" not in refused.value.message


@pytest.mark.parametrize(
    ("document", "says"),
    [
        ({}, "PodNamespace is not a name"),
        (_binding(Node="a/b"), "Node 'a/b' must be a DNS subdomain"),
        (_binding(PodName=None), "PodName is not a name"),
        (_binding(PodUID=""), "PodUID is not a pod uid"),
        (_binding(PodNamespace="x" * 64), "DNS label"),
        ("bind", "is not a JSON object"),
    ],
)
def test_malformed_binding_args_are_refused_with_a_reason(document: object, says: str) -> None:
    with pytest.raises(WireError) as refused:
        parse_binding(document)
    assert says in refused.value.message


_json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)  # int64: longer numbers are a 400 (bounded_json)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
_keys = st.sampled_from(
    ["Pod", "pod", "Nodes", "NodeNames", "nodenames", "PodName", "PodNamespace", "PodUID", "Node"]
)
_pods = st.fixed_dictionaries(
    {
        "metadata": st.fixed_dictionaries(
            {"name": st.sampled_from(["train", "", "A", 3]), "namespace": st.just("ml")},
            optional={"uid": st.sampled_from([UID, "", None, 7])},
        ),
        "spec": st.dictionaries(
            st.sampled_from(["containers", "initContainers", "ephemeralContainers"]),
            st.lists(
                st.dictionaries(
                    st.sampled_from(["name", "resources", "restartPolicy"]),
                    _json_values
                    | st.fixed_dictionaries(
                        {"limits": st.dictionaries(st.text(max_size=40), _json_values, max_size=3)}
                    ),
                ),
                max_size=3,
            )
            | _json_values,
        ),
    }
)
_names = st.lists(st.sampled_from(["node-a", "node-b", "Node_A", ""]) | _json_values, max_size=3)
# A valid envelope with one member off: what reaches the checks after the first ones.
_near_valid = st.fixed_dictionaries(
    {"Pod": st.just(POD)},
    optional={"NodeNames": _names | _json_values, "Nodes": _json_values},
) | st.fixed_dictionaries(
    {},
    optional={
        "PodName": st.just("train") | _json_values,
        "PodNamespace": st.just("ml") | _json_values,
        "PodUID": st.just(UID) | _json_values,
        "Node": st.just("node-a") | _json_values,
    },
)
_documents = _near_valid | st.dictionaries(
    _keys, _json_values | _pods | st.lists(st.text(max_size=12)), max_size=5
)


@settings(max_examples=300, deadline=None)
@given(_documents | _json_values)
def test_any_json_gives_args_or_a_wire_error(document: object) -> None:
    for parse in (parse_args, parse_binding):
        try:
            parse(document)
        except WireError as error:
            assert error.reason and "\n" not in error.message


_limits = st.dictionaries(
    st.sampled_from(
        [
            FAMILY,
            PROFILE_PREFIX + "2g.15gb",
            PROFILE_PREFIX + "9g",
            MEMORY_MIB,
            COMPUTE_UNITS,
            "cpu",
        ]
    ),
    st.sampled_from(["1", "2", "0", "20000", "1e9999", "-1", "500m", ""]) | _json_values,
    max_size=4,
)
# Envelopes the scheduler could send, around pods of any shape: these must be decided (200).
_envelopes = st.builds(
    lambda containers, key: {
        "Pod": {"metadata": POD["metadata"], "spec": {key: containers}},
        "NodeNames": ["node-a"],
        "PodName": "train",
        "PodNamespace": "ml",
        "PodUID": UID,
        "Node": "node-a",
    },
    st.lists(
        st.fixed_dictionaries(
            {"name": st.sampled_from(["main", "side", "main"])},
            optional={"resources": st.fixed_dictionaries({}, optional={"limits": _limits})},
        ),
        max_size=3,
    ),
    st.sampled_from(["containers", "initContainers"]),
)


def test_the_server_answers_any_body_with_200_or_a_4xx_never_a_500(
    tmp_path: Path, authority: Authority, cluster: FakeCluster, geometries: Geometries
) -> None:
    cluster.put_lease("node-a", text(geometries.empty()), renewed=T0)
    decided = st.tuples(st.sampled_from(["/filter", "/prioritize"]), _envelopes)
    bodies = st.one_of(
        _documents.map(lambda d: json.dumps(d).encode()),
        _json_values.map(lambda d: json.dumps(d).encode()),
        st.binary(max_size=64),
        st.sampled_from([b"", b"{", b'{"Pod": NaN}', b"[" * 5000, b'{"Pod":' + b"1" * 40 + b"}"]),
    )
    with serving(tmp_path, authority, cluster) as running:

        @settings(
            max_examples=120,
            deadline=None,
            suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        )
        @given(st.sampled_from(["/filter", "/prioritize", "/bind"]), bodies)
        def check(path: str, body: bytes) -> None:
            status, answer = running.request("POST", path, body)
            assert status in (200, 400, 413), (status, answer)
            if status != 200:
                assert json.loads(answer)["reason"]

        @settings(
            max_examples=80,
            deadline=None,
            suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        )
        @given(decided)
        def decide(case: tuple[str, dict[str, Any]]) -> None:
            path, document = case
            status, answer = running.post(path, document)
            assert status == 200, answer

        @settings(
            max_examples=150,
            deadline=None,
            suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        )
        @given(st.sampled_from(["/filter", "/prioritize", "/bind"]), _near_valid)
        def near(path: str, document: dict[str, Any]) -> None:
            status, answer = running.post(path, document)
            assert status in (200, 400), (status, answer)

        check()
        decide()
        near()
        assert running.metric('hygon_dcu_extender_bad_requests_total{reason="invalid-json"}') > 0
        assert (
            running.metric('hygon_dcu_extender_request_duration_seconds_count{verb="filter"}') > 0
        )


def test_wrong_methods_paths_and_content_types_are_refused(
    tmp_path: Path, authority: Authority, cluster: FakeCluster
) -> None:
    with serving(tmp_path, authority, cluster) as running:
        assert running.request("GET", "/filter")[0] == 405
        assert running.request("POST", "/healthz", b"{}")[0] == 405
        assert running.request("POST", "/preempt", b"{}")[0] == 404
        status, body = running.request("POST", "/bind", b"{}", content_type="text/plain")
        assert status == 415
        assert b"send application/json" in body
