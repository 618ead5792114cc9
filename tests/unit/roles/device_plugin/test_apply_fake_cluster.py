"""The role's cluster path (server-side apply, rollout waits, the webhook Secret read back,
state absent) against the shared fake API server (tests/support/fake_api_server), serving
server-side apply only: any other PATCH is refused (415), and so is any POST or PUT (405), so
the role cannot fall back to client-side apply without a test noticing.

One cluster (Kubernetes 1.30) serves the whole module, in order: install (with the Grafana
dashboard), install again, compare with render mode, remove. A 1.20 cluster, whose server
rewrites managedFields on an apply that changes nothing, checks check mode, the objects 1.20
accepts and a second run. A cluster whose Deployment never rolls out checks the rollout wait
and its report. Another one takes the scheduler extender: enabled, again, then disabled (which
removes it); another the webhook, disabled after a run; another the NetworkPolicies, on, across
an extender mode switch and the webhook's removal, then off. Clusters without the Prometheus
Operator or the dashboard's namespace check the refusals of monitoring they cannot take.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from admission_config import client_config
from fake_api_server import FakeApiServer, Fault, Rollout, serving
from fake_api_server.patching import APPLY_PATCH
from fake_api_server.server import without_server_fields
from role_render import RoleRun, run_role

from .conftest import ALONE, EXTENDER_ON, POLICY_ON

FIELD_MANAGER = "hygon.dcu"
NAMESPACE = "hygon-dcu-system"

# Several playbook runs against the fake: tens of seconds.
pytestmark = pytest.mark.slow


def _apply_only(version: str = "1.30", *, stalled: frozenset[str] = frozenset()) -> FakeApiServer:
    """A cluster of Kubernetes ``version`` that takes writes by server-side apply (and DELETE)
    only, refuses a namespaced object whose Namespace does not exist, and rolls out DaemonSets
    and Deployments unless their kind is ``stalled``."""
    return FakeApiServer(
        version,
        patch_types=[APPLY_PATCH],
        namespaces_must_exist=True,
        behaviours=[
            Rollout(stalled),
            Fault(
                lambda request: request.method in ("POST", "PUT"),
                status=405,
                reason="MethodNotAllowed",
                message="this cluster takes server-side apply only",
            ),
        ],
    )


def _cluster_run(
    api: FakeApiServer, tmp_path: Path, *, check: bool = False, **extra_vars: Any
) -> RoleRun:
    """The playbook against the fake: no render dir, the fake's kubeconfig."""
    kubeconfig = api.kubeconfig(tmp_path / "kubeconfig")
    return run_role(
        tmp_path / "unused",
        check=check,
        hygon_dcu_device_plugin_render_dir="",
        hygon_dcu_kubeconfig=str(kubeconfig),
        **extra_vars,
    )


def _key(obj: dict[str, Any]) -> tuple[str, str, str]:
    metadata = obj["metadata"]
    return obj["kind"], metadata.get("namespace", ""), metadata["name"]


@pytest.fixture(scope="module")
def api() -> Iterator[FakeApiServer]:
    yield from serving(_apply_only())


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cluster")


# The module's installation carries the Grafana dashboard: of the monitoring objects, the one
# a cluster without the Prometheus Operator takes. It comes last, after what it shows.
DASHBOARD_ON = {"hygon_dcu_device_plugin_grafana_dashboard": True}
DASHBOARD = ("ConfigMap", NAMESPACE, "hygon-dcu-dashboard")


@pytest.fixture(scope="module")
def installed(api: FakeApiServer, workdir: Path) -> RoleRun:
    run = _cluster_run(api, workdir, **DASHBOARD_ON)
    assert run.returncode == 0, run.output
    return run


def test_install_applies_every_object_server_side(
    api: FakeApiServer, installed: RoleRun, default_render: RoleRun
) -> None:
    assert installed.changed and installed.changed > 0
    rendered = [_key(obj) for obj in default_render.objects()] + [DASHBOARD]
    applied = [event.removeprefix("apply ") for event in api.history if event.startswith("apply ")]
    assert applied == [f"{kind}/{name}" for kind, _namespace, name in rendered]
    assert sorted(api.objects) == sorted(rendered)
    writes = [request for request in api.requests if request.method != "GET"]
    assert writes
    for request in writes:
        assert request.method == "PATCH", request
        assert request.content_type == APPLY_PATCH, request
        assert request.query.get("fieldManager") == FIELD_MANAGER, request
        assert request.query.get("force") == "true", request


