"""The plugin's runtime on a simulated node, driven the way the kubelet drives it, without
gRPC: tests call Allocate and the reclaimer directly and read the counts the kubelet would."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import simnode
from ansible_collections.hygon.dcu.plugins.module_utils.node import Node
from fake_kube import FakeKube, limits_for, slice_limits
from hygon_dcu_plugin.config import Settings
from hygon_dcu_plugin.deviceplugin.advertise import healthy_count
from hygon_dcu_plugin.deviceplugin.allocator import Allocator
from hygon_dcu_plugin.deviceplugin.api import deviceplugin_v1beta1_pb2 as pb
from hygon_dcu_plugin.deviceplugin.podresources import ListedContainer, ListedPod
from hygon_dcu_plugin.deviceplugin.reclaimer import Reclaimer
from hygon_dcu_plugin.deviceplugin.runtime import Runtime
from hygon_dcu_plugin.vocabulary import FAMILY, PROFILE_PREFIX, SLICED
from minirun import minirun_spec


def make_node(
    root: Path, model: str = "c3000-bw", cards: int = 8, mode_on: bool = True
) -> simnode.SimNode:
    node = simnode.init(root, model=model, cards=cards)
    if mode_on:
        node.switch_mode()
    return node


root_only = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (mount namespaces, mknod)")


class KubeletView:
    """The kubelet's pod list as PodResources List returns it (order as inserted)."""

    def __init__(self) -> None:
        self.pods: dict[str, dict[str, dict[str, list[str]]]] = {}

    def list(self) -> list[ListedPod]:
        return [
            ListedPod(
                key.split("/")[0],
                key.split("/")[1],
                tuple(
                    ListedContainer(name, {r: tuple(ids) for r, ids in devices.items()})
                    for name, devices in containers.items()
                ),
            )
            for key, containers in list(self.pods.items())
        ]

    def held(self, resource: str) -> set[str]:
        return {
            i
            for containers in self.pods.values()
            for devices in containers.values()
            for i in devices.get(resource, [])
        }


def settings_for(sim: simnode.SimNode, state: Path, **overrides: object) -> Settings:
    base = Settings(
        device_plugin_dir=str(state / "device-plugins"),
        pod_resources_socket=str(state / "pod-resources" / "kubelet.sock"),
        host_root=str(sim.root),
        answer_root=str(sim.root),
        library_path=str(simnode.LIB_PATH),
        grants_dir=str(state / "grants"),
        lock_dir=str(state / "locks"),
        grace_seconds=0.0,
        resync_seconds=0.2,
        node_name="node-1",
    )
    return Settings(**{**base.__dict__, **overrides})


def serve_argv(
    sim: simnode.SimNode,
    state: Path,
    api_kubeconfig: Path,
    kubelet: Any,
    health_port: int,
    metrics_port: int | None = None,
) -> list[str]:
    """`hygon-dcu-plugin serve` as a real process against the simulated node, the kubelet
    emulator and a fake API server (its kubeconfig). /metrics on ``metrics_port``, or not
    served (the default port would be shared by every test running at once)."""
    return [
        sys.executable,
        "-m",
        "hygon_dcu_plugin",
        "serve",
        "--host-root",
        str(sim.root),
        "--answer-root",
        str(sim.root),
        "--library-path",
        str(simnode.LIB_PATH),
        "--device-plugin-dir",
        kubelet.plugin_dir,
        "--pod-resources-socket",
        kubelet.pod_resources_socket,
        "--grants-dir",
        str(state / "grants"),
        "--lock-dir",
        str(state / "locks"),
        "--kubeconfig",
        str(api_kubeconfig),
        "--node-name",
        "node-1",
        "--grace-seconds",
        "0",
        "--resync-seconds",
        "0.3",
        "--health-address",
        f"127.0.0.1:{health_port}",
        "--metrics-address",
        "" if metrics_port is None else f"127.0.0.1:{metrics_port}",
    ]


