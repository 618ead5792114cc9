"""`hygon-dcu-plugin serve` as a process: the real CLI, kubernetes client and PodResources
client against the kubelet emulator, a minimal API server and the simulated node; the kill
hook through the environment, then a restart that converges."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
import simnode
from fake_api_server import FakeApiServer, pod
from hygon_dcu_plugin.cli import KILL_AT_ENV
from hygon_dcu_plugin.vocabulary import FAMILY
from kubelet_emulator import KubeletEmulator
from plugin_harness import serve_argv
from polling import wait_until

REPO = Path(__file__).resolve().parents[4]
P2G = "hygon.com/dcu.partitioned.mig-2g.15gb"
LIMITS = {FAMILY: "1", P2G: "1"}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Plugin:
    def __init__(
        self, sim: simnode.SimNode, state: Path, api: FakeApiServer, kubelet: KubeletEmulator
    ) -> None:
        self.port = free_port()
        self.metrics_port = free_port()
        while self.metrics_port == self.port:
            self.metrics_port = free_port()
        self.argv = serve_argv(
            sim, state, api.kubeconfig(state / "kubeconfig"), kubelet, self.port, self.metrics_port
        )
        self.env = {
            **sim.env(),
            "PYTHONPATH": os.pathsep.join(
                [str(REPO / "plugin_image" / "src"), str(REPO / ".venv" / "collections")]
            ),
        }
        self.process: subprocess.Popen[str] | None = None

    def start(self, kill_at: str | None = None) -> None:
        env = dict(self.env)
        if kill_at:
            env[KILL_AT_ENV] = kill_at
        self.process = subprocess.Popen(self.argv, env=env, stderr=subprocess.PIPE, text=True)

    def get(self, path: str, port: int | None = None) -> tuple[int, str]:
        url = f"http://127.0.0.1:{self.port if port is None else port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=5) as reply:
                return reply.status, reply.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, ""
        except OSError:
            return 0, ""

    def stop(self) -> tuple[int, str]:
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        _ignored, err = self.process.communicate(timeout=30)
        return self.process.returncode, err


@pytest.fixture
def world(
    bw_node: simnode.SimNode, short_tmp: Path
) -> Iterator[tuple[Plugin, KubeletEmulator, FakeApiServer]]:
    api = FakeApiServer().start()
    kubelet = KubeletEmulator(str(short_tmp / "dp"), str(short_tmp / "pr" / "kubelet.sock"))
    kubelet.start()
    plugin = Plugin(bw_node, short_tmp, api, kubelet)
    yield plugin, kubelet, api
    if plugin.process and plugin.process.poll() is None:
        plugin.stop()
    kubelet.stop()
    api.stop()


def admit_pod(api: FakeApiServer, name: str, container: str = "main") -> None:
    """The pod the kubelet is about to admit, bound to the plugin's node."""
    api.seed(pod(name, "team", node="node-1", containers={container: LIMITS}))


def pod_annotations(api: FakeApiServer, name: str) -> dict[str, str]:
    stored = api.get("Pod", name, "team")
    assert stored is not None, name
    return dict(stored["metadata"].get("annotations") or {})


def ready(kubelet: KubeletEmulator) -> bool:
    counts: dict[str, int] = kubelet.counts()
    return counts.get(FAMILY) == 32 and counts.get(P2G) == 32


def test_serve_registers_allocates_reports_and_stops(
    world: tuple[Plugin, KubeletEmulator, FakeApiServer],
) -> None:
    plugin, kubelet, api = world
    plugin.start()
    assert kubelet.wait_for(lambda: ready(kubelet)), plugin.stop()
    assert wait_until(lambda: plugin.get("/readyz")[0] == 200)
    admit_pod(api, "train")
    responses = kubelet.admit("team", "train", "main", {FAMILY: 1, P2G: 1})
    assert responses[FAMILY].envs["DMI_MIG_VISIBLE_DEVICE"].startswith("MIG-")
    annotation = pod_annotations(api, "train")["hygon.com/dcu.partition.main"]
    assert json.loads(annotation)["profile"] == "2g.15gb"
    assert api.requests_for(
        "pods", method="GET", named=False
    )  # the pods of the node, read through the real client
    status, text = plugin.get("/metrics", plugin.metrics_port)
    assert status == 200 and 'hygon_dcu_allocations_total{profile="2g.15gb"} 1.0' in text
    assert plugin.get("/metrics") == (404, "")  # not on the probes' listener
    assert plugin.get("/readyz", plugin.metrics_port) == (404, "")
    api.remove("Pod", "train", "team")
    kubelet.remove_pod("team", "train")
    assert kubelet.wait_for(
        lambda: kubelet.counts().get("hygon.com/dcu.partitioned.mig-4g.31gb") == 16
    )
    code, err = plugin.stop()
    assert code == 0, err
    assert '"msg": "partition granted"' in err  # structured log lines


def test_a_container_with_a_63_character_name_gets_its_partition(
    world: tuple[Plugin, KubeletEmulator, FakeApiServer],
) -> None:
    # The longest legal container name: the grant's annotation key must still be legal.
    plugin, kubelet, api = world
    container = "c" * 62 + "9"
    plugin.start()
    assert kubelet.wait_for(lambda: ready(kubelet)), plugin.stop()
    admit_pod(api, "long", container)
    responses = kubelet.admit("team", "long", container, {FAMILY: 1, P2G: 1})
    assert responses[FAMILY].envs["DMI_MIG_VISIBLE_DEVICE"].startswith("MIG-")
    (grant,) = pod_annotations(api, "long").values()
    assert json.loads(grant)["container"] == container
    assert len(bw_live_instances(plugin)) == 1
    code, err = plugin.stop()
    assert code == 0, err


