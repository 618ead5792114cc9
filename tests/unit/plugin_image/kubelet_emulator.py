"""A kubelet, as far as the device plugin can tell: the real v1beta1 / PodResources v1
protocol over unix sockets.

- Registration server on <plugin_dir>/kubelet.sock; on Register it dials the plugin's socket,
  calls GetDevicePluginOptions and keeps a ListAndWatch stream open, like the kubelet.
- PodResources server (List, Get, GetAllocatableResources) backed by a programmable pod table.
- admit(): what the kubelet does for one container: put the pod in its list with no devices for
  the container, pick healthy free ids, call Allocate, then list the ids as assigned.
- restart(): delete every socket in the plugin directory and serve a new kubelet.sock.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass, field

import grpc
from hygon_dcu_plugin.deviceplugin.api import deviceplugin_v1beta1_pb2 as dp
from hygon_dcu_plugin.deviceplugin.api import deviceplugin_v1beta1_pb2_grpc as dp_grpc
from hygon_dcu_plugin.deviceplugin.api import podresources_v1_pb2 as pr
from hygon_dcu_plugin.deviceplugin.api import podresources_v1_pb2_grpc as pr_grpc

CHECKPOINT = "kubelet_internal_checkpoint"


@dataclass
class EmulatedContainer:
    name: str
    devices: dict[str, list[str]] = field(default_factory=dict)


@dataclass
class EmulatedPod:
    namespace: str
    name: str
    containers: list[EmulatedContainer] = field(default_factory=list)


class _Endpoint:
    """The kubelet's side of one registered resource."""

    def __init__(self, resource: str, socket_path: str, on_update: Callable[[], None]) -> None:
        self.resource = resource
        self.channel = grpc.insecure_channel(f"unix://{socket_path}")
        self.stub = dp_grpc.DevicePluginStub(self.channel)
        self.options = self.stub.GetDevicePluginOptions(dp.Empty(), timeout=5)
        self.devices: list[tuple[str, str]] = []
        self.updates = 0
        self._on_update = on_update
        self._stream = self.stub.ListAndWatch(dp.Empty())
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        try:
            for response in self._stream:
                self.devices = [(d.ID, d.health) for d in response.devices]
                self.updates += 1
                self._on_update()
        except grpc.RpcError:
            return

    def close(self) -> None:
        self._stream.cancel()
        self.channel.close()


class _Registration(dp_grpc.RegistrationServicer):
    def __init__(self, emulator: KubeletEmulator) -> None:
        self.emulator = emulator

    def Register(self, request: dp.RegisterRequest, context: grpc.ServicerContext) -> dp.Empty:
        if request.version != "v1beta1":
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, f"unsupported version {request.version}"
            )
        self.emulator._registered(request)
        return dp.Empty()


class _PodResources(pr_grpc.PodResourcesListerServicer):
    def __init__(self, emulator: KubeletEmulator) -> None:
        self.emulator = emulator

    def _pod(self, pod: EmulatedPod) -> pr.PodResources:
        return pr.PodResources(
            name=pod.name,
            namespace=pod.namespace,
            containers=[
                pr.ContainerResources(
                    name=c.name,
                    devices=[
                        pr.ContainerDevices(resource_name=r, device_ids=ids)
                        for r, ids in sorted(c.devices.items())
                    ],
                )
                for c in pod.containers
            ],
        )

    def List(
        self, request: pr.ListPodResourcesRequest, context: grpc.ServicerContext
    ) -> pr.ListPodResourcesResponse:
        with self.emulator.lock:
            self.emulator.list_calls += 1
            if self.emulator.reject_lists > 0:
                self.emulator.reject_lists -= 1
                context.abort(
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    "rejected by the server because of rate limiting",
                )
            pods = list(self.emulator.pods.values())
            return pr.ListPodResourcesResponse(pod_resources=[self._pod(p) for p in pods])

    def Get(
        self, request: pr.GetPodResourcesRequest, context: grpc.ServicerContext
    ) -> pr.GetPodResourcesResponse:
        with self.emulator.lock:
            pod = self.emulator.pods.get(f"{request.pod_namespace}/{request.pod_name}")
            if pod is None:
                context.abort(grpc.StatusCode.NOT_FOUND, "pod not found")
            return pr.GetPodResourcesResponse(pod_resources=self._pod(pod))

    def GetAllocatableResources(
        self, request: pr.AllocatableResourcesRequest, context: grpc.ServicerContext
    ) -> pr.AllocatableResourcesResponse:
        with self.emulator.lock:
            return pr.AllocatableResourcesResponse(
                devices=[
                    pr.ContainerDevices(
                        resource_name=ep.resource,
                        device_ids=[i for i, h in ep.devices if h == "Healthy"],
                    )
                    for ep in self.emulator.endpoints.values()
                ]
            )


