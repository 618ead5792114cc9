"""The Allocate answer: exactly what the vendor runtime needs to see one partition.

Host paths are the node's real paths (the container runtime reads them on the host); the
plugin itself looks at the host through host_root. `answer_root` prefixes the host paths of the
answer: "/" on a real node, the node's root directory on a simulated one (whose "runtime",
tests/simulator/minirun, runs on the machine that holds the simulated root).
"""

from __future__ import annotations

import logging
import os

from ansible_collections.hygon.dcu.plugins.module_utils.hostpath import host_path

from hygon_dcu_plugin.deviceplugin.api import deviceplugin_v1beta1_pb2 as pb
from hygon_dcu_plugin.host import PCI_DEVICES
from hygon_dcu_plugin.vocabulary import ENV_VISIBLE_DEVICE

log = logging.getLogger(__name__)

KFD = "/dev/kfd"
MKFD = "/dev/mkfd"
HYHAL = "/opt/hyhal"
DTK = "/opt/dtk"
DTK_IN_CONTAINER = "/opt/hygondriver"


class ResponseError(Exception):
    """The node lacks something the answer needs; the message says what."""


def card_render_nodes(host_root: str, pci: str) -> list[str]:
    """The card's /dev/dri/card<N> and /dev/dri/renderD<M>, read from sysfs under its PCI
    address (minors are not derivable from the library index). Part of the answer: what it
    cannot find fails this Allocate as a ResponseError (the failure metric's reason)."""
    drm = host_path(host_root, f"{PCI_DEVICES}/{pci}/drm")
    try:
        names = sorted(os.listdir(drm))
    except OSError as exc:
        raise ResponseError(
            f"cannot read {drm} to find the DRM nodes of card {pci}: {exc}"
        ) from exc
    nodes = [f"/dev/dri/{n}" for n in names if n.startswith(("card", "renderD"))]
    if not any(n.startswith("/dev/dri/card") for n in nodes) or not any(
        n.startswith("/dev/dri/renderD") for n in nodes
    ):
        raise ResponseError(f"{drm} lists no card/renderD node for card {pci} (found {names})")
    return nodes


def _common(host_root: str, answer_root: str, pci: str) -> pb.ContainerAllocateResponse:
    response = pb.ContainerAllocateResponse()
    for path in (KFD, MKFD):
        response.devices.append(
            pb.DeviceSpec(
                container_path=path, host_path=host_path(answer_root, path), permissions="rwm"
            )
        )
    _render_nodes(response, host_root, answer_root, pci)
    if os.path.isdir(host_path(host_root, HYHAL)):
        response.mounts.append(
            pb.Mount(container_path=HYHAL, host_path=host_path(answer_root, HYHAL), read_only=True)
        )
    else:
        # Without it the runtime prints "open hydmilib:libhydmi.so error"; say so in our log.
        log.warning("host has no %s; the workload will not find libhydmi.so", HYHAL)
    if os.path.isdir(host_path(host_root, DTK)):
        response.mounts.append(
            pb.Mount(
                container_path=DTK_IN_CONTAINER,
                host_path=host_path(answer_root, DTK),
                read_only=True,
            )
        )
    return response


def _render_nodes(
    response: pb.ContainerAllocateResponse, host_root: str, answer_root: str, pci: str
) -> None:
    for path in card_render_nodes(host_root, pci):
        response.devices.append(
            pb.DeviceSpec(
                container_path=path, host_path=host_path(answer_root, path), permissions="rw"
            )
        )


def partition_response(
    host_root: str, answer_root: str, pci: str, conf_path: str, uuid: str
) -> pb.ContainerAllocateResponse:
    if not os.path.isfile(host_path(host_root, conf_path)):
        # Checked right before answering: binding a missing source makes the runtime create a
        # directory there, which poisons that instance id for good.
        raise ResponseError(f"the instance's registry file {conf_path} is missing")
    response = _common(host_root, answer_root, pci)
    # At its own path: the runtime scans /etc/dmi_mig_config/ci by absolute path.
    response.mounts.append(
        pb.Mount(
            container_path=conf_path, host_path=host_path(answer_root, conf_path), read_only=True
        )
    )
    response.envs[ENV_VISIBLE_DEVICE] = f"MIG-{uuid}"
    return response


def whole_card_response(
    host_root: str, answer_root: str, pcis: list[str]
) -> pb.ContainerAllocateResponse:
    response = _common(host_root, answer_root, pcis[0])
    for pci in pcis[1:]:
        _render_nodes(response, host_root, answer_root, pci)
    return response


# Where a slice's workload reads its conf (docs/dev/hardware.md, "Logical slices").
VDEV_CONF_IN_CONTAINER = "/etc/vdev/docker"


def slice_response(
    host_root: str, answer_root: str, pci: str, conf_path: str, vdev_id: int
) -> pb.ContainerAllocateResponse:
    """The card's devices and the vdev's conf, read-only, as ``vdev<N>.conf`` in the directory
    the vendor runtime scans; no environment variable is needed."""
    if not os.path.isfile(host_path(host_root, conf_path)):
        # As for partitions: a missing bind source would become a directory on the host.
        raise ResponseError(f"the slice's conf file {conf_path} is missing")
    response = _common(host_root, answer_root, pci)
    response.mounts.append(
        pb.Mount(
            container_path=f"{VDEV_CONF_IN_CONTAINER}/vdev{vdev_id}.conf",
            host_path=host_path(answer_root, conf_path),
            read_only=True,
        )
    )
    return response
