"""The shared fake API server answers the way the API server does for what the suite relies on,
read through the real `kubernetes` client where the product uses it."""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_api_server import Bindings, FakeApiServer, Fault, Hook, Rollout, serving
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

LEASES = "/apis/coordination.k8s.io/v1/namespaces/ns/leases"


def call(
    api: FakeApiServer, method: str, path: str, body: Any = None, content_type: str = ""
) -> tuple[int, Any]:
    connection = http.client.HTTPConnection("127.0.0.1", api.port, timeout=10)
    headers = {"Content-Type": content_type or "application/json"}
    data = None if body is None else json.dumps(body)
    connection.request(method, path, body=data, headers=headers)
    answer = connection.getresponse()
    try:
        return answer.status, json.loads(answer.read() or b"null")
    finally:
        connection.close()


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    yield from serving(FakeApiServer())


@pytest.fixture
def core(api: FakeApiServer, tmp_path: Path) -> client.CoreV1Api:
    return client.CoreV1Api(config.new_client_from_config(str(api.kubeconfig(tmp_path / "k"))))


def pod(name: str, node: str = "", labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml", "labels": labels or {}},
        "spec": {"nodeName": node, "containers": [{"name": "main", "image": "x"}]},
    }


def lease(name: str, renew: str = "2026-01-01T00:00:00.000000Z") -> dict[str, Any]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": "ns", "labels": {"geometry": "v1"}},
        "spec": {"renewTime": renew, "leaseDurationSeconds": 40},
    }


def test_create_fills_the_server_fields_and_refuses_a_second(api: FakeApiServer) -> None:
    status, created = call(api, "POST", LEASES, lease("a"))
    assert status == 201
    assert created["metadata"]["uid"] and created["metadata"]["resourceVersion"]
    assert call(api, "POST", LEASES, lease("a"))[0] == 409
    status, named = call(api, "POST", LEASES, {**lease(""), "metadata": {"generateName": "e-"}})
    assert status == 201 and named["metadata"]["name"].startswith("e-")


def test_update_needs_the_current_resource_version(api: FakeApiServer) -> None:
    created = call(api, "POST", LEASES, lease("a"))[1]
    stale = json.loads(json.dumps(created))
    created["spec"]["leaseDurationSeconds"] = 41
    status, updated = call(api, "PUT", f"{LEASES}/a", created)
    assert status == 200
    assert updated["metadata"]["resourceVersion"] != stale["metadata"]["resourceVersion"]
    assert call(api, "PUT", f"{LEASES}/a", stale)[0] == 409
    stale["metadata"].pop("resourceVersion")
    assert call(api, "PUT", f"{LEASES}/a", stale)[0] == 422


def test_validation_refuses_what_the_api_server_refuses(api: FakeApiServer) -> None:
    status, answer = call(api, "POST", LEASES, lease("a", renew="2026-01-01T00:00:00Z"))
    assert (status, answer["reason"]) == (422, "Invalid")
    assert "MicroTime" in answer["message"]
    bad_key = {**lease("b"), "metadata": {"name": "b", "annotations": {"-x": "1"}}}
    assert call(api, "POST", LEASES, bad_key)[0] == 422
    big = {**lease("c"), "metadata": {"name": "c", "annotations": {"k": "v" * 262_144}}}
    assert "Too long" in call(api, "POST", LEASES, big)[1]["message"]


def test_lists_select_and_page(api: FakeApiServer) -> None:
    for name in "abcde":
        call(api, "POST", LEASES, lease(name))
    api.seed({**lease("unlabelled"), "metadata": {"name": "z", "namespace": "ns"}})
    seen, token, pages = [], "", 0
    while True:
        query = f"?labelSelector=geometry%3Dv1&limit=2&continue={token}"
        page = call(api, "GET", LEASES + query)[1]
        seen += [item["metadata"]["name"] for item in page["items"]]
        pages += 1
        token = page["metadata"].get("continue", "")
        if not token:
            break
    assert (seen, pages) == (list("abcde"), 3)
    assert (
        call(api, "GET", LEASES + "?labelSelector=!geometry")[1]["items"][0]["metadata"]["name"]
        == "z"
    )