def test_install_waits_for_rollouts_before_the_webhook_configuration(
    api: FakeApiServer, installed: RoleRun
) -> None:
    events = api.history
    assert installed.returncode == 0
    for kind, name in (
        ("DaemonSet", "hygon-dcu-device-plugin"),
        ("Deployment", "hygon-dcu-admission"),
    ):
        assert events.index(f"apply {kind}/{name}") < events.index(f"rolled out {kind}/{name}")
    assert events.index("rolled out Deployment/hygon-dcu-admission") < events.index(
        "apply ValidatingWebhookConfiguration/hygon-dcu-admission"
    )


def test_second_install_changes_nothing(
    api: FakeApiServer, installed: RoleRun, workdir: Path
) -> None:
    assert installed.returncode == 0
    before = {key: obj["metadata"]["resourceVersion"] for key, obj in api.objects.items()}
    secret = api.get("Secret", "hygon-dcu-admission-tls", NAMESPACE)
    events = len(api.history)

    second = _cluster_run(api, workdir, **DASHBOARD_ON)

    assert second.returncode == 0, second.output
    assert second.changed == 0, second.output
    assert api.history[events:] == []
    assert {key: obj["metadata"]["resourceVersion"] for key, obj in api.objects.items()} == before
    # the serving certificate was read back from the cluster and kept
    assert api.get("Secret", "hygon-dcu-admission-tls", NAMESPACE) == secret


def test_cluster_holds_what_render_mode_writes(
    api: FakeApiServer, installed: RoleRun, tmp_path: Path
) -> None:
    assert installed.returncode == 0
    secret = api.get("Secret", "hygon-dcu-admission-tls", NAMESPACE)
    assert secret is not None
    # render mode reads the Secret of an earlier render as apply mode reads the cluster's
    render_dir = tmp_path / "render"
    render_dir.mkdir(mode=0o700)
    (render_dir / "manifests.yaml").write_text(yaml.safe_dump(without_server_fields(secret)))

    rendered = run_role(render_dir)

    assert rendered.returncode == 0, rendered.output
    stored = [without_server_fields(api.objects[_key(obj)]) for obj in rendered.objects()]
    assert stored == rendered.objects()


def test_absent_removes_every_object(api: FakeApiServer, installed: RoleRun, workdir: Path) -> None:
    assert installed.returncode == 0
    assert api.objects

    dashboard = api.get("ConfigMap", DASHBOARD[2], NAMESPACE)
    assert dashboard and dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"

    removed = _cluster_run(api, workdir, hygon_dcu_device_plugin_state="absent", **DASHBOARD_ON)

    assert removed.returncode == 0, removed.output
    assert removed.changed and removed.changed > 0
    assert api.objects == {}
    deletes = [request for request in api.requests if request.method == "DELETE"]
    assert deletes
    for request in deletes:
        assert (request.body or {}).get("propagationPolicy") == "Foreground", request
    assert api.history[-1] == f"delete Namespace/{NAMESPACE}"


@pytest.fixture
def stalled_api() -> Iterator[FakeApiServer]:
    api = _apply_only(stalled=frozenset({"Deployment"}))
    # what the Deployment controller and the kubelet would have left behind
    api.seed(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "hygon-dcu-admission-7d9f-abcde",
                "namespace": NAMESPACE,
                "labels": {"app.kubernetes.io/name": "hygon-dcu-admission"},
            },
            "spec": {"nodeName": "gpu-node-7", "containers": [{"name": "webhook"}]},
            "status": {
                "phase": "Pending",
                "containerStatuses": [
                    {
                        "name": "webhook",
                        "ready": False,
                        "state": {"waiting": {"reason": "ContainerCreating"}},
                    }
                ],
            },
        }
    )
    api.seed(
        {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": "hygon-dcu-admission-7d9f-abcde.1", "namespace": NAMESPACE},
            "involvedObject": {"kind": "Pod", "name": "hygon-dcu-admission-7d9f-abcde"},
            "type": "Warning",
            "reason": "FailedMount",
            "message": 'secret "hygon-dcu-admission-tls" not found',
        }
    )
    yield from serving(api)


