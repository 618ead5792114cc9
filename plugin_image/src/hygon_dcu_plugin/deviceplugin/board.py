"""The current device lists, shared between whoever computes them and the ListAndWatch streams.

Every publish bumps a version; streams wake on it, so counts reach the kubelet after every
create and destroy.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence

from hygon_dcu_plugin.deviceplugin.advertise import Device


class DeviceBoard:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._plan: dict[str, tuple[Device, ...]] = {}
        self._version = 0

    def publish(self, plan: Mapping[str, Sequence[Device]]) -> None:
        with self._cond:
            changed = False
            for resource, listed in plan.items():
                devices = tuple(listed)
                if self._plan.get(resource) != devices:
                    self._plan[resource] = devices
                    changed = True
            if changed:
                self._version += 1
                self._cond.notify_all()

    def resources(self) -> list[str]:
        with self._cond:
            return sorted(self._plan)

    def get(self, resource: str) -> tuple[tuple[Device, ...], int]:
        with self._cond:
            return self._plan.get(resource, ()), self._version

    def wait_change(self, seen_version: int, timeout: float) -> int:
        with self._cond:
            self._cond.wait_for(lambda: self._version != seen_version, timeout=timeout)
            return self._version

    def wake(self) -> None:
        """Wake every stream (used at shutdown so they notice their context ended)."""
        with self._cond:
            self._version += 1
            self._cond.notify_all()
