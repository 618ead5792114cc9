"""Settings: defaults, then the config file (YAML), then command-line flags."""

from __future__ import annotations

import argparse
import math
import os
import re
from dataclasses import dataclass, fields, replace
from typing import Any

from hygon_dcu_plugin.vocabulary import POLICIES


class ConfigError(Exception):
    """The configuration cannot be used; the message names the key and the fix."""


# Inclusive bounds of the numeric settings. A resync below the floor busy-loops the reclaimer;
# above the ceiling (or inf) its wait overflows or a missed event waits for hours.
# The geometry Lease (docs/dev/extender.md) is renewed at least every geometry_renew_seconds
# and trusted by the extender for geometry_lease_seconds: a longer lease keeps a dead plugin's
# node in the extender's choice for longer, a shorter renewal writes to the API server more.
BOUNDS: dict[str, tuple[float, float]] = {
    "grace_seconds": (0.0, 3600.0),
    "resync_seconds": (0.1, 3600.0),
    "geometry_renew_seconds": (1.0, 300.0),
    "geometry_lease_seconds": (2, 600),
}

# The API server's object name rules: a namespace is a DNS label (RFC 1123), most other names
# (a Lease's, a Node's) a DNS subdomain.
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_LABEL_MAX = 63
_DNS_SUBDOMAIN_MAX = 253


def kube_name_problem(name: str, subdomain: bool) -> str | None:
    """Why the API server would refuse ``name`` as an object name, or None."""
    if subdomain:
        if len(name) > _DNS_SUBDOMAIN_MAX or not all(
            _DNS_LABEL.fullmatch(part) for part in name.split(".")
        ):
            return (
                f"must be a DNS subdomain: lowercase letters, digits, '-' and '.', at most "
                f"{_DNS_SUBDOMAIN_MAX} characters, a letter or digit at each end"
            )
        return None
    if len(name) > _DNS_LABEL_MAX or not _DNS_LABEL.fullmatch(name):
        return (
            f"must be a DNS label: lowercase letters, digits and '-', at most "
            f"{_DNS_LABEL_MAX} characters, a letter or digit at each end"
        )
    return None


def _is_host_port(address: object) -> bool:
    """HOST:PORT with a port from 1 to 65535 (an IPv6 host in brackets): what a listener binds."""
    if not isinstance(address, str):
        return False
    host, _ignored, port = address.rpartition(":")
    return bool(host) and port.isascii() and port.isdigit() and 0 < int(port) < 65536


@dataclass(frozen=True)
class Settings:
    host_root: str = "/"
    answer_root: str = "/"
    library_path: str | None = None
    device_plugin_dir: str = "/var/lib/kubelet/device-plugins"
    pod_resources_socket: str = "/var/lib/kubelet/pod-resources/kubelet.sock"
    grants_dir: str = "/var/lib/hygon-dcu/grants"
    lock_dir: str = "/var/lib/hygon-dcu/locks"
    policy: str = "pack"
    grace_seconds: float = 30.0
    resync_seconds: float = 30.0
    node_name: str | None = None
    kubeconfig: str | None = None
    health_address: str = "0.0.0.0:9410"  # the kubelet's probes reach the pod's address
    # /metrics alone: on loopback kubectl port-forward reaches it, other pods do not
    metrics_address: str = "127.0.0.1:9411"
    log_level: str = "info"
    delete_pods_with_lost_partitions: bool = False
    node_labels: bool = False
    geometry_namespace: str | None = None
    geometry_renew_seconds: float = 10.0
    geometry_lease_seconds: int = 40

    def validate(self) -> Settings:
        if self.policy not in POLICIES:
            raise ConfigError(f"policy: {self.policy!r} is not one of {', '.join(POLICIES)}")
        for name, (low, high) in BOUNDS.items():
            value = getattr(self, name)
            if not math.isfinite(value) or not low <= value <= high:
                raise ConfigError(f"{name}: {value} must be a number from {low:g} to {high:g}")
        for name, optional in (("health_address", False), ("metrics_address", True)):
            value = getattr(self, name)
            if not (optional and value == "") and not _is_host_port(value):
                nothing = " (or empty: not served)" if optional else ""
                raise ConfigError(f"{name}: {value!r} must be HOST:PORT, port 1-65535{nothing}")
        for flag in ("delete_pods_with_lost_partitions", "node_labels"):
            if not isinstance(getattr(self, flag), bool):
                raise ConfigError(f"{flag}: {getattr(self, flag)!r} must be true or false")
        if self.geometry_namespace:
            problem = kube_name_problem(self.geometry_namespace, subdomain=False)
            if problem:
                raise ConfigError(f"geometry_namespace: {self.geometry_namespace!r} {problem}")
        if isinstance(self.geometry_lease_seconds, bool) or not isinstance(
            self.geometry_lease_seconds, int
        ):
            # leaseDurationSeconds is a whole number on the wire
            raise ConfigError(
                f"geometry_lease_seconds: {self.geometry_lease_seconds!r} is not a whole number"
            )
        if not self.geometry_lease_seconds > self.geometry_renew_seconds:
            raise ConfigError(
                f"geometry_lease_seconds: {self.geometry_lease_seconds} must exceed "
                f"geometry_renew_seconds ({self.geometry_renew_seconds:g}), or the lease "
                "expires between renewals"
            )
        if self.log_level.lower() not in ("debug", "info", "warning", "error"):
            raise ConfigError(f"log_level: {self.log_level!r} must be debug/info/warning/error")
        for name in (
            "host_root",
            "answer_root",
            "device_plugin_dir",
            "pod_resources_socket",
            "grants_dir",
            "lock_dir",
        ):
            if not str(getattr(self, name)).startswith("/"):
                raise ConfigError(f"{name}: {getattr(self, name)!r} must be an absolute path")
        return self