def test_webhook_configuration_waits_for_a_rolled_out_deployment(
    stalled_api: FakeApiServer, tmp_path: Path
) -> None:
    run = _cluster_run(stalled_api, tmp_path, hygon_dcu_device_plugin_wait_timeout=1)

    assert run.returncode != 0
    assert stalled_api.get("Deployment", "hygon-dcu-admission", NAMESPACE) is not None
    # failurePolicy Fail: pointing pods at a webhook with no ready pod would refuse them all
    assert stalled_api.get("ValidatingWebhookConfiguration", "hygon-dcu-admission") is None
    # the failure says where to look: namespace, selector, node, and what was seen there
    report = run.output.replace("\\n", " ").replace('\\"', '"')
    assert f"Deployment {NAMESPACE}/hygon-dcu-admission is not ready" in report
    assert "pod selector app.kubernetes.io/name=hygon-dcu-admission" in report
    assert "Pod hygon-dcu-admission-7d9f-abcde on node gpu-node-7:" in report
    assert "phase Pending" in report
    assert "waiting: ContainerCreating" in report
    assert 'FailedMount: secret "hygon-dcu-admission-tls" not found' in report


@pytest.fixture(scope="module")
def api_1_20() -> Iterator[FakeApiServer]:
    yield from serving(_apply_only("1.20"))


@pytest.mark.floor
def test_kubernetes_1_20_check_mode_install_and_second_run(
    api_1_20: FakeApiServer, tmp_path: Path
) -> None:
    predicted = _cluster_run(api_1_20, tmp_path, check=True)
    assert predicted.returncode == 0, predicted.output
    assert api_1_20.objects == {}, "check mode wrote to the cluster"

    installed = _cluster_run(api_1_20, tmp_path)
    assert installed.returncode == 0, installed.output
    assert installed.changed == predicted.changed
    assert installed.changed and installed.changed > 0
    # what 1.20 serves: policy/v1beta1, and no matchConditions (the server refuses them)
    pdb = api_1_20.get("PodDisruptionBudget", "hygon-dcu-admission", NAMESPACE)
    assert pdb is not None and pdb["apiVersion"] == "policy/v1beta1"
    webhook_configuration = api_1_20.get("ValidatingWebhookConfiguration", "hygon-dcu-admission")
    assert webhook_configuration is not None
    client_config(webhook_configuration)  # both webhooks there
    assert all("matchConditions" not in webhook for webhook in webhook_configuration["webhooks"])

    before = {key: obj["metadata"]["resourceVersion"] for key, obj in api_1_20.objects.items()}
    events = len(api_1_20.history)
    second = _cluster_run(api_1_20, tmp_path)
    assert second.returncode == 0, second.output
    # a real apply of an unchanged object would still write on 1.20 ("no-op apply" in the history)
    assert second.changed == 0, second.output
    assert api_1_20.history[events:] == []
    assert {key: obj["metadata"]["resourceVersion"] for key, obj in api_1_20.objects.items()} == (
        before
    )


def _with_kube_system() -> Iterator[FakeApiServer]:
    """A fake API server holding the API server's own namespace, where the second scheduler's
    authentication-reader binding and its lock go."""
    api = _apply_only()
    api.seed(
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": "kube-system", "resourceVersion": "1"},
        }
    )
    yield from serving(api)


@pytest.fixture(scope="module")
def api_extender() -> Iterator[FakeApiServer]:
    yield from _with_kube_system()


def _extenders(keys: Any) -> set[tuple[str, str, str]]:
    return {key for key in keys if key[2].startswith(("hygon-dcu-extender", "hygon-dcu-scheduler"))}


