"""The runtime half of the demo (tests/tools/demo.sh runs it between enable_mig and disable_mig).

The real device plugin, `hygon-dcu-plugin serve`, serves the simulated node to the kubelet
emulator (tests/unit/plugin_image/kubelet_emulator.py: the kubelet's Registration and
PodResources gRPC services over unix sockets) and reads pods from the test suite's stand-in for
the API server (tests/support/fake_api_server). Then, one step each:

- the plugin starts and registers its resources with the kubelet;
- a pod asks for one 2g.15gb partition; the kubelet's Allocate makes the plugin carve it;
- the Allocate answer is applied the way a container runtime applies it
  (tests/simulator/minirun, root only; otherwise HYDMI_PROBE_VIEW) and dcu-probe shows exactly
  the granted partition;
- the pod ends (phase Succeeded) and the plugin reclaims the partition; the plugin stops.

Every claim is checked as well as printed: the script exits 1, with the plugin's last log lines,
when one does not hold. demo.sh puts tests/unit/plugin_image, tests/simulator and the venv's
collections directory on PYTHONPATH, and tests/support.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import simnode
from fake_api_server import FakeApiServer, pod
from hygon_dcu_plugin.vocabulary import FAMILY, PROFILE_PREFIX, WHOLE_CARD
from kubelet_emulator import KubeletEmulator
from plugin_harness import minirun_spec

PROFILE = "2g.15gb"
PROFILE_RESOURCE = PROFILE_PREFIX + PROFILE
NAMESPACE, POD, CONTAINER = "demo", "train", "main"
NODE_NAME = "node-1"  # the node the fake API server's pods are scheduled on
GRANT_ANNOTATION = f"hygon.com/dcu.partition.{CONTAINER}"
WHOLE_CARD_NOTE = "   (whole cards: none while partition mode is on)"
WAIT_SECONDS = 60.0  # bounds a hang only; every wait below ends as soon as its condition holds


class DemoFailed(Exception):
    pass


def say(text: str) -> None:
    print(f"[demo {time.strftime('%H:%M:%S')}] {text}", flush=True)


def show(text: str) -> None:
    for line in text.rstrip("\n").splitlines():
        print(f"    {line}", flush=True)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_until(what: str, predicate: Callable[[], bool], plugin: Plugin) -> float:
    """Seconds until predicate() held; DemoFailed when the plugin died or WAIT_SECONDS passed."""
    started = time.monotonic()
    while not predicate():
        if not plugin.running():
            raise DemoFailed(f"the device plugin exited (code {plugin.returncode()}) {what}")
        if time.monotonic() - started > WAIT_SECONDS:
            raise DemoFailed(f"timed out after {WAIT_SECONDS:g}s {what}")
        time.sleep(0.1)
    return time.monotonic() - started


def hy_smi(node: Path, *args: str) -> str:
    result = subprocess.run(
        [str(simnode.HY_SMI_PATH), *args],
        env={**os.environ, simnode.ROOT_ENV: str(node)},
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )
    return result.stdout + result.stderr


def gpu_instance_rows(node: Path) -> list[str]:
    """`hy-smi mig -lgi` rows after the header: one per live GPU instance."""
    return [line for line in hy_smi(node, "mig", "-lgi").splitlines()[1:] if line.strip()]


class Plugin:
    """`hygon-dcu-plugin serve` as its own process, as the DaemonSet runs it."""

    def __init__(self, config: Path, log: Path, pidfile: Path, env: dict[str, str]) -> None:
        self.argv = ["hygon-dcu-plugin", "serve", "--config", str(config)]
        self.log = log
        self.pidfile = pidfile
        self.env = env
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("wb") as sink:
            self.process = subprocess.Popen(
                self.argv, env=self.env, stdout=sink, stderr=subprocess.STDOUT
            )
        # demo.sh's trap stops it by this id should this script die without stopping it.
        self.pidfile.write_text(f"{self.process.pid}\n")

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def returncode(self) -> int | None:
        return None if self.process is None else self.process.poll()

    def stop(self) -> int | None:
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=30)
        self.pidfile.unlink(missing_ok=True)
        return self.process.returncode

    def entries(self, message: str) -> list[dict[str, Any]]:
        """The plugin's JSON log lines with this message."""
        found = []
        for line in self.log.read_text(errors="replace").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if isinstance(entry, dict) and entry.get("msg") == message:
                found.append(entry)
        return found

    def tail(self, lines: int = 25) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


def ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as reply:
            return bool(reply.status == 200)
    except OSError:
        return False


def write_config(path: Path, settings: dict[str, object]) -> str:
    # JSON is YAML: one key per line, readable as printed.
    text = "".join(f"{key}: {json.dumps(value)}\n" for key, value in settings.items())
    path.write_text(text)
    return text


def run_workload(node: Path, state: Path, answer: Any, expected_uuid: str) -> tuple[list[str], str]:
    """dcu-probe in a container made from the Allocate answer: its output lines and how."""
    env = {**os.environ, simnode.ROOT_ENV: str(node)}
    if os.geteuid() == 0:
        spec = state / "container-spec.json"
        spec.write_text(json.dumps(minirun_spec(answer), indent=1))
        argv = [sys.executable, str(simnode.MINIRUN_PATH), str(spec), "--", "dcu-probe"]
        how = "minirun container-spec.json -- dcu-probe   (the answer applied as runc would)"
    else:
        # Not root, so no mount namespace: the probe reads the simulated host's whole view,
        # with the answer's environment (DMI_MIG_VISIBLE_DEVICE picks the partition).
        env = {**env, **dict(answer.envs), "HYDMI_PROBE_VIEW": str(node)}
        argv = [str(simnode.PROBE_PATH)]
        how = "HYDMI_PROBE_VIEW=<node> dcu-probe   (not root: no container, the answer's envs only)"
    result = subprocess.run(argv, env=env, capture_output=True, text=True, check=False, timeout=60)
    lines = result.stdout.splitlines()
    if result.returncode != 0 or len(lines) != 1 or f"mig_uuid={expected_uuid} " not in lines[0]:
        raise DemoFailed(
            f"dcu-probe did not see exactly the granted partition {expected_uuid} "
            f"(exit {result.returncode}): {result.stdout}{result.stderr}"
        )
    return lines, how


