"""The image as built: its contents, and the container serving a simulated node.

The container runs as the DaemonSet runs it (uid 0, privileged, read-only root filesystem,
`serve --config=...`), with the simulated node's root and the simulator's library mounted at
their own paths, the kubelet emulator's socket directories, and a fake API server reached
through a kubeconfig. The workload side is tests/simulator/minirun, applying the Allocate
answer the way a container runtime does.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import simnode
import yaml
from fake_api_server import FakeApiServer, pod
from hygon_dcu_plugin.kube import API_ACCESS, LOST_POD_DELETE_ACCESS
from hygon_dcu_plugin.vocabulary import FAMILY, SLICED, WHOLE_CARD
from kubelet_emulator import KubeletEmulator
from minirun import minirun_spec

from .conftest import REPO, podman

pytestmark = pytest.mark.image

P2G = "hygon.com/dcu.partitioned.mig-2g.15gb"
P4G = "hygon.com/dcu.partitioned.mig-4g.31gb"
P8G = "hygon.com/dcu.partitioned.mig-8g.63gb"
# An idle 8-card BW node in partition mode (docs/dev/hardware.md's table, 4 slices per card).
# A partition node serves no whole card and no slice.
IDLE = {FAMILY: 32, P2G: 32, P4G: 16, P8G: 8, WHOLE_CARD: 0, SLICED: 0}
MODULE_UTILS_IN_IMAGE = "/opt/hygon-dcu/ansible_collections/hygon/dcu/plugins/module_utils"

HASH_TREE = """
import hashlib, json, os, sys
root = sys.argv[1]
out = {}
for base, dirs, files in os.walk(root):
    dirs[:] = [d for d in dirs if d != "__pycache__"]
    for name in files:
        path = os.path.join(base, name)
        with open(path, "rb") as handle:
            out[os.path.relpath(path, root)] = hashlib.sha256(handle.read()).hexdigest()
