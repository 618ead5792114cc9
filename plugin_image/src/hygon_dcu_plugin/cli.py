"""`hygon-dcu-plugin serve` (the device plugin), `hygon-dcu-plugin webhook` (admission) and
`hygon-dcu-plugin extender` (the scheduler extender)."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from types import FrameType

from hygon_dcu_plugin import __version__
from hygon_dcu_plugin.config import FILE_HELP, ConfigError, add_flags, settings_from

log = logging.getLogger("hygon_dcu_plugin")

# Test hook: SIGKILL ourselves at the named step of create/destroy (node layer checkpoints
# "gpu_instance_created", "compute_instance_created", "compute_instance_destroyed"; ours
# "grant_written", "annotated", "instance_destroyed"). Used by the crash-safety tests only.
KILL_AT_ENV = "HYGON_DCU_PLUGIN_TEST_KILL_AT"


def kill_at(step_wanted: str) -> Callable[[str], None]:
    def checkpoint(step: str) -> None:
        if step == step_wanted:
            os.kill(os.getpid(), signal.SIGKILL)

    return checkpoint


def _fail(message: str) -> int:
    print(f"hygon-dcu-plugin: {message}", file=sys.stderr)
    return 2


def _serve(args: argparse.Namespace) -> int:
    from hygon_dcu_plugin.collection import ensure_collection, missing_packages  # noqa: PLC0415

    problem = missing_packages() or ensure_collection()
    if problem:
        return _fail(problem)
    from ansible_collections.hygon.dcu.plugins.module_utils.node import Node  # noqa: PLC0415

    from hygon_dcu_plugin import logs  # noqa: PLC0415
    from hygon_dcu_plugin.deviceplugin.health import HealthServer, MetricsServer  # noqa: PLC0415
    from hygon_dcu_plugin.deviceplugin.podresources import PodResourcesClient  # noqa: PLC0415
    from hygon_dcu_plugin.deviceplugin.runtime import Runtime  # noqa: PLC0415
    from hygon_dcu_plugin.kube import KubernetesApi  # noqa: PLC0415

    try:
        settings = settings_from(args)
    except ConfigError as exc:
        print(f"hygon-dcu-plugin: configuration error: {exc}", file=sys.stderr)
        return 2
    logs.setup(settings.log_level)
    if not os.path.isdir(settings.device_plugin_dir):
        return _fail(
            f"device_plugin_dir {settings.device_plugin_dir} is not a directory: mount the "
            "kubelet's device-plugin directory there (the directory, not a socket) or pass "
            "--device-plugin-dir"
        )
    try:
        kube = KubernetesApi(settings.kubeconfig, node_name=settings.node_name)
    except Exception as exc:
        where = settings.kubeconfig or "the in-cluster service account"
        print(
            f"hygon-dcu-plugin: cannot set up Kubernetes API access from {where}: {exc}; "
            "run it in a pod with a service account or pass --kubeconfig",
            file=sys.stderr,
        )
        return 2
    started: list[Runtime] = []  # the listeners bind first: a taken port stops us early
    try:
        health = HealthServer(
            settings.health_address,
            lambda: bool(started) and started[0].alive(),
            lambda: bool(started) and started[0].registered and started[0].alive(),
        )
    except OSError as exc:
        return _fail(
            f"cannot listen on health_address {settings.health_address}: "
            f"{exc.strerror or exc}; pick a free port with --health-address (or stop what "
            "holds it)"
        )
    metrics = None
    if settings.metrics_address:  # empty: no /metrics at all
        try:
            metrics = MetricsServer(
                settings.metrics_address,
                lambda: started[0].metrics.render() if started else "",
            )
        except OSError as exc:
            health.stop()
            return _fail(
                f"cannot listen on metrics_address {settings.metrics_address}: "
                f"{exc.strerror or exc}; pick a free port with --metrics-address (or stop what "
                "holds it)"
            )
    kill_step = os.environ.get(KILL_AT_ENV)
    runtime = Runtime(
        settings,
        Node(settings.host_root, settings.library_path),
        kube,
        PodResourcesClient(settings.pod_resources_socket),
        checkpoint=kill_at(kill_step) if kill_step else None,
    )
    started.append(runtime)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        log.info("stopping", extra={"signal": signum})
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    health.start()
    if metrics is not None:
        metrics.start()
    runtime.start()
    log.info(
        "serving",
        extra={
            "resources": runtime.resources,
            "version": __version__,
            "health": settings.health_address,
            "metrics": settings.metrics_address or None,
        },
    )
    # Wake up now and then: Linux may deliver SIGTERM to one of gRPC's threads, and Python runs
    # the handler only when the main thread next executes bytecode. An untimed wait could then
    # sleep through the signal, and the mig_node role waits for this pod to be gone.
    while not stop.wait(0.5):
        pass
    runtime.stop()
    if metrics is not None:
        metrics.stop()
    health.stop()
    return 0


def _webhook(argv: list[str]) -> int:
    # Imported here, as serve imports its own: neither program loads the other.
    from hygon_dcu_plugin.webhook import server  # noqa: PLC0415

    return int(server.main(argv))


def _extender(argv: list[str]) -> int:
    # Imported here too: the extender loads neither the device plugin nor the webhook's main.
    from hygon_dcu_plugin.extender import main  # noqa: PLC0415

    return int(main.main(argv))


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="hygon-dcu-plugin",
        description="Hygon DCU partitioning runtime for Kubernetes.",
    )
    top.add_argument("--version", action="version", version=__version__)
    sub = top.add_subparsers(dest="command", required=True, metavar="{serve,webhook,extender}")
    serve = sub.add_parser(
        "serve",
        help="run the device plugin on this node",
        description="Advertise the node's partitions to the kubelet, carve one per container "
        "in Allocate, reclaim them when pods end. Flags override the config file.",
        epilog=FILE_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_flags(serve)
    sub.add_parser(
        "webhook", help="run the admission webhook (its own flags follow)", add_help=False
    )
    sub.add_parser(
        "extender", help="run the scheduler extender (its own flags follow)", add_help=False
    )
    return top


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:1] == ["webhook"]:
        return _webhook(args_list[1:])
    if args_list[:1] == ["extender"]:
        return _extender(args_list[1:])
    args = parser().parse_args(args_list)
    if args.command == "serve":
        return _serve(args)
    return 2
