"""The node layer as the device-plugin image ships it: the same files, copied under the
collection's import name, on a bare interpreter with no Ansible (and no site-packages) at all."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from simnode import SimNode

MODULE_UTILS = Path(__file__).resolve().parents[4] / "plugins" / "module_utils"

PROBE = """
import json, sys
from ansible_collections.hygon.dcu.plugins.module_utils.node import Node
from ansible_collections.hygon.dcu.plugins.module_utils import facts, holders, registry
node = Node(sys.argv[1])
cards = node.cards()
print(json.dumps({
    "mode": facts.mode_facts(node.mode()),
    "profiles": [p["name"] for p in facts.card_facts(cards[0])["profiles"]],
    "ansible": sorted(m for m in sys.modules if m == "ansible" or m.startswith("ansible.")),
}))
"""


def test_node_layer_runs_without_ansible(sim_node: SimNode, tmp_path: Path) -> None:
    image_root = tmp_path / "opt-hygon-dcu"
    target = image_root / "ansible_collections" / "hygon" / "dcu" / "plugins" / "module_utils"
    shutil.copytree(MODULE_UTILS, target, ignore=shutil.ignore_patterns("__pycache__"))
    completed = subprocess.run(
        [sys.executable, "-S", "-c", PROBE, str(sim_node.root)],
        env={"PYTHONPATH": str(image_root), "HYDMI_SIM_ROOT": str(sim_node.root)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    result = json.loads(completed.stdout)
    assert result["mode"]["current"] == "disabled" and result["mode"]["source"] == "library"
    assert result["profiles"] == ["2g.15gb", "4g.31gb", "8g.63gb"]
    assert result["ansible"] == []