def test_extender_is_applied_kept_and_removed_when_disabled(
    api_extender: FakeApiServer, extender_render: RoleRun, tmp_path: Path
) -> None:
    api = api_extender
    # An earlier version's Service, which let schedulers outside the pod call the extender.
    api.seed(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "name": "hygon-dcu-extender",
                "namespace": "hygon-dcu-system",
                "resourceVersion": "1",
            },
            "spec": {"ports": [{"port": 443, "targetPort": "extender"}]},
        }
    )
    installed = _cluster_run(api, tmp_path, **EXTENDER_ON)
    assert installed.returncode == 0, installed.output
    rendered = [_key(obj) for obj in extender_render.objects()]
    assert _extenders(api.objects) == _extenders(rendered)  # the Service is gone
    assert "delete Service/hygon-dcu-extender" in api.history
    # the pod last, once what it mounts and is granted exists, and waited for
    assert api.history.index("apply Deployment/hygon-dcu-scheduler") > max(
        api.history.index(f"apply {kind}/{name}")
        for kind, _namespace, name in _extenders(rendered)
        if kind != "Deployment"
    )
    assert "rolled out Deployment/hygon-dcu-scheduler" in api.history

    before = {key: obj["metadata"]["resourceVersion"] for key, obj in api.objects.items()}
    events = len(api.history)
    second = _cluster_run(api, tmp_path, **EXTENDER_ON)
    assert second.returncode == 0, second.output
    assert second.changed == 0, second.output
    assert api.history[events:] == []
    assert {key: obj["metadata"]["resourceVersion"] for key, obj in api.objects.items()} == before

    # for the default scheduler instead: the second scheduler's pod and what only it used go
    # before the extender alone starts (never two extenders, each with its own reservations)
    events = len(api.history)
    switched = _cluster_run(api, tmp_path, **ALONE)
    assert switched.returncode == 0, switched.output
    after = api.history[events:]
    assert after.index("delete Deployment/hygon-dcu-scheduler") < after.index(
        "apply Deployment/hygon-dcu-extender"
    )
    alone = _extenders(api.objects)
    assert not [key for key in alone if key[2].startswith("hygon-dcu-scheduler")]
    assert ("Service", "hygon-dcu-system", "hygon-dcu-extender") in alone
    again = _cluster_run(api, tmp_path, **ALONE)
    assert again.returncode == 0, again.output
    assert again.changed == 0, again.output

    # disabled: check mode predicts the removal and deletes nothing ...
    requests = len(api.requests)
    predicted = _cluster_run(api, tmp_path, check=True)
    assert predicted.returncode == 0, predicted.output
    assert predicted.changed == 1, predicted.output  # the deletion task
    writes = [r for r in api.requests[requests:] if r.method != "GET"]
    assert [r for r in writes if r.query.get("dryRun") != "All"] == []
    assert _extenders(api.objects) == alone
    # ... a run removes exactly the extender's objects, its pod first ...
    others = {key: obj for key, obj in api.objects.items() if key not in alone}
    events = len(api.history)
    disabled = _cluster_run(api, tmp_path)
    assert disabled.returncode == 0, disabled.output
    assert disabled.changed == predicted.changed, disabled.output
    deleted = api.history[events:]
    assert deleted[0] == "delete Deployment/hygon-dcu-extender"
    assert sorted(deleted) == sorted(f"delete {kind}/{name}" for kind, _namespace, name in alone)
    assert api.objects == others
    # ... and once they are gone, a disabled run changes nothing
    again = _cluster_run(api, tmp_path)
    assert again.returncode == 0, again.output
    assert again.changed == 0, again.output


@pytest.fixture(scope="module")
def api_webhook() -> Iterator[FakeApiServer]:
    yield from serving(_apply_only())


def _admission(keys: Any) -> set[tuple[str, str, str]]:
    return {key for key in keys if key[2].startswith("hygon-dcu-admission")}


def test_webhook_disabled_after_a_run_removes_it_configuration_first(
    api_webhook: FakeApiServer, default_render: RoleRun, tmp_path: Path
) -> None:
    api = api_webhook
    installed = _cluster_run(api, tmp_path)
    assert installed.returncode == 0, installed.output
    rendered = _admission(_key(obj) for obj in default_render.objects())
    assert _admission(api.objects) == rendered
    off = {"hygon_dcu_device_plugin_webhook_enabled": False}
    # check mode predicts the removal and deletes nothing ...
    requests = len(api.requests)
    predicted = _cluster_run(api, tmp_path, check=True, **off)
    assert predicted.returncode == 0, predicted.output
    assert predicted.changed == 1, predicted.output  # the deletion task
    writes = [r for r in api.requests[requests:] if r.method != "GET"]
    assert [r for r in writes if r.query.get("dryRun") != "All"] == []
    assert _admission(api.objects) == rendered
    # ... a run removes exactly the webhook's objects, its configuration first ...
    others = {key: obj for key, obj in api.objects.items() if key not in rendered}
    events = len(api.history)
    disabled = _cluster_run(api, tmp_path, **off)
    assert disabled.returncode == 0, disabled.output
    assert disabled.changed == predicted.changed, disabled.output
    deleted = api.history[events:]
    assert deleted[0] == "delete ValidatingWebhookConfiguration/hygon-dcu-admission"
    assert sorted(deleted) == sorted(f"delete {kind}/{name}" for kind, _ns, name in rendered)
    assert api.objects == others
    # ... and once it is gone, a disabled run changes nothing
    again = _cluster_run(api, tmp_path, **off)
    assert again.returncode == 0, again.output
    assert again.changed == 0, again.output


@pytest.fixture(scope="module")
def api_policies() -> Iterator[FakeApiServer]:
    yield from _with_kube_system()


PLUGIN, WEBHOOK, EXTENDER, SCHEDULER = (
    "hygon-dcu-device-plugin",
    "hygon-dcu-admission",
    "hygon-dcu-extender",
    "hygon-dcu-scheduler",
)


