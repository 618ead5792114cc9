"""The simulated Hygon node: create, reboot, inspect and fault a node under a root directory.

Importable by tests as ``simnode`` (``tests/simulator`` is on the pytest path) and run as the
``tests/simulator/simnode`` script. The driver state lives in ``ROOT/.sim/`` and is shared with
the C libraries (``build/libhydmi_mig.so.1``, the virtual-device ``build/libhydmi.so``),
``hy-smi`` and ``dcu-probe`` under one ``flock``.

Models: ``c3000-bw`` is the measured C-3000 "BW" card (docs/dev/hardware.md). ``hypo-x8`` is
HYPOTHETICAL: invented so nothing downstream can hard-code the BW table.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
BUILD_DIR = HERE / "build"
LIB_PATH = BUILD_DIR / "libhydmi_mig.so.1"
DMI_LIB_PATH = BUILD_DIR / "libhydmi.so"
HY_SMI_PATH = BUILD_DIR / "hy-smi"
PROBE_PATH = BUILD_DIR / "dcu-probe"
MINIRUN_PATH = HERE / "minirun"
SIMNODE_PATH = HERE / "simnode"

ROOT_ENV = "HYDMI_SIM_ROOT"
FAULT_OPS = ("gi_create", "ci_create", "gi_destroy", "ci_destroy", "set_mode")
# libhydmi.so (virtual devices). vdev_create_crash writes the conf files, then fails before the
# driver records the vdevs: a stray conf is left behind.
VDEV_FAULT_OPS = ("vdev_create", "vdev_create_crash", "vdev_destroy", "vdev_update")
# Default codes: NVML UNKNOWN for the MIG library; dmiStatus CREATE_VDEV_FAILED (8),
# DESTROY_VDEV_FAILED (9) and ERROR (1) for the vdev library.
DEFAULT_FAULT_CODES = {
    **dict.fromkeys(FAULT_OPS, 999),
    "vdev_create": 8,
    "vdev_create_crash": 8,
    "vdev_destroy": 9,
    "vdev_update": 1,
}
VDEVS_PER_CARD = 4
# Real character devices are made with the numbers of /dev/null so they can be opened.
NULL_MAJOR, NULL_MINOR = 1, 3
DRM_MAJOR = 226


@dataclass(frozen=True)
class ProfileSpec:
    id: int
    name: str
    slices: int
    cu_count: int
    memory_mib: int
    gi_count_max: int
    starts: tuple[int, ...]


@dataclass(frozen=True)
class Model:
    name: str
    hypothetical: bool
    slices: int
    cu_count: int
    memory_mib: int
    arch: str
    pci_vendor: str
    gi_id_base: int
    pci_addresses: tuple[str, ...]
    profiles: tuple[ProfileSpec, ...]


MODELS: dict[str, Model] = {
    # Measured (docs/dev/hardware.md, "Measured card: C-3000 BW"). First GI id 3 reproduces
    # the measured ids 3,4,5,6 for four 1-slice instances; ids are lowest-free, so a freed id
    # returns at once.
    "c3000-bw": Model(
        name="c3000-bw",
        hypothetical=False,
        slices=4,
        cu_count=80,
        memory_mib=65520,
        arch="gfx936",
        pci_vendor="1d94",
        gi_id_base=3,
        pci_addresses=(
            "0000:09:00.0",
            "0000:0c:00.0",
            "0000:49:00.0",
            "0000:4c:00.0",
            "0000:89:00.0",
            "0000:8c:00.0",
            "0000:c9:00.0",
            "0000:cc:00.0",
        ),
        profiles=(
            ProfileSpec(3, "2g.15gb", 1, 20, 16380, 4, (0, 1, 2, 3)),
            ProfileSpec(1, "4g.31gb", 2, 40, 32760, 2, (0, 2)),
            ProfileSpec(0, "8g.63gb", 4, 80, 65520, 1, (0,)),
        ),
    ),
    # HYPOTHETICAL, not a real card: 8 slices, a 3-slice profile (BW has none) and a gap at
    # widths 5..7 instead; other ids, names, CUs, memory, first GI id and PCI addresses.
    "hypo-x8": Model(
        name="hypo-x8",
        hypothetical=True,
        slices=8,
        cu_count=112,
        memory_mib=130944,
        arch="gfx9xx-hypothetical",
        pci_vendor="1d94",
        gi_id_base=1,
        pci_addresses=(
            "0000:1a:00.0",
            "0000:3d:00.0",
            "0000:5e:00.0",
            "0000:7f:00.0",
            "0000:a1:00.0",
            "0000:b2:00.0",
            "0000:d4:00.0",
            "0000:e5:00.0",
        ),
        profiles=(
            ProfileSpec(19, "1g.16gb", 1, 14, 16368, 8, (0, 1, 2, 3, 4, 5, 6, 7)),
            ProfileSpec(14, "2g.32gb", 2, 28, 32736, 4, (0, 2, 4, 6)),
            ProfileSpec(9, "3g.48gb", 3, 42, 49104, 2, (0, 4)),
            ProfileSpec(5, "4g.64gb", 4, 56, 65472, 2, (0, 4)),
            ProfileSpec(0, "8g.128gb", 8, 112, 130944, 1, (0,)),
        ),
    ),
}


class SimNodeError(Exception):
    """A simnode request that cannot be carried out (bad root, unknown model, ...)."""


def is_root() -> bool:
    return os.geteuid() == 0


def build(make: str = "make") -> Path:
    """Build the simulator (library, hy-smi, dcu-probe); returns the build directory."""
    result = subprocess.run(
        [make, "-s", "-C", str(HERE)], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise SimNodeError(f"make -C {HERE} failed:\n{result.stdout}{result.stderr}")
    return BUILD_DIR


@dataclass(frozen=True)
class GpuInstanceState:
    card: int
    id: int
    profile_id: int
    start: int
    size: int


@dataclass(frozen=True)
class ComputeInstanceState:
    card: int
    gpu_instance_id: int
    id: int
    profile_id: int
    uuid: str


@dataclass(frozen=True)
class VDevState:
    id: int
    card: int
    cu_count: int
    mem_mib: int
    pipe_id: int
    cu_mask: tuple[int, int]  # low word, high word


@dataclass
class Status:
    model: str
    hypothetical: bool
    cards: list[str]
    virtualization: bool
    mode: int
    gpu_instances: list[GpuInstanceState] = field(default_factory=list)
    compute_instances: list[ComputeInstanceState] = field(default_factory=list)
    faults: list[str] = field(default_factory=list)
    vdevs: list[VDevState] = field(default_factory=list)


@dataclass(frozen=True)
class SimNode:
    """A simulated node rooted at ``root``. Paths are host paths under the root."""

    root: Path
    model: Model
    cards: int
    virtualization: bool

    # --- paths -------------------------------------------------------------------------
    @property
    def sim_dir(self) -> Path:
        return self.root / ".sim"

    @property
    def registry_dir(self) -> Path:
        return self.root / "etc" / "dmi_mig_config"

    @property
    def ci_dir(self) -> Path:
        return self.registry_dir / "ci"

    @property
    def gi_dir(self) -> Path:
        return self.registry_dir / "gi"

    @property
    def kfd(self) -> Path:
        return self.root / "dev" / "kfd"

    @property
    def mkfd(self) -> Path:
        return self.root / "dev" / "mkfd"

    @property
    def vdev_dir(self) -> Path:
        """The driver's virtual-device conf files (``vdev<N>.conf``)."""
        return self.root / "etc" / "vdev"

    def vdev_conf(self, vdev_id: int) -> Path:
        return self.vdev_dir / f"vdev{vdev_id}.conf"

    @property
    def ops_log(self) -> Path:
        return self.sim_dir / "ops.log"

    def pci(self, card: int) -> str:
        return self.model.pci_addresses[card]

    def card_node(self, card: int) -> Path:
        return self.root / "dev" / "dri" / f"card{card}"

    def render_node(self, card: int) -> Path:
        return self.root / "dev" / "dri" / f"renderD{128 + card}"

    def ci_conf(self, card: int, gpu_instance_id: int, compute_instance_id: int = 0) -> Path:
        return self.ci_dir / f"dev{card}gi{gpu_instance_id}ci{compute_instance_id}.conf"

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """An environment (default: a copy of os.environ) that serves this node."""
        out = dict(os.environ if base is None else base)
        out[ROOT_ENV] = str(self.root)
        return out

    def switch_mode(self, on: bool = True) -> None:
        """Switch the mode with this node's ``hy-smi -mig``, as the product's mig_mode does."""
        result = subprocess.run(
            [str(HY_SMI_PATH), "-mig", "1" if on else "0"],
            env=self.env(),
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        if result.returncode != 0:
            raise SimNodeError(f"hy-smi -mig failed: {result.stdout}{result.stderr}")

    # --- state -------------------------------------------------------------------------
    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the node lock the library uses (exclusive)."""
        with open(self.sim_dir / "lock", "a+") as handle:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    def ops(self) -> list[str]:
        """Every GI/CI/vdev create/destroy (and vdev update) so far, in order
        (``destroy_ci card=0 gi=3 ci=0``, ``create_vdev card=0 vdev=2 cus=20 mem_mib=16384``...)."""
        try:
            text = self.ops_log.read_text()
        except FileNotFoundError:
            return []
        return [line for line in text.splitlines() if line]

    def status(self) -> Status:
        with self.locked():
            mode_text = _read(self.sim_dir / "mode").strip() or "0"
            inst = _read(self.sim_dir / "instances")
            vdevs = _read(self.sim_dir / "vdevs")
            faults = [ln for ln in _read(self.sim_dir / "faults").splitlines() if ln]
        status = Status(
            model=self.model.name,
            hypothetical=self.model.hypothetical,
            cards=[self.pci(i) for i in range(self.cards)],
            virtualization=self.virtualization,
            mode=int(mode_text),
            faults=faults,
        )
        if (self.sim_dir / "hysmi_fault").exists():
            status.faults.append("hysmi-output")
        for line in inst.splitlines():
            parts = line.split()
            if parts and parts[0] == "gi":
                card, gid, pid, start, size = (int(x) for x in parts[1:6])
                status.gpu_instances.append(GpuInstanceState(card, gid, pid, start, size))
            elif parts and parts[0] == "ci":
                card, gid, cid, pid = (int(x) for x in parts[1:5])
                status.compute_instances.append(ComputeInstanceState(card, gid, cid, pid, parts[6]))
        status.vdevs = _parse_vdevs(vdevs)
        return status

    def reboot(self) -> None:
        """Instances and the whole registry directory vanish; the mode is kept, and with the
        mode on the driver recreates the registry as it comes up: ``dev<N>``, ``gi/``, ``ci/``
        and no instance entries. Virtual devices vanish too, and the conf files of the vdevs
        that were live are removed (other files under ``etc/vdev`` stay)."""
        with self.locked():
            for vdev in _parse_vdevs(_read(self.sim_dir / "vdevs")):
                with contextlib.suppress(FileNotFoundError):
                    self.vdev_conf(vdev.id).unlink()
            for name in ("instances", "vdevs"):
                with contextlib.suppress(FileNotFoundError):
                    (self.sim_dir / name).unlink()
            shutil.rmtree(self.registry_dir, ignore_errors=True)
            if (_read(self.sim_dir / "mode").strip() or "0") == "1":
                self._create_registry()

    def _create_registry(self) -> None:
        """The registry as the driver writes it when the mode comes up (caller holds the lock)."""
        for sub in (self.gi_dir, self.ci_dir):
            sub.mkdir(parents=True, exist_ok=True)
        for card in range(self.cards):
            _write_atomic(self.registry_dir / f"dev{card}", self.pci(card) + "\n")

    # --- faults ------------------------------------------------------------------------
    def _append_fault(self, line: str) -> None:
        with self.locked():
            path = self.sim_dir / "faults"
            _write_atomic(path, _read(path) + line + "\n")

    def fail_next(self, op: str, count: int = 1, code: int | None = None) -> None:
        """The next ``count`` library calls of ``op`` fail with ``code`` (default: 999 for the
        MIG library's ops, see ``DEFAULT_FAULT_CODES`` for the vdev ones)."""
        if op not in DEFAULT_FAULT_CODES:
            raise SimNodeError(
                f"unknown fault op {op!r}; choose one of {', '.join(DEFAULT_FAULT_CODES)}"
            )
        if count < 1:
            raise SimNodeError("count must be at least 1")
        if code is None:
            code = DEFAULT_FAULT_CODES[op]
        self._append_fault(f"fail {op} {count} {code}")

    def make_unreachable(self, card: int, code: int = 999) -> None:
        """Card ``card`` is not found by PCI address and every query on it fails with ``code``."""
        if not 0 <= card < self.cards:
            raise SimNodeError(f"card {card} does not exist (node has {self.cards})")
        self._append_fault(f"unreachable {card} {code}")

    def driver_error(self, code: int) -> None:
        """Every library call answers ``code`` (e.g. 9 DRIVER_NOT_LOADED)."""
        self._append_fault(f"driver {code}")

    def hysmi_output(self, text: str, exit_code: int = 0, apply: bool = False) -> None:
        """``hy-smi -mig`` prints ``text`` and exits ``exit_code``; the switch happens only when
        ``apply`` is true."""
        body = f"{exit_code} {1 if apply else 0}\n{text}"
        if text and not text.endswith("\n"):
            body += "\n"
        with self.locked():
            _write_atomic(self.sim_dir / "hysmi_fault", body)

    def create_vdevs(self, card: int, cus: str, mem: str) -> subprocess.CompletedProcess[str]:
        """``hy-smi virtual -create-vdevices`` on ``card``, as an operator would run it: one vdev
        per comma-separated compute-unit count in ``cus`` and MiB size in ``mem``."""
        return subprocess.run(
            [
                str(HY_SMI_PATH),
                "virtual",
                "-create-vdevices",
                str(len(cus.split(","))),
                "-d",
                str(card),
                "-vdevice-compute-units",
                cus,
                "-vdevice-memory-size",
                mem,
            ],
            env=self.env(),
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )

    def clear_faults(self) -> None:
        with self.locked():
            for name in ("faults", "hysmi_fault"):
                with contextlib.suppress(FileNotFoundError):
                    (self.sim_dir / name).unlink()


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        return ""


def _parse_vdevs(text: str) -> list[VDevState]:
    """``ROOT/.sim/vdevs``: ``vdev <id> <card> <cus> <mem_mib> <pipe> <mask lo> <mask hi>``."""
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 8 and parts[0] == "vdev":
            vid, card, cus, mem, pipe = (int(x) for x in parts[1:6])
            out.append(VDevState(vid, card, cus, mem, pipe, (int(parts[6], 16), int(parts[7], 16))))
    return sorted(out, key=lambda v: v.id)


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _node_conf(model: Model, cards: int, virtualization: bool) -> str:
    lines = [
        f"# simulated node; model {model.name}" + (" (HYPOTHETICAL)" if model.hypothetical else ""),
        f"model {model.name}",
        f"slices {model.slices}",
        f"cu_count {model.cu_count}",
        f"memory_mib {model.memory_mib}",
        f"virtualization {1 if virtualization else 0}",
        f"gi_id_base {model.gi_id_base}",
    ]
    for i in range(cards):
        lines.append(f"card {i} {model.pci_addresses[i]} {i} {128 + i}")
    for p in model.profiles:
        starts = ",".join(str(s) for s in p.starts)
        lines.append(
            f"profile {p.id} {p.slices} {p.cu_count} {p.memory_mib} {p.gi_count_max} "
            f"{p.name} {starts}"
        )
    return "\n".join(lines) + "\n"


def _device_file(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if is_root():
        # A container runtime refuses plain files as devices: make real, openable ones.
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(NULL_MAJOR, NULL_MINOR))
        os.chmod(path, 0o666)  # noqa: S103 -- like the vendor's nodes; umask would narrow it
    else:
        path.write_text("")


def _sysfs(root: Path, model: Model, card: int) -> None:
    pci = model.pci_addresses[card]
    device_dir = root / "sys" / "devices" / "pci0000:00" / pci
    (device_dir / "drm").mkdir(parents=True, exist_ok=True)
    (device_dir / "vendor").write_text(f"0x{model.pci_vendor}\n")
    for name, minor in ((f"card{card}", card), (f"renderD{128 + card}", 128 + card)):
        minor_dir = device_dir / "drm" / name
        minor_dir.mkdir(exist_ok=True)
        (minor_dir / "dev").write_text(f"{DRM_MAJOR}:{minor}\n")
        class_dir = root / "sys" / "class" / "drm"
        class_dir.mkdir(parents=True, exist_ok=True)
        (class_dir / name).symlink_to(Path("../../devices/pci0000:00") / pci / "drm" / name)
    bus_dir = root / "sys" / "bus" / "pci" / "devices"
    bus_dir.mkdir(parents=True, exist_ok=True)
    (bus_dir / pci).symlink_to(Path("../../../devices/pci0000:00") / pci)


def init(
    root: str | os.PathLike[str],
    model: str = "c3000-bw",
    cards: int = 2,
    virtualization: bool = True,
) -> SimNode:
    """Create a node as a fresh driver install leaves it: mode off, nothing carved."""
    if model not in MODELS:
        raise SimNodeError(f"unknown model {model!r}; choose one of {', '.join(MODELS)}")
    spec = MODELS[model]
    if not 1 <= cards <= len(spec.pci_addresses):
        raise SimNodeError(f"--cards must be 1..{len(spec.pci_addresses)} for {model}")
    base = Path(root).resolve()
    if (base / ".sim").exists():
        raise SimNodeError(f"{base} already holds a simulated node; use a fresh directory")
    base.mkdir(parents=True, exist_ok=True)
    sim = base / ".sim"
    sim.mkdir()
    (sim / "lock").write_text("")
    (sim / "mode").write_text("0\n")
    (sim / "ops.log").write_text("")
    _device_file(base / "dev" / "kfd")
    _device_file(base / "dev" / "mkfd")
    for i in range(cards):
        _device_file(base / "dev" / "dri" / f"card{i}")
        _device_file(base / "dev" / "dri" / f"renderD{128 + i}")
        _sysfs(base, spec, i)
    hyhal = base / "opt" / "hyhal"
    (hyhal / "lib").mkdir(parents=True)
    (hyhal / "bin").mkdir()
    # The virtual-device library; the container runtime also needs this name to exist
    # (docs/dev/hardware.md).
    (hyhal / "lib" / "libhydmi.so").symlink_to(DMI_LIB_PATH)
    (hyhal / "lib" / "libhydmi_mig.so.1").symlink_to(LIB_PATH)
    (hyhal / "lib" / "libhydmi_mig.so").symlink_to("libhydmi_mig.so.1")
    (hyhal / "bin" / "hy-smi").symlink_to(HY_SMI_PATH)
    (base / "opt" / "dtk" / "lib").mkdir(parents=True)
    # node.conf last: its presence is what makes the "driver" loaded.
    _write_atomic(sim / "node.conf", _node_conf(spec, cards, virtualization))
    return SimNode(root=base, model=spec, cards=cards, virtualization=virtualization)


def open_node(root: str | os.PathLike[str]) -> SimNode:
    """A handle on an existing node (reads ROOT/.sim/node.conf)."""
    base = Path(root).resolve()
    conf = base / ".sim" / "node.conf"
    if not conf.is_file():
        raise SimNodeError(f"{base} is not a simulated node (no .sim/node.conf); run simnode init")
    model_name, cards, virt = "", 0, True
    for line in conf.read_text().splitlines():
        parts = line.split()
        if not parts:
            continue
        if parts[0] == "model":
            model_name = parts[1]
        elif parts[0] == "card":
            cards += 1
        elif parts[0] == "virtualization":
            virt = parts[1] == "1"
    if model_name not in MODELS:
        raise SimNodeError(f"{conf}: unknown model {model_name!r}")
    return SimNode(root=base, model=MODELS[model_name], cards=cards, virtualization=virt)


# --- command line ----------------------------------------------------------------------------
def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="simnode", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p_init = sub.add_parser("init", help="create a node (mode off, nothing carved)")
    p_init.add_argument("root")
    p_init.add_argument("--model", default="c3000-bw", choices=sorted(MODELS))
    p_init.add_argument("--cards", type=int, default=2)
    p_init.add_argument(
        "--no-virtualization",
        action="store_true",
        help="driver installed without virtualization: no profiles",
    )
    p_reboot = sub.add_parser(
        "reboot",
        help="instances and vdevs vanish, mode kept; mode on: the registry is recreated empty",
    )
    p_reboot.add_argument("root")
    p_status = sub.add_parser("status", help="print the node's state")
    p_status.add_argument("root")
    p_fault = sub.add_parser("fault", help="inject a fault (see README.md)")
    p_fault.add_argument("root")
    kinds = p_fault.add_subparsers(dest="kind", required=True)
    k_fail = kinds.add_parser("fail", help="fail the next COUNT calls of OP")
    k_fail.add_argument("op", choices=list(DEFAULT_FAULT_CODES))
    k_fail.add_argument("count", type=int)
    k_fail.add_argument("--code", type=int, default=None, help="default: depends on OP")
    k_unreach = kinds.add_parser("unreachable", help="card K unreachable by PCI, queries fail")
    k_unreach.add_argument("card", type=int)
    k_unreach.add_argument("--code", type=int, default=999)
    k_driver = kinds.add_parser("driver", help="every library call answers CODE")
    k_driver.add_argument("code", type=int)
    k_hysmi = kinds.add_parser("hysmi-output", help="hy-smi -mig prints TEXT, exits --exit")
    k_hysmi.add_argument("text")
    k_hysmi.add_argument("--exit", type=int, default=0, dest="exit_code")
    k_hysmi.add_argument(
        "--apply", action="store_true", help="still perform the switch behind the odd output"
    )
    kinds.add_parser("clear", help="remove every injected fault")
    p_hold = sub.add_parser("hold", help="hold PATH open until stdin closes or a signal")
    p_hold.add_argument("path")
    return parser


def hold(path: str) -> int:
    """Hold ``path`` open (a real holder for /proc scans) until stdin closes."""
    fd = os.open(path, os.O_RDONLY)
    try:
        print(f"holding {path} pid {os.getpid()}", flush=True)
        while sys.stdin.buffer.read(4096):
            pass
    finally:
        os.close(fd)
    return 0


def _print_status(status: Status) -> None:
    tag = " (HYPOTHETICAL)" if status.hypothetical else ""
    print(f"model: {status.model}{tag}")
    print(f"virtualization: {'yes' if status.virtualization else 'no'}")
    print(f"mode: {'enabled' if status.mode else 'disabled'}")
    for i, pci in enumerate(status.cards):
        print(f"card {i}: {pci}")
    for gi in status.gpu_instances:
        print(
            f"gpu_instance card={gi.card} id={gi.id} profile={gi.profile_id} "
            f"placement={gi.start}:{gi.size}"
        )
    for ci in status.compute_instances:
        print(
            f"compute_instance card={ci.card} gi={ci.gpu_instance_id} id={ci.id} "
            f"profile={ci.profile_id} uuid={ci.uuid}"
        )
    for v in status.vdevs:
        print(
            f"vdev id={v.id} card={v.card} cus={v.cu_count} mem_mib={v.mem_mib} "
            f"pipe={v.pipe_id} cu_mask=0x{v.cu_mask[0]:016x},0x{v.cu_mask[1]:016x}"
        )
    for fault in status.faults:
        print(f"fault: {fault}")


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "init":
            node = init(
                args.root,
                model=args.model,
                cards=args.cards,
                virtualization=not args.no_virtualization,
            )
            print(f"initialised {node.root} ({node.model.name}, {node.cards} cards)")
        elif args.command == "reboot":
            open_node(args.root).reboot()
        elif args.command == "hold":
            return hold(args.path)
        elif args.command == "status":
            _print_status(open_node(args.root).status())
        elif args.command == "fault":
            node = open_node(args.root)
            if args.kind == "fail":
                node.fail_next(args.op, args.count, args.code)
            elif args.kind == "unreachable":
                node.make_unreachable(args.card, args.code)
            elif args.kind == "driver":
                node.driver_error(args.code)
            elif args.kind == "hysmi-output":
                node.hysmi_output(args.text, args.exit_code, args.apply)
            else:
                node.clear_faults()
    except (SimNodeError, OSError) as exc:
        print(f"simnode: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