def test_field_selectors_and_an_unsupported_one(api: FakeApiServer) -> None:
    api.seed(pod("on-1", node="node-1"))
    api.seed(pod("on-2", node="node-2"))
    names = call(api, "GET", "/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-2")[1]["items"]
    assert [p["metadata"]["name"] for p in names] == ["on-2"]
    assert call(api, "GET", "/api/v1/pods?fieldSelector=spec.schedulerName%3Dx")[0] == 400


def test_merge_patch_keeps_preconditions(api: FakeApiServer, core: client.CoreV1Api) -> None:
    seeded = api.seed(pod("p"))
    uid, version = seeded["metadata"]["uid"], seeded["metadata"]["resourceVersion"]
    patched = core.patch_namespaced_pod(
        "p", "ml", {"metadata": {"uid": uid, "annotations": {"a.example/x": "1"}}}
    )
    assert patched.metadata is not None
    assert patched.metadata.annotations == {"a.example/x": "1"}
    for stale in ({"uid": "other"}, {"resourceVersion": version}):
        with pytest.raises(ApiException) as refused:
            core.patch_namespaced_pod("p", "ml", {"metadata": stale})
        assert refused.value.status == 409
    removed = core.patch_namespaced_pod(
        "p", "ml", {"metadata": {"annotations": {"a.example/x": None}}}
    )
    assert removed.metadata is not None
    assert not removed.metadata.annotations


def test_a_patch_type_not_served_is_refused(tmp_path: Path) -> None:
    with FakeApiServer(patch_types=["application/merge-patch+json"]) as api:
        api.seed(pod("p"))
        status, _body = call(
            api,
            "PATCH",
            "/api/v1/namespaces/ml/pods/p",
            {},
            "application/strategic-merge-patch+json",
        )
        assert status == 415


@pytest.mark.parametrize(("version", "writes"), [("1.20", True), ("1.30", False)])
def test_a_no_op_apply_writes_only_on_1_20(version: str, writes: bool) -> None:
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {}}
    path = "/api/v1/namespaces/ns/configmaps/c?fieldManager=t"
    apply = "application/apply-patch+yaml"
    with FakeApiServer(version, namespaces_must_exist=True) as api:
        assert call(api, "PATCH", path, config_map, apply)[0] == 404  # no namespace yet
        api.seed({"kind": "Namespace", "metadata": {"name": "ns"}})
        first = call(api, "PATCH", path, config_map, apply)[1]
        again = call(api, "PATCH", path, config_map, apply)[1]
        assert (
            again["metadata"]["resourceVersion"] != first["metadata"]["resourceVersion"]
        ) == writes
        assert call(api, "PATCH", path.replace("?fieldManager=t", ""), config_map, apply)[0] == 400


def test_dry_run_stores_nothing(api: FakeApiServer) -> None:
    api.seed(pod("p"))
    assert call(api, "DELETE", "/api/v1/namespaces/ml/pods/p?dryRun=All")[0] == 200
    assert call(api, "POST", LEASES + "?dryRun=All", lease("a"))[0] == 201
    assert api.get("Pod", "p", "ml") is not None and api.get("Lease", "a", "ns") is None


def test_deleting_a_namespace_deletes_what_is_in_it(api: FakeApiServer) -> None:
    api.seed({"kind": "Namespace", "metadata": {"name": "ml"}})
    api.seed(pod("p"))
    assert call(api, "DELETE", "/api/v1/namespaces/ml")[0] == 200
    assert api.objects_of("Pod") == []