def bw_live_instances(plugin: Plugin) -> list[str]:
    root = Path(plugin.argv[plugin.argv.index("--host-root") + 1])
    return [p.name for p in (root / "etc" / "dmi_mig_config" / "ci").iterdir()]


@pytest.mark.parametrize("step", ["compute_instance_created", "grant_written"])
def test_killed_through_the_hook_then_restarted_converges(
    world: tuple[Plugin, KubeletEmulator, FakeApiServer], bw_node: simnode.SimNode, step: str
) -> None:
    plugin, kubelet, api = world
    plugin.start(kill_at=step)
    assert kubelet.wait_for(lambda: ready(kubelet))
    admit_pod(api, "victim")
    with pytest.raises(grpc.RpcError):
        kubelet.admit("team", "victim", "main", {FAMILY: 1, P2G: 1})
    assert plugin.process is not None
    assert plugin.process.wait(timeout=30) == -signal.SIGKILL
    assert bw_node.status().gpu_instances
    api.change("Pod", "victim", "team", status={"phase": "Failed"})  # the kubelet rejected the pod
    plugin.start()
    assert wait_until(lambda: not bw_node.status().gpu_instances)
    assert kubelet.wait_for(lambda: ready(kubelet))
    code, err = plugin.stop()
    assert code == 0, err


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """plugin_image pip-installed into a fresh venv (no PYTHONPATH, no repository on the path);
    its dependencies come from the test venv through a .pth file, as any site dir would."""
    venv = tmp_path_factory.mktemp("installed") / "venv"
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    purelib = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import sysconfig; print(sysconfig.get_paths()['purelib'])",
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout.strip()
    deps = subprocess.run(
        [
            sys.executable,
            "-c",
            "import grpc, os; print(os.path.dirname(os.path.dirname(grpc.__file__)))",
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout.strip()
    Path(purelib, "test-deps.pth").write_text(deps + "\n")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(venv / "bin" / "python"),
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            str(REPO / "plugin_image"),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return venv / "bin" / "hygon-dcu-plugin"


def installed_env(sim: simnode.SimNode, home: Path, **extra: str) -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "HOME": str(home), simnode.ROOT_ENV: str(sim.root), **extra}


def one_line_failure(argv: list[str], env: dict[str, str]) -> str:
    result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hygon-dcu-plugin: "), result.stderr
    return lines[0]


def test_installed_without_the_collection_says_what_to_install(
    installed: Path, bw_node: simnode.SimNode, tmp_path: Path
) -> None:
    line = one_line_failure([str(installed), "serve"], installed_env(bw_node, tmp_path))
    assert "cannot import the hygon.dcu Ansible collection" in line
    assert "ansible-galaxy collection install" in line and "ANSIBLE_COLLECTIONS_PATH" in line


def test_installed_with_the_collection_installed_serves(
    installed: Path,
    world: tuple[Plugin, KubeletEmulator, FakeApiServer],
    bw_node: simnode.SimNode,
    tmp_path: Path,
) -> None:
    plugin, kubelet, _api = world
    plugin.argv[:3] = [str(installed)]
    plugin.env = installed_env(
        bw_node, tmp_path, ANSIBLE_COLLECTIONS_PATH=str(REPO / ".venv" / "collections")
    )
    plugin.start()
    assert kubelet.wait_for(lambda: ready(kubelet)), plugin.stop()
    code, err = plugin.stop()
    assert code == 0, err


@pytest.mark.parametrize("listener", ["health", "metrics"])
def test_a_taken_port_is_one_line_naming_the_flag(
    world: tuple[Plugin, KubeletEmulator, FakeApiServer], listener: str
) -> None:
    plugin, _kubelet, _api = world
    port = plugin.port if listener == "health" else plugin.metrics_port
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", port))
        taken.listen()
        line = one_line_failure(plugin.argv, plugin.env)
    assert f"cannot listen on {listener}_address 127.0.0.1:{port}" in line
    assert f"--{listener}-address" in line


def test_an_empty_metrics_address_serves_no_metrics(
    world: tuple[Plugin, KubeletEmulator, FakeApiServer],
) -> None:
    plugin, kubelet, _api = world
    plugin.argv[plugin.argv.index("--metrics-address") + 1] = ""
    plugin.start()
    assert kubelet.wait_for(lambda: ready(kubelet)), plugin.stop()
    assert wait_until(lambda: plugin.get("/readyz")[0] == 200)
    assert plugin.get("/metrics") == (404, "")
    assert plugin.get("/metrics", plugin.metrics_port) == (0, "")  # nothing listens
    code, err = plugin.stop()
    assert code == 0, err
    (serving,) = [json.loads(line) for line in err.splitlines() if '"msg": "serving"' in line]
    assert serving["metrics"] is None


def test_a_missing_device_plugin_directory_is_one_line(
    world: tuple[Plugin, KubeletEmulator, FakeApiServer], tmp_path: Path
) -> None:
    plugin, _kubelet, _api = world
    argv = list(plugin.argv)
    argv[argv.index("--device-plugin-dir") + 1] = str(tmp_path / "absent")
    line = one_line_failure(argv, plugin.env)
    assert "device_plugin_dir" in line and "mount the kubelet's device-plugin directory" in line
