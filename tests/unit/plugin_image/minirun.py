"""An Allocate answer as the simulator's container runner (tests/simulator/minirun) reads it.

Its own module, free of pytest, because the README's demo (tests/tools/demo_runtime.py) uses it
and installs no test tool.
"""

from __future__ import annotations

from hygon_dcu_plugin.deviceplugin.api import deviceplugin_v1beta1_pb2 as pb


def minirun_spec(response: pb.ContainerAllocateResponse) -> dict[str, object]:
    """An Allocate answer in tests/simulator/minirun's input format (what a runtime applies)."""
    return {
        "envs": dict(response.envs),
        "mounts": [
            {"container_path": m.container_path, "host_path": m.host_path, "read_only": m.read_only}
            for m in response.mounts
        ],
        "devices": [
            {
                "container_path": d.container_path,
                "host_path": d.host_path,
                "permissions": d.permissions,
            }
            for d in response.devices
        ],
    }