def _policies(api: FakeApiServer) -> set[str]:
    return {name for kind, _namespace, name in api.objects if kind == "NetworkPolicy"}


def _versions(api: FakeApiServer) -> dict[tuple[str, str, str], str]:
    return {key: obj["metadata"]["resourceVersion"] for key, obj in api.objects.items()}


def test_network_policies_applied_before_their_pods_and_removed_when_off(
    api_policies: FakeApiServer, tmp_path: Path
) -> None:
    api = api_policies
    installed = _cluster_run(api, tmp_path, **ALONE, **POLICY_ON)
    assert installed.returncode == 0, installed.output
    assert _policies(api) == {PLUGIN, WEBHOOK, EXTENDER}
    for workload in (f"DaemonSet/{PLUGIN}", f"Deployment/{WEBHOOK}", f"Deployment/{EXTENDER}"):
        name = workload.partition("/")[2]
        assert api.history.index(f"apply NetworkPolicy/{name}") < api.history.index(
            f"apply {workload}"
        )

    # beside the second scheduler instead: the extender's policy goes with its Deployment, the
    # pod's comes before the pod
    events = len(api.history)
    beside = _cluster_run(api, tmp_path, **EXTENDER_ON, **POLICY_ON)
    assert beside.returncode == 0, beside.output
    after = api.history[events:]
    assert "delete NetworkPolicy/hygon-dcu-extender" in after
    assert after.index("apply NetworkPolicy/hygon-dcu-scheduler") < after.index(
        "apply Deployment/hygon-dcu-scheduler"
    )
    assert _policies(api) == {PLUGIN, WEBHOOK, SCHEDULER}

    # alone again, and the webhook disabled: the scheduler's policy and the webhook's go
    webhook_off = {**ALONE, "hygon_dcu_device_plugin_webhook_enabled": False}
    events = len(api.history)
    alone = _cluster_run(api, tmp_path, **webhook_off, **POLICY_ON)
    assert alone.returncode == 0, alone.output
    after = api.history[events:]
    assert "delete NetworkPolicy/hygon-dcu-scheduler" in after
    assert "delete NetworkPolicy/hygon-dcu-admission" in after
    assert _policies(api) == {PLUGIN, EXTENDER}

    # switched off: exactly the policies go, nothing else changes
    before = _versions(api)
    events = len(api.history)
    off = _cluster_run(api, tmp_path, **webhook_off)
    assert off.returncode == 0, off.output
    assert sorted(api.history[events:]) == [
        "delete NetworkPolicy/hygon-dcu-device-plugin",
        "delete NetworkPolicy/hygon-dcu-extender",
    ]
    assert _policies(api) == set()
    assert _versions(api) == {
        key: version for key, version in before.items() if key[0] != "NetworkPolicy"
    }
    # ... and once they are gone, a run changes nothing
    again = _cluster_run(api, tmp_path, **webhook_off)
    assert again.returncode == 0, again.output
    assert again.changed == 0, again.output


# A cluster without the Prometheus Operator, or without the namespace Grafana watches: refused
# before anything is written (found at the end, the run would fail after the runtime changed).
MONITORING_REFUSALS: dict[str, tuple[dict[str, Any], str]] = {
    "rules-without-the-operator": (
        {"hygon_dcu_device_plugin_prometheus_rule": True},
        "the API server has no prometheusrules.monitoring.coreos.com:",
    ),
    "service-monitor-without-the-operator": (
        {
            "hygon_dcu_device_plugin_service_monitor": True,
            "hygon_dcu_device_plugin_metrics_address": "0.0.0.0",
        },
        "the API server has no servicemonitors.monitoring.coreos.com:",
    ),
    "dashboard-in-a-missing-namespace": (
        {**DASHBOARD_ON, "hygon_dcu_device_plugin_grafana_dashboard_namespace": "monitoring"},
        "names monitoring, which does not exist",
    ),
}


@pytest.mark.parametrize("case", MONITORING_REFUSALS)
def test_monitoring_the_cluster_cannot_take_is_refused_before_any_change(
    case: str, tmp_path: Path
) -> None:
    variables, message = MONITORING_REFUSALS[case]
    for api in serving(_apply_only()):
        run = _cluster_run(api, tmp_path, own_certificates=False, **variables)
        assert run.returncode != 0, run.output
        assert message in run.output, run.output
        assert "Nothing was changed" in run.output
        assert [r for r in api.requests if r.method != "GET"] == []
        assert api.objects == {}
