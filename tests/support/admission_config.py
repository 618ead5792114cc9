"""The role's ValidatingWebhookConfiguration as tests read it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Pod creation, and the guard on the product's accounts' pod updates.
WEBHOOKS = ("pods.admission.dcu.hygon.com", "pod-writes.admission.dcu.hygon.com")


def client_config(configuration: Mapping[str, Any]) -> dict[str, Any]:
    """The one clientConfig of the configuration: both webhooks call the same Service with the
    same CA."""
    webhooks = configuration["webhooks"]
    assert [webhook["name"] for webhook in webhooks] == list(WEBHOOKS)
    first, *rest = (webhook["clientConfig"] for webhook in webhooks)
    assert all(other == first for other in rest), webhooks
    return dict(first)
