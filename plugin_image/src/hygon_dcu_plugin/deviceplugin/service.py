"""The device-plugin gRPC servers (one per resource), registration with the kubelet, and
re-registration when the kubelet restarts.

A new kubelet deletes every socket in the device-plugin directory, so the watcher checks that
our sockets still exist and that kubelet.sock is the same file; on any change it rebuilds the
servers and registers again.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent import futures
from typing import Any

import grpc

from hygon_dcu_plugin.deviceplugin.advertise import HEALTHY, UNHEALTHY
from hygon_dcu_plugin.deviceplugin.api import deviceplugin_v1beta1_pb2 as pb
from hygon_dcu_plugin.deviceplugin.api import deviceplugin_v1beta1_pb2_grpc as pb_grpc
from hygon_dcu_plugin.deviceplugin.board import DeviceBoard
from hygon_dcu_plugin.deviceplugin.refused import RequestRefused
from hygon_dcu_plugin.vocabulary import socket_name

API_VERSION = "v1beta1"
KUBELET_SOCKET = "kubelet.sock"

log = logging.getLogger(__name__)

# resource, device ids of one container -> the container's response
AllocateFn = Callable[[str, Sequence[str]], pb.ContainerAllocateResponse]


class DevicePluginServicer(pb_grpc.DevicePluginServicer):
    def __init__(
        self, resource: str, board: DeviceBoard, allocate: AllocateFn, stopping: threading.Event
    ) -> None:
        self.resource = resource
        self.board = board
        self.allocate = allocate
        self.stopping = stopping

    def GetDevicePluginOptions(self, request: pb.Empty, context: Any) -> pb.DevicePluginOptions:
        return pb.DevicePluginOptions(
            pre_start_required=False, get_preferred_allocation_available=False
        )

    def ListAndWatch(self, request: pb.Empty, context: Any) -> Iterator[pb.ListAndWatchResponse]:
        sent: tuple[object, ...] | None = None
        while context.is_active() and not self.stopping.is_set():
            devices, version = self.board.get(self.resource)
            if devices != sent:
                sent = devices
                yield pb.ListAndWatchResponse(
                    devices=[
                        pb.Device(ID=d.id, health=HEALTHY if d.healthy else UNHEALTHY)
                        for d in devices
                    ]
                )
            # Short timeout: notice a gone kubelet even when nothing changes.
            self.board.wait_change(version, timeout=1.0)

    def GetPreferredAllocation(
        self, request: pb.PreferredAllocationRequest, context: Any
    ) -> pb.PreferredAllocationResponse:
        return pb.PreferredAllocationResponse()

    def PreStartContainer(
        self, request: pb.PreStartContainerRequest, context: Any
    ) -> pb.PreStartContainerResponse:
        return pb.PreStartContainerResponse()

    def Allocate(self, request: pb.AllocateRequest, context: Any) -> pb.AllocateResponse:
        responses = []
        for container in request.container_requests:
            try:
                responses.append(self.allocate(self.resource, list(container.devices_ids)))
            except RequestRefused as refused:
                context.abort(grpc.StatusCode[refused.reason.status], str(refused))
            except Exception as exc:
                log.exception("Allocate failed", extra={"resource": self.resource})
                context.abort(
                    grpc.StatusCode.INTERNAL, f"{self.resource}: allocation failed: {exc}"
                )
        return pb.AllocateResponse(container_responses=responses)


class PluginServers:
    """One gRPC server per resource on a unix socket in the kubelet's device-plugin directory."""

    def __init__(
        self,
        plugin_dir: str,
        resources: Sequence[str],
        board: DeviceBoard,
        allocate: AllocateFn,
        *,
        on_registered: Callable[[bool], None] | None = None,
        max_workers: int = 48,
    ) -> None:
        self.plugin_dir = plugin_dir
        self.resources = list(resources)
        self.board = board
        self.allocate = allocate
        self.on_registered = on_registered or (lambda ok: None)
        self.max_workers = max_workers
        self._servers: list[grpc.Server] = []
        self._stopping = threading.Event()
        self._kubelet_identity: tuple[int, int] | None = None
        self.registrations = 0

    def _socket(self, resource: str) -> str:
        return os.path.join(self.plugin_dir, socket_name(resource))

    def _kubelet_socket_identity(self) -> tuple[int, int] | None:
        try:
            info = os.stat(os.path.join(self.plugin_dir, KUBELET_SOCKET))
        except FileNotFoundError:
            return None
        return (info.st_dev, info.st_ino)

    def start(self) -> None:
        self._stopping = threading.Event()
        for resource in self.resources:
            path = self._socket(resource)
            if os.path.lexists(path):
                os.unlink(path)
            server = grpc.server(futures.ThreadPoolExecutor(max_workers=self.max_workers))
            pb_grpc.add_DevicePluginServicer_to_server(
                DevicePluginServicer(resource, self.board, self.allocate, self._stopping), server
            )
            server.add_insecure_port(f"unix://{path}")
            server.start()
            self._servers.append(server)

    def stop(self) -> None:
        self._stopping.set()
        self.board.wake()
        for server in self._servers:
            server.stop(grace=0.5)
        self._servers = []

    def register(self) -> bool:
        """Register every resource with the kubelet; False if the kubelet is not there yet."""
        identity = self._kubelet_socket_identity()
        if identity is None:
            return False
        target = f"unix://{os.path.join(self.plugin_dir, KUBELET_SOCKET)}"
        try:
            with grpc.insecure_channel(target) as channel:
                stub = pb_grpc.RegistrationStub(channel)
                for resource in self.resources:
                    stub.Register(
                        pb.RegisterRequest(
                            version=API_VERSION,
                            endpoint=socket_name(resource),
                            resource_name=resource,
                            options=pb.DevicePluginOptions(),
                        ),
                        timeout=5.0,
                    )
        except grpc.RpcError as exc:
            log.warning(
                "registration with the kubelet failed; will retry",
                extra={"code": str(exc.code()), "details": exc.details()},
            )
            return False
        self._kubelet_identity = identity
        self.registrations += 1
        log.info("registered with the kubelet", extra={"resources": self.resources})
        return True

    def needs_restart(self) -> bool:
        """True when the kubelet restarted: our sockets are gone or kubelet.sock is new."""
        if any(not os.path.exists(self._socket(r)) for r in self.resources):
            return True
        return self._kubelet_socket_identity() != self._kubelet_identity

    def _restart(self) -> bool:
        self.stop()
        try:
            self.start()
        except RuntimeError as exc:  # e.g. the directory is not there yet: retry next poll
            log.error(
                "cannot serve on the device-plugin directory",
                extra={"dir": self.plugin_dir, "error": str(exc)},
            )
            self.stop()
            return False
        return True

    def run(self, stop: threading.Event, poll: float = 0.5) -> None:
        """Serve until stop is set, restarting and re-registering after a kubelet restart."""
        serving = self._restart()
        registered = serving and self.register()
        self.on_registered(registered)
        while not stop.wait(poll):
            if registered and not self.needs_restart():
                continue
            if self._kubelet_socket_identity() is None:
                if registered:
                    log.info("kubelet socket gone; waiting for the kubelet to come back")
                    registered = False
                    self.on_registered(False)
                continue
            if (
                not serving
                or registered
                or any(not os.path.exists(self._socket(r)) for r in self.resources)
            ):
                serving = self._restart()
            registered = serving and self.register()
            self.on_registered(registered)
        self.stop()
