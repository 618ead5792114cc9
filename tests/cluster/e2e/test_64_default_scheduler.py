"""The extender for the site's default scheduler (docs/extender.md, "As an extender of the site's
default scheduler"): the role deploys it alone, the tier's own kube-scheduler is restarted with
the extender stanza the docs give, its values read from the role's Secrets, and a partition pod
that names no scheduler is bound through it (with its reservation) and runs; a client without
the client certificate is refused at the handshake.

The tier has no cluster DNS or kube-proxy: the stanza names the extender pod's address, and
verifies the certificate under the Service's name (``serverName``), as the docs say for a
control plane without them.

Starts from any earlier module's state; enables partitioning itself. Leaves: the tier's
scheduler as ``up`` started it, the extender beside the second scheduler with the role's
defaults, no pod.
"""

from __future__ import annotations

import base64
import http.client
import json
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from e2e_support import (
    CLUSTER_SH,
    NAMESPACE,
    Kube,
    Playbooks,
    SimNode,
    deploy_extender,
    extender_ready,
    partition_pod,
    phase,
    published,
    ready_deployments,
    reserved,
    wait_for,
)
from hygon_dcu_plugin.vocabulary import COMPUTE_UNITS, FAMILY, MEMORY_MIB
from privileges import assert_privileges_as_documented

EXTENDER = "hygon-dcu-extender"
LABEL = "e2e-default-scheduler"


def cluster(*args: str) -> None:
    subprocess.run([str(CLUSTER_SH), *args], check=True, timeout=300)


def secret(kube: Kube, name: str) -> dict[str, str]:
    """The Secret's data, base64 as the API gives it (what the stanza takes)."""
    data: dict[str, str] = kube.json("get", "secret", name, "-n", NAMESPACE)["data"]
    return data


def extender_address(kube: Kube) -> str:
    (pod,) = kube.json("get", "pods", "-n", NAMESPACE, "-l", f"app.kubernetes.io/name={EXTENDER}")[
        "items"
    ]
    address: str = pod["status"]["podIP"]
    return address


def stanza(kube: Kube) -> str:
    """The docs' extenders stanza, with the pod's address for the Service's (no kube-proxy)."""
    serving, client = secret(kube, f"{EXTENDER}-tls"), secret(kube, f"{EXTENDER}-client")
    return yaml.safe_dump(
        {
            "extenders": [
                {
                    "urlPrefix": f"https://{extender_address(kube)}:8443",
                    "filterVerb": "filter",
                    "prioritizeVerb": "prioritize",
                    "bindVerb": "bind",
                    "weight": 10,
                    "nodeCacheCapable": True,
                    "enableHTTPS": True,
                    "tlsConfig": {
                        "serverName": f"{EXTENDER}.{NAMESPACE}.svc",
                        "caData": serving["ca.crt"],
                        "certData": client["tls.crt"],
                        "keyData": client["tls.key"],
                    },
                    "httpTimeout": "30s",
                    "ignorable": False,
                    "managedResources": [
                        {"name": FAMILY, "ignoredByScheduler": False},
                        {"name": MEMORY_MIB, "ignoredByScheduler": True},
                        {"name": COMPUTE_UNITS, "ignoredByScheduler": True},
                    ],
                }
            ]
        },
        default_flow_style=False,  # appended to the tier's own block-style configuration
    )


@pytest.fixture(scope="module", autouse=True)
def extender_alone(
    kube: Kube,
    playbooks: Playbooks,
    cluster_sim: SimNode,
    workload_namespace: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[None]:
    playbooks.run("hygon.dcu.enable_mig", "-e", f"target={kube.node}")
    deploy_extender(playbooks, kube, hygon_dcu_device_plugin_extender_mode="default_scheduler")
    wait_for(
        "the extender alone Ready, the second scheduler gone",
        lambda: (
            (ready := ready_deployments(kube)) and EXTENDER in ready and not extender_ready(kube)
        ),
        240,
    )
    wait_for(
        "the node's geometry Lease with both cards",
        lambda: (g := published(kube, kube.node)) is not None and len(g.cards) == 2,
        120,
    )
    config = tmp_path_factory.mktemp("scheduler") / "extender.yaml"
    config.write_text(stanza(kube))
    try:
        cluster("restart-scheduler", str(config))
        yield
    finally:
        kube.run(
            "delete", "pods", "-n", workload_namespace, "-l", LABEL, "--wait=true", check=False
        )
        cluster("restart-scheduler")
        deploy_extender(playbooks, kube)
        wait_for("the second scheduler and the extender Ready", lambda: extender_ready(kube), 240)
        wait_for("no instance left", lambda: not cluster_sim.live_uuids(), 120)


def test_a_pod_naming_no_scheduler_is_bound_through_the_extender_and_runs(kube: Kube) -> None:
    pod = partition_pod("default-scheduler-1")
    assert "schedulerName" not in pod["spec"]
    pod["metadata"]["labels"] = {LABEL: "true"}
    kube.run("apply", "-f", "-", stdin=json.dumps(pod))
    wait_for(
        "the pod bound and run",
        lambda: phase(kube, "default-scheduler-1") in ("Running", "Succeeded"),
        180,
    )
    bound = kube.pod("default-scheduler-1")
    assert bound is not None
    assert bound["spec"]["schedulerName"] == "default-scheduler"
    held = reserved(bound)  # written by the extender's bind, before the Binding
    assert held is not None and held.node == bound["spec"]["nodeName"] == kube.node
    assert wait_for(
        "the probe done", lambda: phase(kube, "default-scheduler-1") == "Succeeded", 120
    )


def test_a_client_without_the_certificate_is_refused_at_the_handshake(
    kube: Kube, tmp_path: Path
) -> None:
    ca = tmp_path / "ca.crt"
    ca.write_bytes(base64.b64decode(secret(kube, f"{EXTENDER}-tls")["ca.crt"]))
    context = ssl.create_default_context(cafile=str(ca))
    context.check_hostname = False  # the pod's address; the chain is still verified
    connection = http.client.HTTPSConnection(
        extender_address(kube), 8443, context=context, timeout=10
    )
    with pytest.raises((ssl.SSLError, ConnectionError)):
        connection.request("GET", "/healthz")
        connection.getresponse()
    connection.close()


def test_prometheus_finds_the_extender_alone_through_its_metrics_service(kube: Kube) -> None:
    # The same headless Service as beside the second scheduler, now selecting this pod: its
    # probes' port, never the verbs' (test_60_extender.py scrapes it).
    (subset,) = kube.json("get", "endpoints", f"{EXTENDER}-metrics", "-n", NAMESPACE)["subsets"]
    assert [a["ip"] for a in subset["addresses"]] == [extender_address(kube)]
    assert [(p["name"], p["port"]) for p in subset["ports"]] == [("extender-metrics", 8444)]


def test_each_account_may_do_what_the_docs_say(kube: Kube) -> None:
    # The extender alone: its own account, and no second scheduler's account or lock left.
    assert_privileges_as_documented(
        kube, webhook_enabled=True, extender_enabled=True, extender_mode="default_scheduler"
    )
