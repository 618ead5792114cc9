"""Refreshing the advertised device lists: concurrent callers share a computation, and none
returns before what it changed is published."""

from __future__ import annotations

import threading
import time

import pytest
from hygon_dcu_plugin.deviceplugin.advertise import Device
from plugin_harness import Harness


def _versioned_plan(
    harness: Harness, monkeypatch: pytest.MonkeyPatch, callers: int = 1
) -> tuple[list[int], list[int], list[int]]:
    """Replace the plan with one that reads a version number at its start, and the publish with
    one that records which version each published plan saw. The first computation lasts until
    every caller has made its change (at most 5 s), so the others queue behind it however
    slowly the threads start."""
    version = [0]
    plans: list[int] = []
    published: list[int] = []

    def plan() -> dict[str, list[Device]]:
        seen = version[0]
        plans.append(seen)
        deadline = time.monotonic() + 5
        while len(plans) == 1 and version[0] < callers and time.monotonic() < deadline:
            time.sleep(0.005)
        time.sleep(0.02)  # and the last ones have time to take their ticket
        return {"seen": [Device(str(seen), True)]}

    def publish(listed: dict[str, list[Device]]) -> None:
        published.append(int(listed["seen"][0].id))

    monkeypatch.setattr(harness.runtime, "plan", plan)
    monkeypatch.setattr(harness.runtime.board, "publish", publish)
    return version, plans, published


def test_queued_refreshes_share_one_computation_and_see_their_change(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    version, plans, published = _versioned_plan(harness, monkeypatch, callers=16)
    bump = threading.Lock()
    stale: list[tuple[int, int]] = []

    def change_then_refresh() -> None:
        with bump:
            version[0] += 1
            mine = version[0]
        harness.runtime.refresh()
        # Refreshes run one at a time and each reads the version at its start, so what was
        # published last is the newest published; it must include this caller's change.
        if published[-1] < mine:
            stale.append((mine, published[-1]))

    threads = [threading.Thread(target=change_then_refresh) for _ignored in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert stale == []
    assert published[-1] == 16
    # The callers that queued while the first computation ran shared the next one.
    assert len(plans) <= 3


def test_a_failed_refresh_covers_nobody(harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    version, plans, published = _versioned_plan(harness, monkeypatch)
    runtime = harness.runtime
    working_plan = runtime.plan

    def failing_plan() -> dict[str, list[Device]]:
        plans.append(-1)
        raise RuntimeError("library went away")

    monkeypatch.setattr(runtime, "plan", failing_plan)
    version[0] = 1
    runtime.refresh()  # logged, not raised; publishes nothing
    assert published == []
    monkeypatch.setattr(runtime, "plan", working_plan)
    runtime.refresh()  # must compute again, not trust the failed attempt
    assert published == [1]
    assert plans == [-1, 1]
