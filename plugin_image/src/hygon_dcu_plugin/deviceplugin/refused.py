"""The exception that carries an Allocate refusal to the kubelet (``service.py`` answers it
with the refusal's gRPC status)."""

from __future__ import annotations

from hygon_dcu_plugin.refusal import AllocateRefusal
from hygon_dcu_plugin.request import Reason


class RequestRefused(Exception):
    """An Allocate the plugin will not serve; the message tells the user what to change.

    ``reason`` is the AllocateRefusal; ``request_reason`` is the request model's Reason when
    the container's own resources are what is wrong (``for_request``).
    """

    def __init__(self, reason: AllocateRefusal, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.request_reason: Reason | None = None

    @classmethod
    def for_request(cls, request_reason: Reason, message: str) -> RequestRefused:
        """Refused for the container's own resources: the refusal is the reason's."""
        refused = cls(request_reason.refusal, message)
        refused.request_reason = request_reason
        return refused