def test_faults_and_hooks_act_on_matching_requests(api: FakeApiServer) -> None:
    call(api, "POST", LEASES, lease("a"))
    outage = api.plug(Fault(lambda r: r.is_for("leases"), status=503, times=1))
    assert call(api, "GET", f"{LEASES}/a")[0] == 503
    assert call(api, "GET", f"{LEASES}/a")[0] == 200
    api.unplug(outage)
    api.plug(
        Hook(
            lambda r: r.is_for("leases", method="GET", named=True),
            lambda a, _r: a.change("Lease", "a", "ns", spec={"holderIdentity": "other"}),
            after_request=True,
            times=1,
        )
    )
    read = call(api, "GET", f"{LEASES}/a")[1]
    assert call(api, "PUT", f"{LEASES}/a", read)[0] == 409  # someone wrote in between
    held = threading.Event()
    api.plug(Fault(lambda r: r.is_for("leases"), status=None, hold=held, hold_seconds=0.3))
    started = time.monotonic()
    assert call(api, "GET", f"{LEASES}/a")[0] == 200
    assert time.monotonic() - started >= 0.3
    assert [r.status for r in api.requests_for("leases")][1:3] == [503, 200]


def test_bindings_follow_the_api_servers_rules(api: FakeApiServer) -> None:
    api.plug(Bindings())
    uid = api.seed(pod("p"))["metadata"]["uid"]
    binding = "/api/v1/namespaces/ml/pods/p/binding"
    node = {"kind": "Node", "name": "node-1"}
    assert call(api, "POST", binding, {"metadata": {"uid": "x"}, "target": node})[0] == 409
    assert call(api, "POST", binding, {"metadata": {"uid": uid}, "target": {}})[0] == 422
    status, answer = call(api, "POST", binding, {"metadata": {"uid": uid}, "target": node})
    assert (status, answer["kind"]) == (201, "Status")
    assert api.get("Pod", "p", "ml")["spec"]["nodeName"] == "node-1"  # type: ignore[index]
    assert call(api, "POST", binding, {"metadata": {"uid": uid}, "target": node})[0] == 409
    # A fault a test plugs acts before the standing Bindings answers.
    api.remove("Pod", "p", "ml")
    uid = api.seed(pod("p"))["metadata"]["uid"]
    api.plug(Fault(lambda r: r.path.endswith("/binding"), status=503, times=1))
    assert call(api, "POST", binding, {"metadata": {"uid": uid}, "target": node})[0] == 503
    assert call(api, "POST", binding, {"metadata": {"uid": uid}, "target": node})[0] == 201


def test_rollout_marks_workloads_rolled_out_unless_stalled() -> None:
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}}
    path = "/apis/apps/v1/namespaces/ns/deployments/d"
    for stalled, ready in ((frozenset(), 1), (frozenset({"Deployment"}), None)):
        with FakeApiServer(behaviours=[Rollout(stalled)]) as api:
            api.seed({**deployment, "metadata": {"name": "d", "namespace": "ns"}, "spec": {}})
            answer = call(api, "GET", path)[1]
            assert (answer.get("status") or {}).get("readyReplicas") == ready


def test_an_empty_watch_ends_and_the_log_names_the_access(api: FakeApiServer) -> None:
    api.watch_seconds = 0.2
    connection = http.client.HTTPConnection("127.0.0.1", api.port, timeout=5)
    connection.request("GET", "/api/v1/pods?watch=true")
    assert connection.getresponse().read() == b""
    connection.close()
    assert api.requests[-1].access == ("", "pods", "watch")


@pytest.mark.parametrize(("version", "policy"), [("1.20", "policy/v1beta1"), ("1.21", "policy/v1")])
def test_discovery_serves_each_kind_where_that_minor_does(version: str, policy: str) -> None:
    with FakeApiServer(version) as api:
        assert call(api, "GET", "/version")[1]["minor"] == version.split(".")[1]
        groups = call(api, "GET", "/apis")[1]["groups"]
        assert policy in {g["preferredVersion"]["groupVersion"] for g in groups}
        kinds = {r["kind"] for r in call(api, "GET", f"/apis/{policy}")[1]["resources"]}
        assert kinds == {"PodDisruptionBudget"}
        core = {r["name"] for r in call(api, "GET", "/api/v1")[1]["resources"]}
        assert {"pods", "pods/eviction", "pods/binding", "nodes"} <= core
