"""docs/observability.md's metric reference is what the programs really export, and promtool
accepts every page and the alert rules.

Each program's table must list exactly the ``hygon_dcu_`` families its real page declares
(``scrapes.py``), with their type and label names; a family dropped or renamed by the
product, or a row for a family that does not exist, fails here.
"""

from __future__ import annotations

import copy
import fnmatch
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from role_render import Monitoring
from scrapes import Exported, Scrape, parse_exposition

REPO = Path(__file__).resolve().parents[3]
REFERENCE = REPO / "docs" / "observability.md"
# Table heading -> the program's name in hygon_dcu_build_info.
PROGRAMS = {
    "Device plugin": "device-plugin",
    "Admission webhook": "admission",
    "Scheduler extender": "extender",
}
EVERY_PROGRAM = "Every program"
BUILD_INFO = "hygon_dcu_build_info"


@dataclass(frozen=True)
class Row:
    names: tuple[str, ...]  # one family, or the patterns of the shared row
    kind: str
    labels: frozenset[str]


def reference_tables(markdown: str) -> dict[str, list[Row]]:
    """Heading -> its rows, in the "Metric reference" section. A label cell's names are its
    backticked words outside parentheses (which give values)."""
    section = markdown.split("\n## Metric reference\n", 1)[1].split("\n## ", 1)[0]
    tables: dict[str, list[Row]] = {}
    heading = ""
    for line in section.splitlines():
        if line.startswith("### "):
            heading = line[4:].strip()
            tables[heading] = []
        elif line.startswith("| `") and heading:
            name, kind, labels = (cell.strip() for cell in line.strip("|").split("|")[:3])
            tables[heading].append(
                Row(
                    tuple(re.findall(r"`([^`]+)`", name)),
                    kind.split(" ")[0],
                    frozenset(re.findall(r"`(\w+)`", re.sub(r"\([^)]*\)", "", labels))),
                )
            )
    return tables


def exported_by(pages: list[str]) -> Exported:
    merged = Exported()
    for page in pages:
        merged = merged.merge(parse_exposition(page))
    return merged


def differences(rows: list[Row], pages: list[str]) -> list[str]:
    """What the table says and the pages do not show, and the other way round."""
    exported = exported_by(pages)
    families = {
        name: kind
        for name, kind in exported.types.items()
        if name.startswith("hygon_dcu_") and name != BUILD_INFO
    }
    found = []
    for row in rows:
        (name,) = row.names
        if name not in families:
            found.append(f"{name} is in the reference but not exported")
            continue
        if families[name] != row.kind:
            found.append(f"{name} is a {families[name]}, the reference says {row.kind}")
        labels = exported.family_labels(name)
        if labels is not None and labels != row.labels:
            found.append(f"{name} has labels {sorted(labels)}, the reference {sorted(row.labels)}")
    listed = {row.names[0] for row in rows}
    found += [f"{name} is exported but not in the reference" for name in families.keys() - listed]
    return sorted(found)


@pytest.fixture(scope="module")
def tables() -> dict[str, list[Row]]:
    return reference_tables(REFERENCE.read_text())


def test_the_reference_has_a_table_per_program(tables: dict[str, list[Row]]) -> None:
    assert set(tables) == {EVERY_PROGRAM, *PROGRAMS}
    assert all(len(rows) >= 2 for rows in tables.values())


@pytest.mark.parametrize("heading", sorted(PROGRAMS))
def test_each_program_exports_exactly_its_table(
    scrape: Scrape, tables: dict[str, list[Row]], heading: str
) -> None:
    assert differences(tables[heading], scrape.pages()[PROGRAMS[heading]]) == []


def test_every_program_exports_its_build_and_process_families(
    scrape: Scrape, tables: dict[str, list[Row]]
) -> None:
    build, shared = tables[EVERY_PROGRAM]
    assert build.names == (BUILD_INFO,)
    for program, pages in scrape.pages().items():
        for page in pages:
            exported = parse_exposition(page)
            assert exported.types[BUILD_INFO] == build.kind
            assert exported.family_labels(BUILD_INFO) == build.labels
            assert re.findall(rf'^{BUILD_INFO}\{{.*program="([^"]+)"', page, re.M) == [program]
            for pattern in shared.names:
                assert fnmatch.filter(exported.types, pattern), (program, pattern)


def test_a_family_gone_or_renamed_is_caught(scrape: Scrape, tables: dict[str, list[Row]]) -> None:
    plugin = tables["Device plugin"]
    renamed = scrape.replaced("hygon_dcu_card_occupancy_ratio", "hygon_dcu_card_occupancy")
    assert differences(plugin, renamed.pages()["device-plugin"]) == [
        "hygon_dcu_card_occupancy is exported but not in the reference",
        "hygon_dcu_card_occupancy_ratio is in the reference but not exported",
    ]
    gone = "\n".join(
        line
        for line in scrape.extender.splitlines()
        if "hygon_dcu_extender_stale_nodes" not in line
    )
    assert differences(tables["Scheduler extender"], [gone]) == [
        "hygon_dcu_extender_stale_nodes is in the reference but not exported"
    ]
    relabelled = scrape.replaced('verb="', 'method="').extender
    assert differences(tables["Scheduler extender"], [relabelled]) == [
        "hygon_dcu_extender_request_duration_seconds has labels ['method'], the reference ['verb']"
    ]


def promtool(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    tool = shutil.which("promtool")
    assert tool, "promtool is missing: tests/tools/bootstrap.sh puts it in the venv"
    return subprocess.run(
        [tool, *args], input=stdin, capture_output=True, text=True, timeout=60, check=False
    )


def test_promtool_accepts_every_page(scrape: Scrape) -> None:
    for program, pages in scrape.pages().items():
        for page in pages:
            checked = promtool("check", "metrics", stdin=page)
            assert checked.returncode == 0, (program, checked.stdout + checked.stderr)
    # It really reads them: a counter without _total is refused.
    bad = "# HELP x_count A.\n# TYPE x_count counter\nx_count 1\n"
    refused = promtool("check", "metrics", stdin=bad)
    assert refused.returncode != 0 and '"_total" suffix' in refused.stdout + refused.stderr


def rule_groups(rules: dict[str, Any]) -> str:
    """The PrometheusRule's groups as the rule file Prometheus itself would load."""
    return yaml.safe_dump({"groups": rules["spec"]["groups"]})


def test_promtool_accepts_the_alert_rules(tmp_path: Path, monitoring: Monitoring) -> None:
    rules = copy.deepcopy(monitoring.rules)
    count = sum(len(group["rules"]) for group in rules["spec"]["groups"])
    rule_file = tmp_path / "rules.yaml"
    rule_file.write_text(rule_groups(rules))
    checked = promtool("check", "rules", str(rule_file))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {count} rules found" in checked.stdout
    # A broken expression is refused.
    rules["spec"]["groups"][0]["rules"][0]["expr"] += " sum("
    rule_file.write_text(rule_groups(rules))
    assert promtool("check", "rules", str(rule_file)).returncode != 0
