"""The device-plugin, webhook and extender test helpers (kubelet emulator, fake API server,
simulated node, test CA) are imported by bare name, as their own tests do; the three
programs are scraped once for the whole session, and the alert rules and the dashboard are
what the device_plugin role renders, once for the whole session too."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from role_render import Monitoring, render_monitoring

_PLUGIN_TESTS = Path(__file__).resolve().parents[1] / "plugin_image"
for _path in (_PLUGIN_TESTS, _PLUGIN_TESTS / "webhook"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from scrapes import Scrape, scrape_all  # noqa: E402  (needs the paths above)


@pytest.fixture(scope="session")
def scrape(tmp_path_factory: pytest.TempPathFactory) -> Scrape:
    return scrape_all(tmp_path_factory)


@pytest.fixture(scope="session")
def monitoring(tmp_path_factory: pytest.TempPathFactory) -> Monitoring:
    return render_monitoring(tmp_path_factory.mktemp("monitoring") / "out")
