"""Least privilege: the role grants each component exactly the API calls its code makes, where
it makes them (cluster-wide, or in the plugin's namespace only), to its own service account."""

from __future__ import annotations

import importlib
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
import yaml
from hygon_dcu_plugin.kube import (
    API_ACCESS,
    LEASE_ACCESS,
    LOST_POD_DELETE_ACCESS,
    NODE_LABEL_ACCESS,
)
from hygon_dcu_plugin.webhook.offered import WEBHOOK_LEASE_ACCESS
from role_render import RoleRun, run_role

from .conftest import ALONE

Calls = tuple[tuple[str, str, str], ...]
# What the extender calls (hygon_dcu_plugin.extender.kube, as last read), for while that module
# is not in the tree: pods read, annotated and bound, Events written, the geometry Leases read.
EXTENDER_CALLS: Calls = (
    ("", "pods", "get"),
    ("", "pods", "list"),
    ("", "pods", "patch"),
    ("", "pods/binding", "create"),
    ("", "events", "create"),
)
EXTENDER_LEASE_CALLS: Calls = (
    ("coordination.k8s.io", "leases", "get"),
    ("coordination.k8s.io", "leases", "list"),
)


def _extender_calls() -> tuple[Calls, Calls] | None:
    """(EXTENDER_ACCESS, EXTENDER_LEASE_ACCESS) of hygon_dcu_plugin.extender.kube, or None
    while that module does not exist."""
    try:
        module = importlib.import_module("hygon_dcu_plugin.extender.kube")
    except ModuleNotFoundError as error:
        if error.name != "hygon_dcu_plugin.extender.kube":
            raise  # it exists and cannot be imported: that fails, it is not skipped
        return None
    return module.EXTENDER_ACCESS, module.EXTENDER_LEASE_ACCESS


NAMESPACE = "hygon-dcu-system"
CLUSTER = "cluster"
LEASES = ("coordination.k8s.io", "leases")
SCHEDULER = "hygon-dcu-scheduler"
EXTENDER = "hygon-dcu-extender"
# kube-scheduler's default lock namespace, away from the Leases every plugin may update
LOCK_NAMESPACE = "kube-system"
WEBHOOK = "hygon-dcu-admission"

# (scope, apiGroup, resource, verb, resourceNames); scope is CLUSTER or a namespace.
Grant = tuple[str, str, str, str, tuple[str, ...]]
# (scope, roleRef kind, roleRef name) of a role the API server ships, not the role.
External = tuple[str, str, str]


def _rules(role: dict[str, Any]) -> set[tuple[str, str, str, tuple[str, ...]]]:
    found = set()
    for rule in role["rules"]:
        assert "nonResourceURLs" not in rule
        names = tuple(rule.get("resourceNames", ()))
        assert "resourceNames" not in rule or names
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    assert "*" not in (group + resource + verb), rule
                    found.add((group, resource, verb, names))
    return found