print(json.dumps(out))
"""


def test_node_layer_in_the_image_is_the_repository_s(image: str) -> None:
    result = podman(
        "run",
        "--rm",
        "--network",
        "none",
        "--entrypoint",
        "python3",
        image,
        "-c",
        HASH_TREE,
        MODULE_UTILS_IN_IMAGE,
    )
    in_image = json.loads(result.stdout)
    source = REPO / "plugins" / "module_utils"
    in_repo = {
        str(path.relative_to(source)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in source.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }
    assert in_repo
    assert in_image == in_repo


def test_node_layer_imports_under_its_collection_name(image: str) -> None:
    result = podman(
        "run",
        "--rm",
        "--network",
        "none",
        "--entrypoint",
        "python3",
        image,
        "-c",
        "import ansible_collections.hygon.dcu.plugins.module_utils.node as n; print(n.__file__)",
    )
    assert result.stdout.strip().startswith(MODULE_UTILS_IN_IMAGE + "/")


def test_image_metadata(image: str) -> None:
    (info,) = json.loads(podman("image", "inspect", image).stdout)
    config = info["Config"]
    galaxy = yaml.safe_load((REPO / "galaxy.yml").read_text())
    assert config["Labels"]["org.opencontainers.image.version"] == galaxy["version"]
    assert "org.opencontainers.image.source" in config["Labels"]
    # non-root unless a pod spec says otherwise (the webhook runs as this user)
    assert config["User"] == "65532:65532"
    assert config["Entrypoint"] == ["hygon-dcu-plugin"]
    assert "PYTHONPATH=/opt/hygon-dcu" in config["Env"]


def test_image_holds_no_build_tooling_and_no_host_ca(image: str) -> None:
    result = podman(
        "run",
        "--rm",
        "--network",
        "none",
        "--entrypoint",
        "sh",
        image,
        "-c",
        "ls /opt/hygon-dcu/venv/bin; ls /run/secrets 2>&1; "
        "ls /etc/ssl/certs/ca-certificates.crt 2>&1; command -v gcc || echo no-gcc",
    )
    out = result.stdout
    assert "hygon-dcu-plugin" in out
    assert "pip" not in out.split()
    assert "/run/secrets': No such file or directory" in out
    assert "ca-certificates.crt': No such file or directory" in out
    assert "no-gcc" in out


def test_image_holds_no_second_http_stack_and_no_asyncio_client(image: str) -> None:
    """What no program imports is not shipped (the Containerfile says why): aiohttp and what only
    it needs, and the kubernetes client's asyncio variant. The programs' own tests below run
    them without these."""
    script = (
        "import importlib.metadata as m, importlib.util as u, pathlib, kubernetes\n"
        "names = {d.metadata['Name'].lower() for d in m.distributions()}\n"
        "print(sorted(names & {'aiohttp', 'aiohttp-retry', 'yarl', 'multidict', 'frozenlist'}))\n"
        "print((pathlib.Path(kubernetes.__file__).parent / 'aio').exists())\n"
        "print(u.find_spec('aiohttp') is None)\n"
    )
    result = podman(
        "run", "--rm", "--network", "none", "--entrypoint", "python3", image, "-c", script
    )  # fmt: skip
    assert result.stdout.split("\n")[:3] == ["[]", "False", "True"], result.stdout


def test_webhook_entry_point(image: str) -> None:
    result = podman("run", "--rm", "--network", "none", image, "webhook", "--help")
    assert "--cert-file" in result.stdout


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def short_dir() -> Iterator[Path]:
    # unix socket paths must stay under 108 bytes
    path = Path(tempfile.mkdtemp(prefix="hdi", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


class Deployment:
    """The container plus what surrounds it on a node: kubelet, API server, driver."""

    def __init__(self, image: str, base: Path, mode_on: bool = True) -> None:
        build = simnode.build()
        self.sim = simnode.init(base / "node", cards=8)
        if mode_on:  # a fresh node's mode is off
            enable = subprocess.run(
                [str(simnode.HY_SMI_PATH), "-mig", "1"],
                env=self.sim.env(),
                capture_output=True,
                text=True,
                check=False,
            )
            assert enable.returncode == 0, enable.stdout + enable.stderr
        self.state = base / "state"
        plugin_dir = self.state / "device-plugins"
        pod_resources = self.state / "pod-resources"
        dcu_state = self.state / "hygon-dcu"
        for directory in (plugin_dir, pod_resources, dcu_state):
            directory.mkdir(parents=True)
        # The plugin's watch ends every 5 s, as an API server's timeoutSeconds ends it.
        self.api = FakeApiServer(watch_seconds=5.0).start()
        self.api.kubeconfig(self.state / "kubeconfig")
        config = {
            "host_root": str(self.sim.root),
            "answer_root": str(self.sim.root),
            "device_plugin_dir": str(plugin_dir),
            "pod_resources_socket": str(pod_resources / "kubelet.sock"),
            "grants_dir": str(dcu_state / "grants"),
            "lock_dir": str(dcu_state / "locks"),
            "policy": "pack",
            "resync_seconds": 1.0,
            "kubeconfig": "/etc/hygon-dcu/kubeconfig",
            "health_address": f"127.0.0.1:{_free_port()}",
            "metrics_address": "",  # host network: not the fixed default port
            "log_level": "debug",
        }
        (self.state / "config.yaml").write_text(yaml.safe_dump(config))
        self.kubelet = KubeletEmulator(str(plugin_dir), str(pod_resources / "kubelet.sock"))
        self.kubelet.start()
        self.name = f"hygon-dcu-test-{uuid.uuid4().hex[:8]}"
        root = str(self.sim.root)
        podman(
            "run",
            "--detach",
            "--name",
            self.name,
            # as the DaemonSet runs it
            "--user",
            "0",
            "--privileged",
            "--read-only",
            "--tmpfs",
            "/tmp",
            "--network",
            "host",  # the fake API server listens on the host's loopback
            "--volume",
            f"{root}:{root}",
            "--volume",
            f"{build}:{build}:ro",
            "--volume",
            f"{plugin_dir}:{plugin_dir}",
            "--volume",
            f"{pod_resources}:{pod_resources}:ro",
            "--volume",
            f"{dcu_state}:{dcu_state}",
            "--volume",
            f"{self.state / 'config.yaml'}:/etc/hygon-dcu/config.yaml:ro",
            "--volume",
            f"{self.state / 'kubeconfig'}:/etc/hygon-dcu/kubeconfig:ro",
            "--env",
            f"{simnode.ROOT_ENV}={root}",
            "--env",
            "NODE_NAME=node-1",
            image,
            "serve",
            "--config=/etc/hygon-dcu/config.yaml",
        )

    def logs(self) -> str:
        result = podman("logs", self.name, check=False)
        return result.stdout + result.stderr

    def close(self) -> None:
        podman("rm", "--force", "--time", "5", self.name, check=False)
        self.kubelet.stop()
        self.api.stop()


@pytest.fixture
def deployment(image: str, short_dir: Path) -> Iterator[Deployment]:
    built = Deployment(image, short_dir)
    yield built
    built.close()


def test_container_registers_advertises_and_allocates(
    deployment: Deployment, tmp_path: Path
) -> None:
    kubelet = deployment.kubelet
    registered = kubelet.wait_for(
        lambda: (
            set(kubelet.endpoints) == set(IDLE)
            and all(e.updates for e in kubelet.endpoints.values())
        ),
        timeout=120,
    )
    assert registered, deployment.logs()
    assert kubelet.wait_for(lambda: kubelet.counts() == IDLE), (kubelet.counts(), deployment.logs())

    deployment.api.seed(
        pod("w1", "default", node="node-1", containers={"main": {FAMILY: "1", P2G: "1"}})
    )
    responses = kubelet.admit("default", "w1", "main", {FAMILY: 1, P2G: 1})
    response = responses[FAMILY]
    visible = response.envs["DMI_MIG_VISIBLE_DEVICE"]
    assert visible.startswith("MIG-")

    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(minirun_spec(response)))
    probe = subprocess.run(
        [sys.executable, str(simnode.MINIRUN_PATH), str(spec), "--", "dcu-probe"],
        env=deployment.sim.env(),
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert probe.returncode == 0, probe.stderr
    lines = probe.stdout.splitlines()
    assert len(lines) == 1, lines
    assert "kind=partition" in lines[0]
    assert f"cu_count=20 memory_mib=16380 mig_uuid={visible.removeprefix('MIG-')}" in lines[0]

    # the pod was annotated through the API server, with only the calls RBAC grants
    stored = deployment.api.get("Pod", "w1", "default")
    assert stored is not None
    annotations = stored["metadata"]["annotations"]
    assert json.loads(annotations["hygon.com/dcu.partition.main"])["profile"] == "2g.15gb"
    used = {request.access for request in deployment.api.requests}
    assert ("", "pods", "patch") in used
    assert used <= set(API_ACCESS) | set(LOST_POD_DELETE_ACCESS)


def test_container_on_a_mode_off_node_serves_whole_cards_and_slices(
    image: str, short_dir: Path
) -> None:
    deployment = Deployment(image, short_dir, mode_on=False)
    try:
        kubelet = deployment.kubelet
        # The slice library is found inside the container: four slices a card.
        whole_cards = {WHOLE_CARD: 8, FAMILY: 0, SLICED: 32}
        assert kubelet.wait_for(lambda: kubelet.counts() == whole_cards, timeout=120), (
            kubelet.counts(),
            deployment.logs(),
        )
    finally:
        deployment.close()
