"""One complete, valid grant for tests that need a grant but are about a few of its fields."""

from __future__ import annotations

import dataclasses
from typing import Any

from hygon_dcu_plugin.deviceplugin.grants import Grant

_SAMPLE = Grant(
    uuid="0a0b0c0d-0000-4000-8000-000000000001",
    card_pci="0000:09:00.0",
    card_index=0,
    gpu_instance_id=3,
    compute_instance_id=0,
    profile="2g.15gb",
    placement_start=0,
    placement_size=1,
    conf_path="/etc/dmi_mig_config/ci/dev0gi3ci0.conf",
    namespace="ns",
    pod_name="p",
    pod_uid="u-1",
    containers=("main",),
    device_ids=("partition-000",),
    created_at=1.5,
)


def sample_grant(**changes: Any) -> Grant:
    return dataclasses.replace(_SAMPLE, **changes)
