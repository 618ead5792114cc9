"""Client of the kubelet's PodResources v1 API: which containers hold which device ids.

Called from inside Allocate: the kubelet lists the pod being admitted, with no device yet for
the container being allocated.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

import grpc

from hygon_dcu_plugin.deviceplugin.api import podresources_v1_pb2 as pb
from hygon_dcu_plugin.deviceplugin.api import podresources_v1_pb2_grpc as pb_grpc


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


RETRY_DELAYS = (0.05, 0.1, 0.2, 0.4, 0.8)
RETRIED = (grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.UNAVAILABLE)


class PodResourcesError(Exception):
    """The kubelet's PodResources endpoint could not be asked."""


class PodLister(Protocol):
    def list(self) -> list[ListedPod]: ...


class PodResourcesClient:
    def __init__(self, socket_path: str, timeout: float = 5.0) -> None:
        self.socket_path = socket_path
        self.timeout = timeout

    def list(self) -> list[ListedPod]:
        # The kubelet rate-limits PodResources (100 qps, burst 10); a burst of Allocate calls
        # can hit it, and an Allocate that fails is final for its pod: back off and retry.
        for delay in (*RETRY_DELAYS, None):
            try:
                with grpc.insecure_channel(f"unix://{self.socket_path}") as channel:
                    stub = pb_grpc.PodResourcesListerStub(channel)
                    response = stub.List(pb.ListPodResourcesRequest(), timeout=self.timeout)
                break
            except grpc.RpcError as exc:
                if delay is None or exc.code() not in RETRIED:
                    raise PodResourcesError(
                        f"PodResources List on {self.socket_path} failed: "
                        f"{exc.code()} {exc.details()}"
                    ) from exc
                time.sleep(delay)
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
