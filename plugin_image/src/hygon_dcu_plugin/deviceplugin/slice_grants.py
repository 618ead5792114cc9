"""Slice grants: which pod's container owns which live logical slice (vdev).

Kept in the grants store beside the partition grants (``grants.py``: one atomic JSON file each,
written before Allocate answers, under the same mark), named ``vdev<N>.json``. A vdev has no
uuid and its id is reused once destroyed, so the grant records what the driver wrote for it
(card, compute-unit mask, memory): a live vdev is the grant's only when all of them match
(``SliceGrant.matches``), and nothing else is ever destroyed for it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ansible_collections.hygon.dcu.plugins.module_utils.vdevs import Vdev

from hygon_dcu_plugin.deviceplugin import grant_json

SLICE_SCHEMA = 1
SLICE_FILE_NAME = re.compile(r"vdev(0|[1-9][0-9]{0,3})\.json")


@dataclass(frozen=True)
class SliceGrant:
    vdev_id: int
    card_pci: str
    card_index: int
    compute_units: int
    memory_mib: int
    cu_mask: str  # the conf's mask, as hex: with the card and memory, the vdev's identity
    conf_path: str  # /etc/vdev/vdev<N>.conf on the host
    mark_name: str  # the attribution mark's file name under /etc/vdev/dynamic ("" for none)
    namespace: str
    pod_name: str
    pod_uid: str
    containers: tuple[str, ...]  # exactly one: a slice serves one container
    device_ids: tuple[str, ...]
    created_at: float
    schema: int = SLICE_SCHEMA

    @property
    def file_name(self) -> str:
        return f"vdev{self.vdev_id}.json"

    @property
    def pod_key(self) -> str:
        return f"{self.namespace}/{self.pod_name}"

    @property
    def label(self) -> str:
        return f"vdev {self.vdev_id} on card {self.card_index} ({self.card_pci})"

    def matches(self, vdev: Vdev) -> bool:
        """The live vdev is this grant's: same id, card, size and compute-unit mask."""
        conf = vdev.conf
        return (
            conf is not None
            and (vdev.id, vdev.card, vdev.compute_units, vdev.memory_mib)
            == (self.vdev_id, self.card_index, self.compute_units, self.memory_mib)
            and hex(conf.cu_mask) == self.cu_mask
            and conf.pci == self.card_pci
        )

    def to_json(self) -> str:
        return grant_json.dump(self)

    @classmethod
    def from_json(cls, text: str) -> SliceGrant:
        data = grant_json.load(text, SLICE_SCHEMA)
        for name in ("containers", "device_ids"):
            if not isinstance(data.get(name), list):
                raise ValueError(f"field {name} is not a list")
        data["containers"] = tuple(str(c) for c in data["containers"])
        data["device_ids"] = tuple(str(d) for d in data["device_ids"])
        grant = cls(**data)
        for name, kind in (
            ("vdev_id", int),
            ("card_index", int),
            ("compute_units", int),
            ("memory_mib", int),
            ("card_pci", str),
            ("cu_mask", str),
            ("mark_name", str),
            ("namespace", str),
            ("pod_name", str),
            ("pod_uid", str),
        ):
            value = getattr(grant, name)
            if not isinstance(value, kind) or isinstance(value, bool):
                raise ValueError(f"field {name} is not a {kind.__name__}")
        if len(grant.containers) != 1:
            raise ValueError(f"{len(grant.containers)} containers; a slice serves exactly one")
        return grant
