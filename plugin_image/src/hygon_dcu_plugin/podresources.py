"""Client of the kubelet's PodResources v1 API: which containers hold which device ids.

Called from inside Allocate: the kubelet lists the pod being admitted, with no device yet for
the container being allocated.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

import grpc

from .api import podresources_v1_pb2 as pb
from .api import podresources_v1_pb2_grpc as pb_grpc


@dataclass(frozen=True)
class ListedContainer:
    name: str
    devices: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # resource -> ids


@dataclass(frozen=True)
class ListedPod:
    namespace: str
    name: str
    containers: tuple[ListedContainer, ...]

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


class PodResourcesError(Exception):
    """The kubelet's PodResources endpoint could not be asked."""


class PodLister(Protocol):
    def list(self) -> list[ListedPod]: ...


class PodResourcesClient:
    def __init__(self, socket_path: str, timeout: float = 5.0) -> None:
        self.socket_path = socket_path
        self.timeout = timeout

    def list(self) -> list[ListedPod]:
        try:
            with grpc.insecure_channel(f"unix://{self.socket_path}") as channel:
                stub = pb_grpc.PodResourcesListerStub(channel)
                response = stub.List(pb.ListPodResourcesRequest(), timeout=self.timeout)
        except grpc.RpcError as exc:
            raise PodResourcesError(
                f"PodResources List on {self.socket_path} failed: {exc.code()} {exc.details()}"
            ) from exc
        return [
            ListedPod(
                namespace=pod.namespace,
                name=pod.name,
                containers=tuple(
                    ListedContainer(
                        name=c.name,
                        devices={d.resource_name: tuple(d.device_ids) for d in c.devices},
                    )
                    for c in pod.containers
                ),
            )
            for pod in response.pod_resources
        ]