class KubeletEmulator:
    def __init__(self, plugin_dir: str, pod_resources_socket: str) -> None:
        self.plugin_dir = plugin_dir
        self.pod_resources_socket = pod_resources_socket
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.pods: dict[str, EmulatedPod] = {}
        self.endpoints: dict[str, _Endpoint] = {}
        self.register_requests: list[dp.RegisterRequest] = []
        self.list_calls = 0
        self.reject_lists = 0  # the next N List calls fail as the kubelet's rate limiter does
        self._registration: grpc.Server | None = None
        self._pod_resources: grpc.Server | None = None

    # lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        os.makedirs(self.plugin_dir, exist_ok=True)
        os.makedirs(os.path.dirname(self.pod_resources_socket), exist_ok=True)
        self._registration = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        dp_grpc.add_RegistrationServicer_to_server(_Registration(self), self._registration)
        socket = os.path.join(self.plugin_dir, "kubelet.sock")
        self._registration.add_insecure_port(f"unix://{socket}")
        self._registration.start()
        if self._pod_resources is None:
            self._pod_resources = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
            pr_grpc.add_PodResourcesListerServicer_to_server(
                _PodResources(self), self._pod_resources
            )
            self._pod_resources.add_insecure_port(f"unix://{self.pod_resources_socket}")
            self._pod_resources.start()

    def _stop_registration(self) -> None:
        with self.lock:
            endpoints = list(self.endpoints.values())
            self.endpoints.clear()
        for endpoint in endpoints:
            endpoint.close()
        if self._registration is not None:
            self._registration.stop(grace=0).wait()
            self._registration = None

    def stop(self) -> None:
        self._stop_registration()
        if self._pod_resources is not None:
            self._pod_resources.stop(grace=0).wait()
            self._pod_resources = None

    def restart(self) -> None:
        """A new kubelet: every socket in the plugin directory is deleted, except the
        checkpoint, and a new kubelet.sock appears."""
        self._stop_registration()
        for name in os.listdir(self.plugin_dir):
            if name != CHECKPOINT:
                os.unlink(os.path.join(self.plugin_dir, name))
        self.start()

    # registration ----------------------------------------------------------------------
    def _registered(self, request: dp.RegisterRequest) -> None:
        socket_path = os.path.join(self.plugin_dir, request.endpoint)
        endpoint = _Endpoint(request.resource_name, socket_path, self._notify)
        with self.lock:
            old = self.endpoints.pop(request.resource_name, None)
            self.endpoints[request.resource_name] = endpoint
            self.register_requests.append(request)
            self.changed.notify_all()
        if old is not None:
            old.close()

    def _notify(self) -> None:
        with self.lock:
            self.changed.notify_all()

    def wait_for(self, predicate: Callable[[], bool], timeout: float = 60.0) -> bool:
        """Block until predicate() holds (a wait, not a timed assertion: the caller asserts
        on the result and the timeout only bounds a hang)."""
        with self.lock:
            return self.changed.wait_for(predicate, timeout=timeout)

    # what the scheduler would read -------------------------------------------------------
    def devices(self, resource: str) -> list[tuple[str, str]]:
        with self.lock:
            endpoint = self.endpoints.get(resource)
            return list(endpoint.devices) if endpoint else []

    def healthy(self, resource: str) -> int:
        return sum(1 for _ignored, health in self.devices(resource) if health == "Healthy")

    def counts(self) -> dict[str, int]:
        with self.lock:
            return {r: self.healthy(r) for r in self.endpoints}

    def assigned(self, resource: str) -> set[str]:
        with self.lock:
            return {
                i
                for p in self.pods.values()
                for c in p.containers
                for i in c.devices.get(resource, [])
            }

    # pods --------------------------------------------------------------------------------
    def add_pod(self, namespace: str, name: str, containers: list[str]) -> EmulatedPod:
        with self.lock:
            pod = EmulatedPod(namespace, name, [EmulatedContainer(c) for c in containers])
            self.pods[f"{namespace}/{name}"] = pod
            return pod

    def remove_pod(self, namespace: str, name: str) -> None:
        with self.lock:
            self.pods.pop(f"{namespace}/{name}", None)

    def pick(self, resource: str, count: int = 1) -> list[str]:
        """Healthy ids no listed container holds, as the kubelet's device manager picks."""
        with self.lock:
            taken = self.assigned(resource)
            free = [i for i, h in self.devices(resource) if h == "Healthy" and i not in taken]
            if len(free) < count:
                raise RuntimeError(f"kubelet: insufficient {resource}: {len(free)} free")
            return free[:count]

    def allocate(self, resource: str, device_ids: list[str]) -> dp.ContainerAllocateResponse:
        with self.lock:
            endpoint = self.endpoints[resource]
        response = endpoint.stub.Allocate(
            dp.AllocateRequest(
                container_requests=[dp.ContainerAllocateRequest(devices_ids=device_ids)]
            ),
            timeout=30,
        )
        result: dp.ContainerAllocateResponse = response.container_responses[0]
        return result

    def admit(
        self,
        namespace: str,
        name: str,
        container: str,
        resources: dict[str, int],
        device_ids: dict[str, list[str]] | None = None,
        containers: list[str] | None = None,
    ) -> dict[str, dp.ContainerAllocateResponse]:
        """Admit one container: list its pod first (devices empty for it), allocate every
        resource it asks for, then list the assigned ids. Raises grpc.RpcError on refusal,
        leaving the pod listed with no devices, as a rejected pod stays listed."""
        with self.lock:
            key = f"{namespace}/{name}"
            pod = self.pods.get(key) or self.add_pod(namespace, name, containers or [container])
            entry = next(c for c in pod.containers if c.name == container)
            chosen = dict(device_ids or {})
            for resource, count in resources.items():
                chosen.setdefault(resource, self.pick(resource, count))
        responses = {}
        for resource in resources:
            responses[resource] = self.allocate(resource, chosen[resource])
        with self.lock:
            for resource in resources:
                entry.devices[resource] = list(chosen[resource])
        return responses