class Harness:
    def __init__(
        self,
        sim: simnode.SimNode,
        state: Path,
        checkpoint: Callable[[str], None] | None = None,
        kube: FakeKube | None = None,
        **settings: object,
    ) -> None:
        self.sim = sim
        self.state = state
        # A FakeKube subclass can add calls FakeKube lacks (the geometry Lease's).
        self.kube = FakeKube() if kube is None else kube
        self.kubelet = KubeletView()
        self.settings = settings_for(sim, state, **settings)
        os.makedirs(self.settings.device_plugin_dir, exist_ok=True)
        self.node = Node(str(sim.root), str(simnode.LIB_PATH))
        self.runtime = Runtime(
            self.settings, self.node, self.kube, self.kubelet, checkpoint=checkpoint
        )
        # What start() does before any gRPC server runs: the kubelet learns device ids only
        # from these published lists.
        self.runtime.refresh()

    @property
    def allocator(self) -> Allocator:
        return self.runtime.allocator

    @property
    def reclaimer(self) -> Reclaimer:
        return self.runtime.reclaimer

    def counts(self) -> dict[str, int]:
        return {r: healthy_count(d) for r, d in self.runtime.plan().items()}

    def free_token(self, resource: str = FAMILY) -> str:
        held = self.kubelet.held(resource)
        for device in self.runtime.plan().get(resource, []):
            if device.healthy and device.id not in held:
                return device.id
        raise AssertionError(f"kubelet: no free {resource} token")

    def admit(
        self,
        name: str,
        profile: str = "2g.15gb",
        namespace: str = "default",
        token: str | None = None,
        profile_first: bool = True,
    ) -> pb.ContainerAllocateResponse:
        """Create the pod, list it with no devices, then admit its two resources one at a time
        as the kubelet does, in either order: each takes a free token of what the plugin
        advertises at that moment and is listed as held (Allocate on the profile is empty)."""
        self.kube.add_pod(namespace, name, {"main": limits_for(profile)})
        key = f"{namespace}/{name}"
        self.kubelet.pods[key] = {"main": {}}
        listed = self.kubelet.pods[key]["main"]
        profile_resource = PROFILE_PREFIX + profile
        if profile_first:
            listed[profile_resource] = [self.free_token(profile_resource)]
        token = token or self.free_token()
        response: pb.ContainerAllocateResponse = self.allocator.allocate(FAMILY, [token])
        listed[FAMILY] = [token]
        if not profile_first:
            listed[profile_resource] = [self.free_token(profile_resource)]
        return response

    def admit_slice(
        self,
        name: str,
        memory_mib: int,
        compute_units: int | None = None,
        namespace: str = "default",
        uid: str | None = None,
        annotations: dict[str, str] | None = None,
    ) -> pb.ContainerAllocateResponse:
        """Create a pod of one container asking a slice, list it with no devices, and admit
        it as the kubelet does: a free slice token, Allocate, then listed as held."""
        self.kube.add_pod(
            namespace,
            name,
            {"main": slice_limits(memory_mib, compute_units)},
            uid=uid,
            annotations=annotations,
        )
        key = f"{namespace}/{name}"
        self.kubelet.pods[key] = {"main": {}}
        token = self.free_token(SLICED)
        response: pb.ContainerAllocateResponse = self.allocator.allocate(SLICED, [token])
        self.kubelet.pods[key]["main"][SLICED] = [token]
        return response

    def finish(self, name: str, namespace: str = "default", how: str = "delete") -> None:
        if how == "delete":
            self.kube.delete_pod(namespace, name)
            self.kubelet.pods.pop(f"{namespace}/{name}", None)
        else:
            self.kube.set_phase(namespace, name, how)
            # The kubelet keeps listing a completed pod, with its device assignments dropped.
            pod = self.kubelet.pods.get(f"{namespace}/{name}", {})
            for container in pod:
                pod[container] = {}

    def live(self) -> list[tuple[str, int, str | None]]:
        found = [i for c in self.node.cards() if c.healthy for i in self.node.instances(c.index)]
        return sorted((i.pci or "", i.placement.start, i.uuid) for i in found)

    def spec_file(self, response: pb.ContainerAllocateResponse, path: Path) -> Path:
        path.write_text(json.dumps(minirun_spec(response)))
        return path
