"""Settings: defaults, then the config file (YAML), then command-line flags."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, fields, replace
from typing import Any

import yaml

from .placement import POLICIES


class ConfigError(Exception):
    """The configuration cannot be used; the message names the key and the fix."""


@dataclass(frozen=True)
class Settings:
    host_root: str = "/"
    answer_root: str = "/"
    library_path: str | None = None
    device_plugin_dir: str = "/var/lib/kubelet/device-plugins"
    pod_resources_socket: str = "/var/lib/kubelet/pod-resources/kubelet.sock"
    records_dir: str = "/var/lib/hygon-dcu/records"
    lock_dir: str = "/var/lib/hygon-dcu/locks"
    policy: str = "pack"
    grace_seconds: float = 30.0
    resync_seconds: float = 30.0
    node_name: str | None = None
    kubeconfig: str | None = None
    health_address: str = "0.0.0.0:9410"  # kubelet probes and Prometheus must reach it
    log_level: str = "info"

    def validate(self) -> Settings:
        if self.policy not in POLICIES:
            raise ConfigError(f"policy: {self.policy!r} is not one of {', '.join(POLICIES)}")
        if self.grace_seconds < 0:
            raise ConfigError(f"grace_seconds: {self.grace_seconds} must be >= 0")
        if self.resync_seconds <= 0:
            raise ConfigError(f"resync_seconds: {self.resync_seconds} must be > 0")
        host, _ignored, port = self.health_address.rpartition(":")
        if not port.isdigit() or not host:
            raise ConfigError(f"health_address: {self.health_address!r} must be HOST:PORT")
        if self.log_level.lower() not in ("debug", "info", "warning", "error"):
            raise ConfigError(f"log_level: {self.log_level!r} must be debug/info/warning/error")
        for name in (
            "host_root",
            "answer_root",
            "device_plugin_dir",
            "pod_resources_socket",
            "records_dir",
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
  records_dir           ownership records (0700 directory, 0600 files), must survive restarts
  lock_dir              node and per-card lock files
  policy                pack (fullest card that fits) or spread (emptiest card)
  grace_seconds         a record younger than this is kept unless its pod is confirmed gone
  resync_seconds        period of the reclaim pass (pod events also trigger one)
  node_name             this node's name (default: $NODE_NAME)
  kubeconfig            kubeconfig file (default: in-cluster service account)
  health_address        HOST:PORT of /healthz, /readyz and /metrics
  log_level             debug, info, warning or error (logs are JSON lines on stderr)
"""


def _coerce(name: str, value: Any) -> Any:
    default = getattr(Settings(), name)
    if value is None:
        return None
    if isinstance(default, float):
        try:
            return float(value)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{name}: {value!r} is not a number") from exc
    if not isinstance(value, str):
        raise ConfigError(f"{name}: {value!r} must be a string")
    return value


def load_file(path: str) -> dict[str, Any]:
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
        kind = float if isinstance(getattr(Settings(), name), float) else str
        choices = POLICIES if name == "policy" else None
        parser.add_argument(
            flag,
            dest=name,
            type=kind,
            default=None,
            choices=choices,
            help=f"overrides {name} (default {getattr(Settings(), name)!r})",
        )


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
    return settings.validate()