KEYS = {f.name: f for f in fields(Settings)}

FILE_HELP = """\
config file (--config, YAML mapping; flags override it; every key is optional):
  host_root             the host's / as the plugin sees it (default /: the DaemonSet mounts
                        every host path at its own path)
  answer_root           prefix of host paths in Allocate answers (default /; only a simulated
                        node, whose container runtime shares the test machine, sets it)
  library_path          libhydmi_mig.so.1 to load (default: search path, /opt/hyhal/lib,
                        /opt/dtk/lib under host_root)
  device_plugin_dir     kubelet device-plugin directory (mount the directory, not a socket)
  pod_resources_socket  kubelet PodResources socket
  grants_dir            partition grants (0700 directory, 0600 files), must survive restarts
  lock_dir              node and per-card lock files
  policy                pack (fullest card that fits) or spread (emptiest card)
  grace_seconds         a grant younger than this is kept while its pod cannot be seen
                        (0 to 3600; default 30)
  resync_seconds        period of the reclaim pass (pod events also trigger one; 0.1 to 3600;
                        default 30)
  node_name             this node's name (default: $NODE_NAME)
  kubeconfig            kubeconfig file (default: in-cluster service account)
  health_address        HOST:PORT of /healthz and /readyz (the kubelet's probes reach the
                        pod's address; default 0.0.0.0:9410)
  metrics_address       HOST:PORT of /metrics (default 127.0.0.1:9411: kubectl port-forward
                        reaches it, other pods do not; 0.0.0.0:PORT for Prometheus; empty:
                        not served)
  log_level             debug, info, warning or error (logs are JSON lines on stderr)
  delete_pods_with_lost_partitions (true/false, default false)
                        true: delete a running pod whose partition is gone (after a power
                        loss, or destroyed by hand) so its controller recreates it; false:
                        only a Warning Event and a metric
  node_labels (true/false, default false)
                        true: keep this node's capability labels (hygon.com/dcu.count,
                        .mig.capable, .mig.mode, .product, .mig-<profile>.count) true, checked
                        every resync_seconds (needs node_name, and nodes get/patch)
  geometry_namespace    namespace of this node's geometry Lease, which the scheduler extender
                        reads (default: $POD_NAMESPACE; empty: no Lease, and the extender
                        cannot place partitions on this node)
  geometry_renew_seconds (1 to 300, default 10)
                        the Lease is rewritten when the geometry changes and at least this
                        often (its renewTime tells the extender the node is current)
  geometry_lease_seconds (a whole number, 2 to 600, default 40)
                        how long the extender trusts the Lease after its last renewal; more
                        than geometry_renew_seconds
"""


def parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "yes", "1"):
        return True
    if lowered in ("false", "no", "0"):
        return False
    raise argparse.ArgumentTypeError(f"{text!r} is not true or false")


def _coerce(name: str, value: Any) -> Any:
    default = getattr(Settings(), name)
    if value is None:
        return None
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise ConfigError(f"{name}: {value!r} must be true or false")
        return value
    if isinstance(default, float):
        try:
            return float(value)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{name}: {value!r} is not a number") from exc
    if isinstance(default, int):
        if not isinstance(value, int) or isinstance(value, bool):
            raise ConfigError(f"{name}: {value!r} is not a whole number")
        return value
    if not isinstance(value, str):
        raise ConfigError(f"{name}: {value!r} must be a string")
    return value


def load_file(path: str) -> dict[str, Any]:
    import yaml  # noqa: PLC0415 (a missing PyYAML is reported by the caller, in one line)

    try:
        with open(path, encoding="utf-8") as handle:
            data = yaml.safe_load(handle)
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {path} is not valid YAML: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must be a mapping of settings")
    unknown = sorted(set(data) - set(KEYS))
    if unknown:
        raise ConfigError(
            f"config file {path}: unknown keys {unknown}; known: {', '.join(sorted(KEYS))}"
        )
    return {k: _coerce(k, v) for k, v in data.items()}


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE", help="YAML config file (keys below)")
    for name in KEYS:
        flag = "--" + name.replace("_", "-")
        default = getattr(Settings(), name)
        kind: Any = str
        if isinstance(default, bool):
            kind = parse_bool
        elif isinstance(default, float):
            kind = float
        elif isinstance(default, int):
            kind = int
        choices = POLICIES if name == "policy" else None
        parser.add_argument(
            flag,
            dest=name,
            type=kind,
            default=None,
            choices=choices,
            help=f"overrides {name} (default {_shown(name, default)})",
        )


def _shown(name: str, default: Any) -> str:
    if name in BOUNDS:
        low, high = BOUNDS[name]
        return f"{default:g}, {low:g} to {high:g}"
    return repr(default)


def settings_from(args: argparse.Namespace) -> Settings:
    values: dict[str, Any] = {}
    if getattr(args, "config", None):
        values.update(load_file(args.config))
    for name in KEYS:
        flag_value = getattr(args, name, None)
        if flag_value is not None:
            values[name] = flag_value
    settings = replace(Settings(), **values)
    if settings.node_name is None and os.environ.get("NODE_NAME"):
        settings = replace(settings, node_name=os.environ["NODE_NAME"])
    # The DaemonSet sets POD_NAMESPACE through the downward API.
    if settings.geometry_namespace is None and os.environ.get("POD_NAMESPACE"):
        settings = replace(settings, geometry_namespace=os.environ["POD_NAMESPACE"])
    return settings.validate()
