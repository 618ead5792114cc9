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

With ``--slices`` (the node's mode off): two pods ask a logical slice each, both land on one
card, each container's dcu-probe shows only its own slice, and both slices are destroyed when
the pods end.

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
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import simnode
from fake_api_server import FakeApiServer, pod
from hygon_dcu_plugin.vocabulary import (
    FAMILY,
    PROFILE_PREFIX,
    SLICE_MEMORY_MIB,
    SLICED,
    WHOLE_CARD,
)
from kubelet_emulator import KubeletEmulator
from minirun import minirun_spec

PROFILE = "2g.15gb"
PROFILE_RESOURCE = PROFILE_PREFIX + PROFILE
NAMESPACE, POD, CONTAINER = "demo", "train", "main"
NODE_NAME = "node-1"  # the node the fake API server's pods are scheduled on
GRANT_ANNOTATION = f"hygon.com/dcu.partition.{CONTAINER}"
WHOLE_CARD_NOTE = "   (whole cards: none while partition mode is on)"
SLICE_PODS = (("notebook-a", 16 * 1024), ("notebook-b", 24 * 1024))
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


def run_workload(node: Path, state: Path, answer: Any, expected: str) -> tuple[list[str], str]:
    """dcu-probe in a container made from the Allocate answer: its output lines and how. It
    must print exactly one device, whose line holds ``expected``."""
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
    if result.returncode != 0 or len(lines) != 1 or expected not in lines[0]:
        raise DemoFailed(
            f"dcu-probe did not see exactly the granted device ({expected.strip()}) "
            f"(exit {result.returncode}): {result.stdout}{result.stderr}"
        )
    return lines, how


@dataclass
class Stage:
    """What every step of the runtime half works on."""

    node: Path
    state: Path
    api: FakeApiServer
    kubelet: KubeletEmulator
    plugin: Plugin
    step: int
    total: int

    def say(self, text: str) -> None:
        say(f"{self.step}/{self.total} {text}")
        self.step += 1


def show_answer(answer: Any) -> None:
    print("    its Allocate answer (what the container runtime gets):", flush=True)
    show("\n".join(f"  env {k}={v}" for k, v in sorted(answer.envs.items())))
    show("\n".join(f"  device {d.host_path} -> {d.container_path}" for d in answer.devices))
    show(
        "\n".join(
            f"  mount {m.host_path} -> {m.container_path}{' (ro)' if m.read_only else ''}"
            for m in answer.mounts
        )
    )


def end_pod(stage: Stage, name: str) -> None:
    stage.api.change("Pod", name, NAMESPACE, status={"phase": "Succeeded"})
    with stage.kubelet.lock:  # the kubelet keeps listing a finished pod, without its devices
        for container in stage.kubelet.pods[f"{NAMESPACE}/{name}"].containers:
            container.devices.clear()


def partitions(stage: Stage) -> None:
    """A pod's partition carved, seen by its container, reclaimed when the pod ends."""
    node, state, api, kubelet, plugin = (
        stage.node,
        stage.state,
        stage.api,
        stage.kubelet,
        stage.plugin,
    )
    stage.say(f"a pod asks for one {PROFILE} partition: Allocate carves it")
    limits = {FAMILY: "1", PROFILE_RESOURCE: "1"}
    api.seed(pod(POD, NAMESPACE, node=NODE_NAME, containers={CONTAINER: limits}))
    print(f"    pod {NAMESPACE}/{POD}, container {CONTAINER}, limits:", flush=True)
    show("\n".join(f"  {k}: {v}" for k, v in limits.items()))
    answers = kubelet.admit(NAMESPACE, POD, CONTAINER, {FAMILY: 1, PROFILE_RESOURCE: 1})
    answer = answers[FAMILY]
    grant = granted(api, POD)
    granted_uuid = str(grant["uuid"])
    print(
        f"    the plugin chose (its grant, annotated on the pod): card={grant['card']} "
        f"placement={grant['placement']} profile={grant['profile']} uuid={granted_uuid}",
        flush=True,
    )
    visible = answer.envs.get("DMI_MIG_VISIBLE_DEVICE", "")
    if visible != f"MIG-{granted_uuid}" or grant["profile"] != PROFILE:
        raise DemoFailed(f"the Allocate answer names {visible!r}, the grant {grant}")
    show_answer(answer)
    print("    $ hy-smi mig -lgi", flush=True)
    show(hy_smi(node, "mig", "-lgi"))

    stage.say("the workload's container sees exactly that partition")
    lines, how = run_workload(node, state, answer, f"mig_uuid={granted_uuid} ")
    print(f"    $ {how}", flush=True)
    show("\n".join(lines))

    stage.say("the pod ends (phase Succeeded): the plugin reclaims its partition")
    end_pod(stage, POD)
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


def slices(stage: Stage) -> None:
    """Two pods share one card as logical slices, each container sees only its own, and both
    slices go when the pods end."""
    node, state, api, kubelet, plugin = (
        stage.node,
        stage.state,
        stage.api,
        stage.kubelet,
        stage.plugin,
    )
    stage.say("two pods ask for a logical slice each (16 GiB and 24 GiB): Allocate creates them")
    answers: dict[str, Any] = {}
    for name, mib in SLICE_PODS:
        limits = {SLICED: "1", SLICE_MEMORY_MIB: str(mib)}
        api.seed(pod(name, NAMESPACE, node=NODE_NAME, containers={CONTAINER: limits}))
        answers[name] = kubelet.admit(NAMESPACE, name, CONTAINER, {SLICED: 1})[SLICED]
        grant = granted(api, name)
        print(
            f"    pod {NAMESPACE}/{name} ({SLICE_MEMORY_MIB}: {mib}): the plugin created vdev "
            f"{grant['slice']} on card {grant['card']}, {grant['compute_units']} compute units, "
            f"{grant['memory_mib']} MiB",
            flush=True,
        )
    cards = {granted(api, name)["card"] for name, _mib in SLICE_PODS}
    if len(cards) != 1:
        raise DemoFailed(f"the two slices went to cards {sorted(cards)}, not one card")
    show_answer(answers[SLICE_PODS[0][0]])
    print("    $ hy-smi virtual -show-vdevice-info", flush=True)
    show(hy_smi(node, "virtual", "-show-vdevice-info"))

    stage.say("each workload's container sees only its own slice")
    for name, _mib in SLICE_PODS:
        grant = granted(api, name)
        expected = (
            f"cu_count={grant['compute_units']} memory_mib={grant['memory_mib']} "
            f"vdev_id={grant['slice']} "
        )
        lines, how = run_workload(node, state, answers[name], expected)
        print(f"    $ {how}   (pod {name})", flush=True)
        show("\n".join(lines))

    stage.say("both pods end (phase Succeeded): the plugin destroys their slices")
    for name, _mib in SLICE_PODS:
        end_pod(stage, name)
    took = wait_until(
        "before reclaiming the slices",
        lambda: (
            len(plugin.entries("slice reclaimed")) == len(SLICE_PODS)
            and "Virtual Device" not in hy_smi(node, "virtual", "-show-vdevice-info")
        ),
        plugin,
    )
    for entry in plugin.entries("slice reclaimed"):
        print(
            f"    plugin log, within {took:.1f}s: slice reclaimed vdev={entry.get('vdev')} "
            f"pod={entry.get('pod')} ({entry.get('why')})",
            flush=True,
        )
    print("    $ hy-smi virtual -show-vdevice-info   (no slice left)", flush=True)
    show(hy_smi(node, "virtual", "-show-vdevice-info") or "(none)")


def granted(api: FakeApiServer, name: str) -> dict[str, Any]:
    """The grant the plugin annotated on the pod."""
    stored = api.get("Pod", name, NAMESPACE) or {"metadata": {}}
    annotations = stored["metadata"].get("annotations", {})
    value: dict[str, Any] = json.loads(annotations[GRANT_ANNOTATION])
    return value


def demo(args: argparse.Namespace, plugin_env: dict[str, str]) -> int:
    node: Path = args.node
    state: Path = args.state
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
    stage = Stage(node, state, api, kubelet, plugin, args.first_step, args.total)
    served = (SLICED,) if args.slices else (FAMILY, PROFILE_RESOURCE)
    api.start()
    try:
        api.kubeconfig(state / "kubeconfig")
        kubelet.start()

        stage.say("start the device plugin; it registers with the kubelet")
        config = write_config(state / "plugin.yaml", settings)
        print("    hygon-dcu-plugin serve --config plugin.yaml, with plugin.yaml:", flush=True)
        show("\n".join(f"  {line}" for line in config.splitlines()))
        plugin.start()
        wait_until(
            "before registering",
            lambda: ready(port) and all(kubelet.healthy(r) > 0 for r in served),
            plugin,
        )
        print("    the kubelet now lists (healthy devices per resource):", flush=True)
        counts = sorted(kubelet.counts().items())
        note = "" if args.slices else WHOLE_CARD_NOTE
        show("\n".join(f"  {r}: {n}{note if r == WHOLE_CARD else ''}" for r, n in counts))

        (slices if args.slices else partitions)(stage)
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
    parser.add_argument(
        "--slices", action="store_true", help="logical slices on a node with the mode off"
    )
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
