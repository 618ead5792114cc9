"""The static manifests on the real cluster, as a site without Ansible on its cluster side would
use them: the role's deployment removed, tools/static_manifests.sh renders the site-secret file
for Kubernetes 1.20 (with this tier's image and simulated-node settings), the site makes the
webhook's Secret with kubectl from its own CA, and `kubectl apply -f` the file. The file holds no
private key; the webhook answers over the site's certificate (it refuses an impossible request at
creation) and a partition pod runs on the partition the plugin carves for it.

Starts from any earlier module's state; enables partitioning itself. Leaves: the role's default
deployment back, no pod.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e_support import (
    NAMESPACE,
    REPO,
    Kube,
    Playbooks,
    SimNode,
    granted_uuid,
    partition_pod,
    phase,
    ready_deployments,
    refusal_without_profile,
    wait_for,
)
from hygon_dcu_plugin.vocabulary import FAMILY
from playbook_runner import ansible_env
from site_pki import make_certificate

WEBHOOK = "hygon-dcu-admission"
SITE_SECRET = f"{WEBHOOK}-tls"
LABEL = "e2e-static"


def deploy(playbooks: Playbooks, kube: Kube, **role_vars: object) -> None:
    playbooks.run(
        "hygon.dcu.deploy_device_plugin",
        "-e",
        f"hygon_dcu_api_host={kube.node}",
        "-e",
        json.dumps(role_vars),
    )


@pytest.fixture(scope="module")
def static_file(
    kube: Kube,
    playbooks: Playbooks,
    cluster_sim: SimNode,
    workload_namespace: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Path, str]]:
    """The static file applied (its path and the site's private key, in PEM)."""
    work = tmp_path_factory.mktemp("static")
    playbooks.run("hygon.dcu.enable_mig", "-e", f"target={kube.node}")
    deploy(
        playbooks,
        kube,
        hygon_dcu_device_plugin_state="absent",
        hygon_dcu_device_plugin_remove_namespace=False,
    )
    # The site's CA and the webhook's serving certificate, made outside the product.
    names = (f"{WEBHOOK}.{NAMESPACE}.svc", WEBHOOK, f"{WEBHOOK}.{NAMESPACE}")
    cert, key, ca = make_certificate(*names, days=30)
    for name, text in {"tls.crt": cert, "tls.key": key, "ca.crt": ca}.items():
        (work / name).write_text(text)
    # What this tier's runtime needs, as the role gets it from the inventory: the image, the
    # simulated node, the short timers, one webhook replica.
    host_vars = json.loads(playbooks.inventory.read_text())["all"]["hosts"][kube.node]
    site_vars = {k: v for k, v in host_vars.items() if k.startswith("hygon_dcu_device_plugin_")}
    (work / "site-vars.json").write_text(json.dumps(site_vars))
    static = work / "hygon-dcu.yaml"
    rendered = subprocess.run(
        [
            "bash",
            str(REPO / "tools" / "static_manifests.sh"),
            "site-secret",
            str(work / "ca.crt"),
            str(static),
            "-e",
            "hygon_dcu_kubernetes_version=1.20",
            "-e",
            f"@{work / 'site-vars.json'}",
        ],
        env=ansible_env(),
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert rendered.returncode == 0, rendered.stdout + rendered.stderr
    kube.run(
        "create", "secret", "tls", SITE_SECRET, "-n", NAMESPACE,
        f"--cert={work / 'tls.crt'}", f"--key={work / 'tls.key'}",
    )  # fmt: skip
    kube.run("apply", "-f", str(static), timeout=300)
    try:
        wait_for("a Ready device-plugin pod", kube.ready_plugin_pod, 180)
        wait_for("the webhook rolled out", lambda: WEBHOOK in ready_deployments(kube), 180)
        yield static, key
    finally:
        kube.run(
            "delete", "pods", "-n", workload_namespace, "-l", LABEL, "--wait=true", check=False
        )
        # The file's objects have the role's names: the role removes them (the namespace stays),
        # then the site's Secret goes and the role deploys as test_10 did.
        deploy(
            playbooks,
            kube,
            hygon_dcu_device_plugin_state="absent",
            hygon_dcu_device_plugin_remove_namespace=False,
        )
        kube.run("delete", "secret", SITE_SECRET, "-n", NAMESPACE, "--ignore-not-found")
        deploy(playbooks, kube)
        wait_for("a Ready device-plugin pod", kube.ready_plugin_pod, 180)
        wait_for("no instance left", lambda: not cluster_sim.live_uuids(), 120)


def test_the_file_holds_no_private_key(static_file: tuple[Path, str]) -> None:
    static, key = static_file
    text = static.read_text()
    assert "PRIVATE KEY" not in text
    assert "kind: Secret\n" not in text
    assert key.splitlines()[1] not in text


def test_the_webhook_answers_over_the_sites_certificate(
    kube: Kube, static_file: tuple[Path, str]
) -> None:
    refusal = refusal_without_profile(kube, "static-no-profile")
    # The webhook's own refusal (not a failed call: that would name the webhook and its error).
    assert f"{FAMILY}.mig-" in refusal, refusal


def test_a_partition_pod_runs_on_its_partition(
    kube: Kube, cluster_sim: SimNode, static_file: tuple[Path, str]
) -> None:
    pod = partition_pod("static-1")
    pod["metadata"]["labels"] = {LABEL: "true"}
    kube.apply(pod)
    wait_for("the pod done", lambda: phase(kube, "static-1") in ("Succeeded", "Failed"), 180)
    assert phase(kube, "static-1") == "Succeeded", kube.logs("static-1")
    uuid = granted_uuid(kube, "static-1")
    assert uuid is not None
    assert f"mig_uuid={uuid}" in kube.logs("static-1")