def demo(args: argparse.Namespace, plugin_env: dict[str, str]) -> int:
    node: Path = args.node
    state: Path = args.state
    step = args.first_step
    total = args.total
    port = free_port()
    api = FakeApiServer()
    kubelet = KubeletEmulator(str(state / "device-plugins"), str(state / "pod-resources.sock"))
    settings: dict[str, object] = {
        "host_root": str(node),  # the host's / as the plugin sees it: the simulated node
        "answer_root": str(node),  # host paths in Allocate answers point into it too
        "device_plugin_dir": kubelet.plugin_dir,
        "pod_resources_socket": kubelet.pod_resources_socket,
        "grants_dir": str(state / "grants"),
        "lock_dir": str(state / "locks"),
        "kubeconfig": str(state / "kubeconfig"),
        "node_name": NODE_NAME,
        "grace_seconds": 2,  # short, so the reclaim shows within seconds
        "resync_seconds": 2,
        "health_address": f"127.0.0.1:{port}",
        "metrics_address": "",  # no /metrics: the demo does not read it
    }
    plugin = Plugin(state / "plugin.yaml", args.plugin_log, state / "plugin.pid", plugin_env)
    api.start()
    try:
        api.kubeconfig(state / "kubeconfig")
        kubelet.start()

        say(f"{step}/{total} start the device plugin; it registers with the kubelet")
        config = write_config(state / "plugin.yaml", settings)
        print("    hygon-dcu-plugin serve --config plugin.yaml, with plugin.yaml:", flush=True)
        show("\n".join(f"  {line}" for line in config.splitlines()))
        plugin.start()
        wait_until(
            "before registering",
            lambda: (
                ready(port)
                and kubelet.healthy(FAMILY) > 0
                and kubelet.healthy(PROFILE_RESOURCE) > 0
            ),
            plugin,
        )
        print("    the kubelet now lists (healthy devices per resource):", flush=True)
        counts = sorted(kubelet.counts().items())
        show(
            "\n".join(f"  {r}: {n}{WHOLE_CARD_NOTE if r == WHOLE_CARD else ''}" for r, n in counts)
        )

        step += 1
        say(f"{step}/{total} a pod asks for one {PROFILE} partition: Allocate carves it")
        limits = {FAMILY: "1", PROFILE_RESOURCE: "1"}
        api.seed(pod(POD, NAMESPACE, node=NODE_NAME, containers={CONTAINER: limits}))
        print(f"    pod {NAMESPACE}/{POD}, container {CONTAINER}, limits:", flush=True)
        show("\n".join(f"  {k}: {v}" for k, v in limits.items()))
        answers = kubelet.admit(NAMESPACE, POD, CONTAINER, {FAMILY: 1, PROFILE_RESOURCE: 1})
        answer = answers[FAMILY]
        stored = api.get("Pod", POD, NAMESPACE) or {"metadata": {}}
        annotations = stored["metadata"].get("annotations", {})
        grant = json.loads(annotations[GRANT_ANNOTATION])
        granted_uuid = str(grant["uuid"])
        print(
            f"    the plugin chose (its grant, annotated on the pod): card={grant['card']} "
            f"placement={grant['placement']} profile={grant['profile']} uuid={granted_uuid}",
            flush=True,
        )
        visible = answer.envs.get("DMI_MIG_VISIBLE_DEVICE", "")
        if visible != f"MIG-{granted_uuid}" or grant["profile"] != PROFILE:
            raise DemoFailed(f"the Allocate answer names {visible!r}, the grant {grant}")
        print("    its Allocate answer (what the container runtime gets):", flush=True)
        show("\n".join(f"  env {k}={v}" for k, v in sorted(answer.envs.items())))
        show("\n".join(f"  device {d.host_path} -> {d.container_path}" for d in answer.devices))
        show(
            "\n".join(
                f"  mount {m.host_path} -> {m.container_path}{' (ro)' if m.read_only else ''}"
                for m in answer.mounts
            )
        )
        print("    $ hy-smi mig -lgi", flush=True)
        show(hy_smi(node, "mig", "-lgi"))

        step += 1
        say(f"{step}/{total} the workload's container sees exactly that partition")
        lines, how = run_workload(node, state, answer, granted_uuid)
        print(f"    $ {how}", flush=True)
        show("\n".join(lines))

        step += 1
        say(f"{step}/{total} the pod ends (phase Succeeded): the plugin reclaims its partition")
        api.change("Pod", POD, NAMESPACE, status={"phase": "Succeeded"})
        with kubelet.lock:  # the kubelet keeps listing a finished pod, without its devices
            for container in kubelet.pods[f"{NAMESPACE}/{POD}"].containers:
                container.devices.clear()
        took = wait_until(
            "before reclaiming the partition",
            lambda: not gpu_instance_rows(node) and bool(plugin.entries("partition reclaimed")),
            plugin,
        )
        (reclaimed,) = plugin.entries("partition reclaimed")
        if reclaimed.get("uuid") != granted_uuid:
            raise DemoFailed(f"the plugin reclaimed {reclaimed}, not {granted_uuid}")
        print(
            f"    plugin log, {took:.1f}s later: partition reclaimed uuid={reclaimed['uuid']} "
            f"({reclaimed.get('why')})",
            flush=True,
        )
        print("    $ hy-smi mig -lgi   (no GPU instance left)", flush=True)
        show(hy_smi(node, "mig", "-lgi"))
        code = plugin.stop()
        if code != 0:
            raise DemoFailed(f"the device plugin stopped with exit code {code}")
        print("    device plugin stopped (SIGTERM, exit 0)", flush=True)
        return 0
    except Exception as failed:  # a refused Allocate (grpc.RpcError) too: say it, show the log
        why = (
            str(failed) if isinstance(failed, DemoFailed) else f"{type(failed).__name__}: {failed}"
        )
        say(f"FAILED: {why}")
        print(f"    last lines of the plugin log ({args.plugin_log}):", flush=True)
        show(plugin.tail())
        return 1
    finally:
        plugin.stop()
        kubelet.stop()
        api.stop()


def on_sigterm(signum: int, frame: FrameType | None) -> None:
    # demo.sh's trap sends SIGTERM; unwind so the finally blocks stop the plugin.
    raise SystemExit(128 + signum)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--node", type=Path, required=True, help="the simulated node's root")
    parser.add_argument("--state", type=Path, required=True, help="a short, empty directory")
    parser.add_argument("--plugin-log", type=Path, required=True)
    parser.add_argument("--collections", required=True, help="the venv's collections directory")
    parser.add_argument("--first-step", type=int, default=1)
    parser.add_argument("--total", type=int, default=4)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, on_sigterm)
    plugin_env = {
        **os.environ,
        simnode.ROOT_ENV: str(args.node),  # the simulated driver's state
        "PYTHONPATH": args.collections,  # the node layer, under its collection name
    }
    return demo(args, plugin_env)


if __name__ == "__main__":
    sys.exit(main())
