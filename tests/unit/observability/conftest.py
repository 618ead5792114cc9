"""The device-plugin and webhook test helpers (kubelet emulator, fake API server, simulated
node, test CA) are imported by bare name, as their own tests do."""

from __future__ import annotations

import sys
from pathlib import Path

_PLUGIN_TESTS = Path(__file__).resolve().parents[1] / "plugin_image"
for _path in (_PLUGIN_TESTS, _PLUGIN_TESTS / "webhook"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))