def _grants(run: RoleRun) -> tuple[dict[str, set[Grant]], dict[str, set[External]]]:
    """What each service account ("namespace/name") is granted, following its bindings."""
    objects = run.objects()
    roles = {
        (obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"]): obj
        for obj in objects
        if obj["kind"] in ("Role", "ClusterRole")
    }
    granted: dict[str, set[Grant]] = defaultdict(set)
    external: dict[str, set[External]] = defaultdict(set)
    for binding in objects:
        if binding["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        scope = binding["metadata"].get("namespace", CLUSTER)
        ref = binding["roleRef"]
        assert ref["apiGroup"] == "rbac.authorization.k8s.io"
        role = roles.get((ref["kind"], "" if ref["kind"] == "ClusterRole" else scope, ref["name"]))
        for subject in binding["subjects"]:
            assert subject["kind"] == "ServiceAccount", binding
            account = f"{subject['namespace']}/{subject['name']}"
            if role is None:
                external[account].add((scope, ref["kind"], ref["name"]))
            else:
                granted[account] |= {(scope, *rule) for rule in _rules(role)}
    return granted, external


def _scoped(scope: str, calls: Calls) -> set[Grant]:
    return {(scope, group, resource, verb, ()) for group, resource, verb in calls}


def test_plugin_and_webhook_rules_equal_the_calls_in_their_code(default_render: RoleRun) -> None:
    # The plugin: pods anywhere (workloads run in every namespace), its geometry Lease in its
    # own namespace only. The webhook: the list of those Leases (webhook/offered.py), no more.
    granted, external = _grants(default_render)
    assert dict(granted) == {
        f"{NAMESPACE}/hygon-dcu-device-plugin": _scoped(CLUSTER, API_ACCESS)
        | _scoped(NAMESPACE, LEASE_ACCESS),
        f"{NAMESPACE}/{WEBHOOK}": _scoped(NAMESPACE, WEBHOOK_LEASE_ACCESS),
    }
    assert dict(external) == {}


@pytest.mark.parametrize(
    ("opt_in", "calls"),
    [
        # pods are deleted only with the opt-in that deletes them
        ("hygon_dcu_device_plugin_delete_pods_with_lost_partitions", LOST_POD_DELETE_ACCESS),
        # nodes are read and labelled only with the opt-in that labels them
        ("hygon_dcu_device_plugin_node_labels", NODE_LABEL_ACCESS),
    ],
)
def test_an_opt_in_adds_exactly_its_own_calls(
    render_dir: Path, default_render: RoleRun, opt_in: str, calls: Calls
) -> None:
    run = run_role(render_dir, **{opt_in: True})
    assert run.returncode == 0, run.output
    granted, _external = _grants(run)
    assert granted[f"{NAMESPACE}/hygon-dcu-device-plugin"] == _scoped(
        CLUSTER, API_ACCESS + calls
    ) | _scoped(NAMESPACE, LEASE_ACCESS)
    defaults = {grant for account in _grants(default_render)[0].values() for grant in account}
    assert not defaults & _scoped(CLUSTER, calls)


def test_events_are_written_never_read_and_nothing_is_deleted_by_default(
    default_render: RoleRun, extender_render: RoleRun
) -> None:
    for run in (default_render, extender_render):
        grants = {grant for account in _grants(run)[0].values() for grant in account}
        assert {
            verb for _scope, _group, resource, verb, _names in grants if resource == "events"
        } == {"create"}
        deleted = {
            resource for _scope, _group, resource, verb, _names in grants if verb == "delete"
        }
        assert deleted == set()
        # Leases are granted in the plugin's namespace only, never cluster-wide; beside it only
        # the second scheduler's lock, by name, where kube-scheduler keeps its own
        assert {
            (scope, names)
            for scope, group, _resource, _verb, names in grants
            if group == LEASES[0] and scope != NAMESPACE
        } <= {(LOCK_NAMESPACE, (SCHEDULER,))}


def test_scheduler_and_extender_beside_it_each_hold_their_own_calls(
    extender_render: RoleRun,
) -> None:
    # One pod runs the second scheduler and the extender (docs/dev/extender.md), two accounts:
    # the pod's is kube-scheduler's, the extender's container mounts a token of its own.
    granted, external = _grants(extender_render)
    account = f"{NAMESPACE}/{SCHEDULER}"
    assert external[account] == {
        (CLUSTER, "ClusterRole", "system:kube-scheduler"),
        (CLUSTER, "ClusterRole", "system:volume-scheduler"),
        ("kube-system", "Role", "extension-apiserver-authentication-reader"),
    }
    # the scheduler's lock: read and renewed by name (system:kube-scheduler creates it), and
    # nothing of the extender's
    assert granted[account] == {
        (LOCK_NAMESPACE, *LEASES, "get", (SCHEDULER,)),
        (LOCK_NAMESPACE, *LEASES, "update", (SCHEDULER,)),
    }
    # the extender: pods anywhere (it binds pods of every namespace), Leases in the plugin's
    cluster, leases = _extender_calls() or (EXTENDER_CALLS, EXTENDER_LEASE_CALLS)
    extender = f"{NAMESPACE}/{EXTENDER}"
    assert granted[extender] == _scoped(CLUSTER, cluster) | _scoped(NAMESPACE, leases)
    assert extender not in external
    # ... and that lock is the one the scheduler's configuration takes
    configmap = extender_render.find("ConfigMap", SCHEDULER)
    (text,) = configmap["data"].values()
    election = yaml.safe_load(text)["leaderElection"]
    assert election["resourceLock"] == "leases"
    assert (election["resourceNamespace"], election["resourceName"]) == (LOCK_NAMESPACE, SCHEDULER)
    # only the role's own service accounts are granted anything
    assert set(granted) | set(external) == {
        f"{NAMESPACE}/{name}" for name in ("hygon-dcu-device-plugin", WEBHOOK, SCHEDULER, EXTENDER)
    }


def test_the_extender_container_acts_as_its_own_account_beside_the_scheduler(
    extender_render: RoleRun,
) -> None:
    # The pod's token (the scheduler's) is not mounted into the extender's container: that path
    # holds the extender's token Secret, which the API server fills for the extender's account.
    pod = extender_render.find("Deployment", SCHEDULER)["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == SCHEDULER
    containers = {container["name"]: container for container in pod["containers"]}
    account_dir = "/var/run/secrets/kubernetes.io/serviceaccount"
    (mount,) = [m for m in containers["extender"]["volumeMounts"] if m["mountPath"] == account_dir]
    assert mount["readOnly"] is True
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    secret = extender_render.find("Secret", volume["secret"]["secretName"])
    assert secret["type"] == "kubernetes.io/service-account-token"
    assert secret["metadata"]["annotations"] == {"kubernetes.io/service-account.name": EXTENDER}
    # the scheduler's container keeps the pod's own token (nothing mounted over it)
    assert account_dir not in {m["mountPath"] for m in containers["kube-scheduler"]["volumeMounts"]}
    # the account is applied before its token Secret (the API server deletes a token Secret
    # whose account does not exist)
    kinds = [(obj["kind"], obj["metadata"]["name"]) for obj in extender_render.objects()]
    assert kinds.index(("ServiceAccount", EXTENDER)) < kinds.index(
        ("Secret", secret["metadata"]["name"])
    )


def test_the_extender_alone_holds_its_own_calls_and_nothing_of_a_schedulers(
    render_dir: Path,
) -> None:
    # For the site's default scheduler the extender runs as its own account: the network-facing
    # process holds no token of kube-scheduler's (which may delete and bind any pod).
    run = run_role(render_dir, **ALONE)
    assert run.returncode == 0, run.output
    granted, external = _grants(run)
    cluster, leases = _extender_calls() or (EXTENDER_CALLS, EXTENDER_LEASE_CALLS)
    account = f"{NAMESPACE}/hygon-dcu-extender"
    assert granted[account] == _scoped(CLUSTER, cluster) | _scoped(NAMESPACE, leases)
    assert account not in external
    assert set(granted) | set(external) == {
        f"{NAMESPACE}/{name}" for name in ("hygon-dcu-device-plugin", WEBHOOK, "hygon-dcu-extender")
    }


def test_the_extender_code_lists_its_calls() -> None:
    # While the module is missing the test above checks the last known calls: say so.
    calls = _extender_calls()
    if calls is None:
        pytest.skip("hygon_dcu_plugin.extender.kube is not in the tree: checked against a copy")
    assert calls == (EXTENDER_CALLS, EXTENDER_LEASE_CALLS), "update EXTENDER_CALLS here"


def test_each_binding_names_its_own_workload_only(
    default_render: RoleRun, extender_render: RoleRun
) -> None:
    for run in (default_render, extender_render):
        accounts = {
            obj["metadata"]["name"]
            for obj in run.objects()
            if obj["kind"] == "ServiceAccount" and obj["metadata"]["namespace"] == NAMESPACE
        }
        users = {}
        for obj in run.objects():
            if obj["kind"] in ("DaemonSet", "Deployment"):
                spec = obj["spec"]["template"]["spec"]
                users[obj["metadata"]["name"]] = spec.get("serviceAccountName", "default")
        # every service account is used by exactly the workload of its name; beside the second
        # scheduler the extender's by its container (the test above)
        workloads = accounts - ({EXTENDER} if SCHEDULER in users else set())
        assert {name: users[name] for name in workloads} == {name: name for name in workloads}
        for binding in run.objects():
            if not binding["kind"].endswith("RoleBinding"):
                continue
            (subject,) = binding["subjects"]
            assert subject["namespace"] == NAMESPACE
            assert subject["name"] in accounts
            if binding["metadata"].get("namespace", NAMESPACE) != NAMESPACE:
                # outside the role's namespace: the API server's own reader Role and the
                # scheduler's lock
                assert (binding["metadata"]["namespace"], binding["roleRef"]["name"]) in {
                    ("kube-system", "extension-apiserver-authentication-reader"),
                    (LOCK_NAMESPACE, SCHEDULER),
                }
        for role in run.objects():
            if role["kind"] == "Role" and role["metadata"]["namespace"] != NAMESPACE:
                assert (role["metadata"]["namespace"], role["metadata"]["name"]) == (
                    LOCK_NAMESPACE,
                    SCHEDULER,
                )


def test_webhook_reads_the_leases_where_the_plugins_write_them(default_render: RoleRun) -> None:
    # Its token is mounted for one call, the list of the geometry Leases, in the namespace the
    # plugins publish them in (their POD_NAMESPACE: the role's namespace).
    pod_spec = default_render.find("Deployment", WEBHOOK)["spec"]["template"]["spec"]
    assert pod_spec["automountServiceAccountToken"] is True
    assert pod_spec["serviceAccountName"] == WEBHOOK
    (container,) = pod_spec["containers"]
    assert f"--geometry-namespace={NAMESPACE}" in container["args"]
    plugin = default_render.find("DaemonSet", "hygon-dcu-device-plugin")["spec"]["template"]
    env = {e["name"]: e for e in plugin["spec"]["containers"][0].get("env", [])}
    assert env["POD_NAMESPACE"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert default_render.find("DaemonSet", "hygon-dcu-device-plugin")["metadata"]["namespace"] == (
        NAMESPACE
    )
