"""Reads the fleet report back from an ansible-runner job's events, the way AWX reads a job's
artifacts (the stats event's ``artifact_data``), and checks it against the simulated node.

    report_artifact.py ARTIFACTS_DIR "$(simnode status NODE)"

Used by tests/tools/ee_test.sh after ``hygon.dcu.report`` ran in the execution environment.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
# The artifact's name, as the role defines it.
ARTIFACT = yaml.safe_load((REPO / "roles/fleet_report/vars/main.yml").read_text())[
    "fleet_report__artifact_name"
]


def stats_event(artifacts: Path) -> dict[str, Any]:
    events = [json.loads(path.read_text()) for path in artifacts.glob("*/job_events/*.json")]
    stats = [event for event in events if event.get("event") == "playbook_on_stats"]
    if len(stats) != 1:
        raise SystemExit(f"{len(stats)} stats events among {len(events)} job events in {artifacts}")
    event: dict[str, Any] = stats[0]
    return event


def main() -> int:
    artifacts, status_text = Path(sys.argv[1]), sys.argv[2]
    data = stats_event(artifacts)["event_data"].get("artifact_data") or {}
    report = data.get(ARTIFACT)
    if not report:
        print(f"no {ARTIFACT} among the job's artifacts: {sorted(data)}")
        return 1
    status = dict(line.split(": ", 1) for line in status_text.splitlines() if ": " in line)
    # The simulator's "card N: PCI" lines: the report names cards by index (the PCI address
    # comes from the partition registry, which a node with the mode off may not have).
    cards = sorted(int(key.split()[1]) for key in status if key.startswith("card "))
    (node,) = report["nodes"]
    found = {
        "mode": node["mode"],
        "cards": [card["index"] for card in node["cards"]],
        "not_read": report["not_read"],
    }
    wanted = {"mode": status["mode"], "cards": cards, "not_read": []}
    if found != wanted:
        print(f"the artifact says {found}, the simulated node {wanted}")
        return 1
    print(f"    artifact {ARTIFACT}: mode {node['mode']}, cards {found['cards']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
