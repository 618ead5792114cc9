"""A site's own serving certificate, as an operator would supply it to the role."""

from __future__ import annotations

import functools
from typing import Any

from site_pki import make_certificate

__all__ = ["EXTENDER_SERVICE", "WEBHOOK_SERVICE", "make_certificate", "site_certificate_variables"]

NAMESPACE = "hygon-dcu-system"
WEBHOOK_SERVICE = "hygon-dcu-admission"
EXTENDER_SERVICE = "hygon-dcu-extender"


def _service_names(service: str) -> tuple[str, ...]:
    """The names the role's own certificate of a Service carries, the one clients use first."""
    svc = f"{service}.{NAMESPACE}.svc"
    return svc, service, f"{service}.{NAMESPACE}", f"{svc}.cluster.local"


@functools.cache
def _site_certificates() -> tuple[tuple[str, str, str], tuple[str, str, str]]:
    # Valid far beyond the role's cert_min_days (30), as a site's would be.
    return (
        make_certificate(*_service_names(WEBHOOK_SERVICE), days=365),
        make_certificate(*_service_names(EXTENDER_SERVICE), days=365),
    )


def site_certificate_variables() -> dict[str, Any]:
    """The role variables that hand it a site's own webhook and extender certificates (each of
    its own CA), made once per test process: with them the role mints no CA or certificate."""
    (webhook_cert, webhook_key, webhook_ca), (extender_cert, extender_key, extender_ca) = (
        _site_certificates()
    )
    return {
        "hygon_dcu_device_plugin_webhook_tls_cert": webhook_cert,
        "hygon_dcu_device_plugin_webhook_tls_key": webhook_key,
        "hygon_dcu_device_plugin_webhook_tls_ca": webhook_ca,
        "hygon_dcu_device_plugin_extender_tls_cert": extender_cert,
        "hygon_dcu_device_plugin_extender_tls_key": extender_key,
        "hygon_dcu_device_plugin_extender_tls_ca": extender_ca,
    }
