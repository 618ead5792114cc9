"""Keeps the Node's capability labels true while the plugin runs (the ``node_labels`` opt-in,
docs/operating.md "Node labels"): what the mig_node role wrote at its last run can go stale
when a card fails, is replaced, or the mode is switched by hand.

The labels and the patch are module_utils/node_labels.py's, the role's own definition, from the
same input as mig_info's: the mode and the cards as the management library reports them now.
Each pass reads both and the Node's labels and patches only what differs. Fail closed: without
the library nothing is certain (the registry's mode is a guess), so nothing is written; a
failed call is logged and tried again on the next pass.
"""

from __future__ import annotations

import logging
import threading

from ansible_collections.hygon.dcu.plugins.module_utils.hydmi import HydmiError
from ansible_collections.hygon.dcu.plugins.module_utils.node import ModeSource, Node
from ansible_collections.hygon.dcu.plugins.module_utils.node_labels import (
    capability_labels,
    labels_patch,
)

from hygon_dcu_plugin.kube import KubeApi, KubeApiError

log = logging.getLogger(__name__)


class NodeLabeler:
    def __init__(self, node: Node, kube: KubeApi, node_name: str) -> None:
        self.node = node
        self.kube = kube
        self.node_name = node_name

    def settle(self) -> dict[str, str | None]:
        """One pass: the patch it applied (empty when the Node was right or nothing is sure)."""
        mode = self.node.mode()
        if mode.source is not ModeSource.LIBRARY:
            log.warning("node labels not checked: mode unreadable", extra={"error": mode.error})
            return {}
        try:
            wanted = capability_labels(self.node.cards(), mode.current)
        except HydmiError as exc:
            log.warning("node labels not checked: cards unreadable", extra={"error": str(exc)})
            return {}
        try:
            current = self.kube.node_labels(self.node_name)
            patch = labels_patch(current, wanted)
            if patch:
                self.kube.patch_node_labels(self.node_name, patch)
                log.info("node labels made true", extra={"labels": patch})
            return patch
        except KubeApiError as exc:
            log.warning("node labels not checked, retrying", extra={"error": str(exc)})
            return {}

    def run(self, stop: threading.Event, period_seconds: float) -> None:
        while not stop.is_set():
            self.settle()
            stop.wait(period_seconds)
