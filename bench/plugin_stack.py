"""The device plugin running on a simulated node, registered with the kubelet emulator over
real unix sockets: the Allocate path a kubelet drives, minus the kubelet.

The API server is the in-memory one the plugin's tests use (tests/unit/plugin_image), so API
round trips cost nothing here; PodResources and the device-plugin API are real gRPC.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from .instrument import own_method
from .tables import REPO, SIMULATOR, simulated_node

# The kubelet emulator and in-memory API server are test infrastructure of the plugin, on the
# shared test floor.
for _tests in ("tests/unit/plugin_image", "tests/support"):
    if str(REPO / _tests) not in sys.path:
        sys.path.append(str(REPO / _tests))

from ansible_collections.hygon.dcu.plugins.module_utils.node import Node  # noqa: E402
from fake_kube import FakeKube  # noqa: E402
from hygon_dcu_plugin.config import Settings  # noqa: E402
from hygon_dcu_plugin.deviceplugin.api import deviceplugin_v1beta1_pb2 as dp  # noqa: E402
from hygon_dcu_plugin.deviceplugin.podresources import PodResourcesClient  # noqa: E402
from hygon_dcu_plugin.deviceplugin.runtime import Runtime  # noqa: E402
from hygon_dcu_plugin.vocabulary import FAMILY, profile_resource  # noqa: E402
from kubelet_emulator import EmulatedPod, KubeletEmulator  # noqa: E402

NAMESPACE = "bench"


class PluginStack:
    """Start with `with PluginStack(model) as stack:`; everything is torn down on exit."""

    def __init__(self, model: str, cards: int = 8) -> None:
        self.model = model
        self.cards = cards
        self._closers: list[Callable[[], None]] = []
        self.updates: list[tuple[float, dict[str, int]]] = []  # ListAndWatch arrivals
        self._pods = 0
        self._pod_lock = threading.Lock()

    # lifecycle -------------------------------------------------------------------------
    def __enter__(self) -> PluginStack:
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        while self._closers:
            self._closers.pop()()

    def _start(self) -> None:
        # The plugin's warnings (e.g. "no node name") are expected here; keep the tables clean.
        logging.getLogger("hygon_dcu_plugin").setLevel(logging.ERROR)
        node_cm = simulated_node(self.model, self.cards)
        self.root = node_cm.__enter__()

        def leave_node() -> None:
            node_cm.__exit__(None, None, None)

        self._closers.append(leave_node)
        hy_smi = SIMULATOR / "build" / "hy-smi"
        subprocess.run([str(hy_smi), "-mig", "1"], check=True, capture_output=True)
        # Unix socket paths must stay short (108 bytes).
        state = Path(tempfile.mkdtemp(prefix="hdb", dir="/tmp"))
        self._closers.append(lambda: shutil.rmtree(state, ignore_errors=True))
        library = str(SIMULATOR / "build" / "libhydmi_mig.so.1")
        self.settings = Settings(
            device_plugin_dir=str(state / "dp"),
            pod_resources_socket=str(state / "pr" / "kubelet.sock"),
            host_root=self.root,
            answer_root=self.root,
            library_path=library,
            grants_dir=str(state / "grants"),
            lock_dir=str(state / "locks"),
            grace_seconds=0.0,
            resync_seconds=3600.0,
            node_name=None,
        )
        os.makedirs(self.settings.device_plugin_dir, exist_ok=True)
        self.kube = FakeKube()
        self.kubelet = KubeletEmulator(
            self.settings.device_plugin_dir, self.settings.pod_resources_socket
        )
        # Time-stamp every ListAndWatch message the kubelet receives (replacing its hook by
        # name: fail loudly rather than time nothing if the emulator renames it).
        own_method(KubeletEmulator, "_notify")
        self.kubelet._notify = self._on_update
        self.kubelet.start()
        self._closers.append(self.kubelet.stop)
        self.node = Node(self.root, library)
        lister = PodResourcesClient(self.settings.pod_resources_socket)
        self.runtime = Runtime(self.settings, self.node, self.kube, lister)
        self.runtime.start()
        self._closers.append(self.runtime.stop)
        self.profiles = sorted(
            {p.name: p.slices for c in self.node.cards() for p in c.profiles}.items(),
            key=lambda item: (item[1], item[0]),
        )
        self.idle = self._wait_registered()

    def _on_update(self) -> None:
        with self.kubelet.lock:
            self.updates.append((time.perf_counter(), self.kubelet.counts()))
            self.kubelet.changed.notify_all()

    def _wait_registered(self) -> dict[str, int]:
        wanted = {FAMILY} | {profile_resource(name) for name, _ignored in self.profiles}
        ok = self.kubelet.wait_for(
            lambda: (
                wanted <= set(self.kubelet.endpoints)
                and all(self.kubelet.endpoints[r].updates for r in wanted)
            ),
            timeout=30,
        )
        if not ok:
            raise RuntimeError(f"plugin did not register {sorted(wanted)} with the emulator")
        counts: dict[str, int] = self.kubelet.counts()
        return counts

    # what the kubelet does -------------------------------------------------------------
    def free_tokens(self, count: int) -> list[str]:
        """Distinct healthy family tokens nobody holds (the kubelet never hands one out twice)."""
        tokens: list[str] = self.kubelet.pick(FAMILY, count)
        return tokens

    def new_pod(self, profile: str) -> EmulatedPod:
        """A pod the API server knows and the kubelet lists with no device yet."""
        with self._pod_lock:
            self._pods += 1
            name = f"pod-{self._pods:05d}"
        limits = {FAMILY: "1", profile_resource(profile): "1"}
        self.kube.add_pod(NAMESPACE, name, {"main": limits})
        return self.kubelet.add_pod(NAMESPACE, name, ["main"])

    def allocate(self, token: str) -> dp.ContainerAllocateResponse:
        """The family's Allocate over gRPC, then the token listed on the pod that got it.

        The allocator serves the newest waiting pod (the kubelet admits one pod at a time, so
        that is the one being admitted). With concurrent callers, which a real kubelet never
        makes, a call may carve the partition of another caller's pod; listing the token on
        the pod whose grant holds it keeps the emulated kubelet consistent with that.
        """
        response: dp.ContainerAllocateResponse = self.kubelet.allocate(FAMILY, [token])
        owner = next(r for r in self.runtime.store.load() if token in r.device_ids)
        with self.kubelet.lock:
            pod = self.kubelet.pods[owner.pod_key]
            pod.containers[0].devices[FAMILY] = [token]
        return response

    def finish_all(self) -> None:
        """Every pod deleted, as the API server and the kubelet would report it."""
        with self.kubelet.lock:
            pods = list(self.kubelet.pods.values())
        for pod in pods:
            self.kube.delete_pod(pod.namespace, pod.name)
            self.kubelet.remove_pod(pod.namespace, pod.name)

    def wait_counts(self, wanted: dict[str, int], timeout: float = 30.0) -> None:
        if not self.kubelet.wait_for(lambda: self.kubelet.counts() == wanted, timeout=timeout):
            raise RuntimeError(f"counts never reached {wanted}: {self.kubelet.counts()}")
