"""dcu-probe: what a workload sees. Root tests run it through minirun exactly as a container
runtime would apply an Allocate response; the others use the HYDMI_PROBE_VIEW override."""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import simnode

NONE = "No HIP GPUs are available\n"
needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="minirun needs root (mount namespace, chroot, mknod)"
)
LINE = re.compile(
    r"^device (\d+) kind=(card|partition) pci=(\S+) cu_count=(\d+) "
    r"memory_mib=(\d+)(?: mig_uuid=(\S+) gpu_instance_id=(\d+) "
    r"compute_instance_id=(\d+))?$"
)


def hy_smi(node: simnode.SimNode, *args: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [str(simnode.HY_SMI_PATH), *args],
        capture_output=True,
        text=True,
        env=node.env(),
        check=False,
        timeout=60,
    )
    return result


def carve(node: simnode.SimNode, profile: str, card: int) -> tuple[Path, str]:
    """Create one instance with hy-smi; returns its conf path and uuid."""
    before = set(node.ci_dir.iterdir()) if node.ci_dir.exists() else set()
    result = hy_smi(node, "mig", "-cgi", profile, "-C", "-i", str(card))
    assert result.returncode == 0, result.stdout
    (conf,) = set(node.ci_dir.iterdir()) - before
    uuid = conf.read_text().splitlines()[-1].split(":", 1)[1].strip()
    return conf, uuid


def devices(stdout: str) -> list[tuple[str | None, ...]]:
    out: list[tuple[str | None, ...]] = []
    for line in stdout.splitlines():
        match = LINE.match(line)
        assert match, f"unparseable probe line {line!r}"
        out.append(match.groups())
    return out


# ------------------------------------------------------------------ view override (any user) -
def probe_view(
    node: simnode.SimNode, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    full = node.env({"PATH": os.environ.get("PATH", "")})
    full["HYDMI_PROBE_VIEW"] = str(node.root)
    full.update(env or {})
    return subprocess.run(
        [str(simnode.PROBE_PATH)], capture_output=True, text=True, env=full, check=False, timeout=60
    )


def test_mode_off_shows_every_card_with_device_nodes(sim_node: simnode.SimNode) -> None:
    result = probe_view(sim_node)
    assert result.returncode == 0
    assert devices(result.stdout) == [
        ("0", "card", "0000:09:00.0", "80", "65520", None, None, None),
        ("1", "card", "0000:0c:00.0", "80", "65520", None, None, None),
    ]
    sim_node.render_node(0).unlink()
    assert [d[2] for d in devices(probe_view(sim_node).stdout)] == ["0000:0c:00.0"]


def test_mode_on_nothing_carved_shows_nothing(sim_node: simnode.SimNode) -> None:
    assert hy_smi(sim_node, "-mig", "1").returncode == 0
    result = probe_view(sim_node, {"DMI_MIG_VISIBLE_DEVICE": "all"})
    assert (result.returncode, result.stdout) == (1, NONE)


def test_mode_on_shows_exactly_the_named_partition(sim_node: simnode.SimNode) -> None:
    assert hy_smi(sim_node, "-mig", "1").returncode == 0
    carve(sim_node, "4g.31gb", 0)
    _ignored, uuid = carve(sim_node, "2g.15gb", 1)
    result = probe_view(sim_node, {"DMI_MIG_VISIBLE_DEVICE": f"MIG-{uuid}"})
    assert devices(result.stdout) == [
        ("0", "partition", "0000:0c:00.0", "20", "16380", uuid, "3", "0")
    ]
    bare = probe_view(sim_node, {"DMI_MIG_VISIBLE_DEVICE": uuid})
    assert bare.stdout == NONE
    unset = probe_view(sim_node)
    assert unset.stdout == NONE


def test_at_most_one_partition_whatever_is_given(sim_node: simnode.SimNode) -> None:
    assert hy_smi(sim_node, "-mig", "1").returncode == 0
    _ignored, a = carve(sim_node, "2g.15gb", 0)
    _ignored, b = carve(sim_node, "2g.15gb", 0)
    for value in (f"MIG-{a},MIG-{b}", "all"):
        shown = devices(probe_view(sim_node, {"DMI_MIG_VISIBLE_DEVICE": value}).stdout)
        assert len(shown) == 1 and shown[0][5] in (a, b)


def test_modified_conf_file_does_not_activate(sim_node: simnode.SimNode) -> None:
    assert hy_smi(sim_node, "-mig", "1").returncode == 0
    conf, uuid = carve(sim_node, "2g.15gb", 0)
    conf.write_text(conf.read_text() + "\n")
    assert probe_view(sim_node, {"DMI_MIG_VISIBLE_DEVICE": f"MIG-{uuid}"}).stdout == NONE


def test_missing_hyhal_library_is_reported(sim_node: simnode.SimNode) -> None:
    (sim_node.root / "opt" / "hyhal" / "lib" / "libhydmi.so").unlink()
    result = probe_view(sim_node)
    assert result.stdout == "open hydmilib:libhydmi.so error\n" + NONE


def test_per_tree_view_overrides(sim_node: simnode.SimNode) -> None:
    assert hy_smi(sim_node, "-mig", "1").returncode == 0
    _ignored, uuid = carve(sim_node, "2g.15gb", 0)
    env = sim_node.env({"PATH": os.environ.get("PATH", "")})
    env.update(
        {
            "HYDMI_PROBE_DEV": str(sim_node.root / "dev"),
            "HYDMI_PROBE_REGISTRY": str(sim_node.registry_dir),
            "HYDMI_PROBE_HYHAL": str(sim_node.root / "opt" / "hyhal"),
            "DMI_MIG_VISIBLE_DEVICE": f"MIG-{uuid}",
        }
    )
    shown = subprocess.run(
        [str(simnode.PROBE_PATH)], capture_output=True, text=True, env=env, check=False, timeout=60
    )
    assert [d[5] for d in devices(shown.stdout)] == [uuid]
    env["HYDMI_PROBE_REGISTRY"] = str(sim_node.root / "elsewhere")
    hidden = subprocess.run(
        [str(simnode.PROBE_PATH)], capture_output=True, text=True, env=env, check=False, timeout=60
    )
    assert hidden.stdout == NONE


# ------------------------------------------------------------------ minirun (root) ----------
def allocate_response(
    node: simnode.SimNode,
    card: int,
    confs: list[Path],
    envs: dict[str, str],
    conf_at: str | None = None,
) -> dict[str, Any]:
    """What the device plugin answers for one partition (docs/dev/hardware.md's container needs)."""
    devices_ = [
        {"container_path": "/dev/kfd", "host_path": str(node.kfd), "permissions": "rwm"},
        {"container_path": "/dev/mkfd", "host_path": str(node.mkfd), "permissions": "rwm"},
        {
            "container_path": f"/dev/dri/card{card}",
            "host_path": str(node.card_node(card)),
            "permissions": "rw",
        },
        {
            "container_path": f"/dev/dri/renderD{128 + card}",
            "host_path": str(node.render_node(card)),
            "permissions": "rw",
        },
    ]
    mounts = [
        {
            "container_path": "/opt/hyhal",
            "host_path": str(node.root / "opt" / "hyhal"),
            "read_only": True,
        }
    ]
    for conf in confs:
        inside = conf_at or "/" + str(conf.relative_to(node.root))
        mounts.append({"container_path": inside, "host_path": str(conf), "read_only": True})
    return {"envs": envs, "mounts": mounts, "devices": devices_}


def minirun(
    node: simnode.SimNode,
    spec: dict[str, Any],
    tmp_path: Path,
    *command: str,
    stdin: int | None = None,
) -> subprocess.CompletedProcess[str]:
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(json.dumps(spec))
    return subprocess.run(
        [str(simnode.MINIRUN_PATH), str(spec_path), *command],
        capture_output=True,
        text=True,
        env=node.env(),
        check=False,
        timeout=60,
        stdin=stdin,
    )


@needs_root
def test_allocate_response_shows_exactly_one_partition(
    sim_node: simnode.SimNode, tmp_path: Path
) -> None:
    assert hy_smi(sim_node, "-mig", "1").returncode == 0
    conf, uuid = carve(sim_node, "2g.15gb", 1)
    spec = allocate_response(sim_node, 1, [conf], {"DMI_MIG_VISIBLE_DEVICE": f"MIG-{uuid}"})
    result = minirun(sim_node, spec, tmp_path, "dcu-probe")
    assert result.returncode == 0, result.stderr
    assert devices(result.stdout) == [
        ("0", "partition", "0000:0c:00.0", "20", "16380", uuid, "3", "0")
    ]


@needs_root
def test_conf_bound_elsewhere_is_not_found(sim_node: simnode.SimNode, tmp_path: Path) -> None:
    assert hy_smi(sim_node, "-mig", "1").returncode == 0
    conf, uuid = carve(sim_node, "2g.15gb", 0)
    spec = allocate_response(
        sim_node,
        0,
        [conf],
        {"DMI_MIG_VISIBLE_DEVICE": f"MIG-{uuid}"},
        conf_at=f"/etc/mig/{conf.name}",
    )
    assert minirun(sim_node, spec, tmp_path, "dcu-probe").stdout == NONE


@needs_root
def test_device_nodes_without_registry_file_show_nothing(
    sim_node: simnode.SimNode, tmp_path: Path
) -> None:
    assert hy_smi(sim_node, "-mig", "1").returncode == 0
    _ignored, uuid = carve(sim_node, "2g.15gb", 0)
    spec = allocate_response(sim_node, 0, [], {"DMI_MIG_VISIBLE_DEVICE": f"MIG-{uuid}"})
    assert minirun(sim_node, spec, tmp_path, "dcu-probe").stdout == NONE


@needs_root
def test_two_partitions_given_one_seen(sim_node: simnode.SimNode, tmp_path: Path) -> None:
    assert hy_smi(sim_node, "-mig", "1").returncode == 0
    conf_a, a = carve(sim_node, "2g.15gb", 0)
    conf_b, b = carve(sim_node, "4g.31gb", 0)
    spec = allocate_response(
        sim_node, 0, [conf_a, conf_b], {"DMI_MIG_VISIBLE_DEVICE": f"MIG-{a},MIG-{b}"}
    )
    assert len(devices(minirun(sim_node, spec, tmp_path, "dcu-probe").stdout)) == 1


@needs_root
def test_mode_off_whole_card_through_minirun(sim_node: simnode.SimNode, tmp_path: Path) -> None:
    spec = allocate_response(sim_node, 1, [], {})
    assert devices(minirun(sim_node, spec, tmp_path, "dcu-probe").stdout) == [
        ("0", "card", "0000:0c:00.0", "80", "65520", None, None, None)
    ]


@needs_root
def test_conf_is_read_only_inside(sim_node: simnode.SimNode, tmp_path: Path) -> None:
    assert hy_smi(sim_node, "-mig", "1").returncode == 0
    conf, uuid = carve(sim_node, "2g.15gb", 0)
    spec = allocate_response(sim_node, 0, [conf], {})
    inside = "/" + str(conf.relative_to(sim_node.root))
    result = minirun(sim_node, spec, tmp_path, "sh", "-c", f"echo x >> {inside}")
    assert result.returncode != 0 and "Read-only" in result.stderr
    assert conf.read_text().endswith(f"{uuid}\n")


@needs_root
def test_missing_bind_source_becomes_a_poison_directory(
    sim_node: simnode.SimNode, tmp_path: Path
) -> None:
    assert hy_smi(sim_node, "-mig", "1").returncode == 0
    gone = sim_node.ci_conf(0, 3)
    spec = allocate_response(sim_node, 0, [gone], {})
    minirun(sim_node, spec, tmp_path, "true")
    assert gone.is_dir()
    failed = hy_smi(sim_node, "mig", "-cgi", "2g.15gb", "-C", "-i", "0")
    assert failed.returncode != 0 and "Insufficient Resources" in failed.stdout


@needs_root
def test_plain_file_is_refused_as_a_device(sim_node: simnode.SimNode, tmp_path: Path) -> None:
    plain = tmp_path / "not-a-device"
    plain.write_text("")
    spec = allocate_response(sim_node, 0, [], {})
    spec["devices"].append(
        {"container_path": "/dev/fake", "host_path": str(plain), "permissions": "rw"}
    )
    result = minirun(sim_node, spec, tmp_path, "true")
    assert result.returncode == 125 and "not a character device" in result.stderr


@needs_root
def test_workload_in_a_container_blocks_destroy_and_mode_switch(
    sim_node: simnode.SimNode, tmp_path: Path, kfd_holder: Callable[..., object]
) -> None:
    assert hy_smi(sim_node, "-mig", "1").returncode == 0
    conf, uuid = carve(sim_node, "2g.15gb", 0)
    spec = allocate_response(sim_node, 0, [conf], {"DMI_MIG_VISIBLE_DEVICE": f"MIG-{uuid}"})
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(json.dumps(spec))
    workload = subprocess.Popen(
        [str(simnode.MINIRUN_PATH), str(spec_path), "dcu-probe", "--hold"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=sim_node.env(),
    )
    try:
        assert workload.stdout is not None
        assert "kind=partition" in workload.stdout.readline()
        # Held from another mount namespace: the driver still sees the holder.
        busy = hy_smi(sim_node, "mig", "-dci", "-i", "0")
        assert busy.returncode != 0 and "In use" in busy.stdout
        switch = hy_smi(sim_node, "-mig", "0")
        assert switch.returncode != 0
    finally:
        workload.communicate(input="", timeout=60)
    assert hy_smi(sim_node, "mig", "-dci", "-i", "0").returncode == 0


@needs_root
def test_container_holding_kfd_blocks_the_mode_switch(
    sim_node: simnode.SimNode, tmp_path: Path
) -> None:
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(json.dumps(allocate_response(sim_node, 0, [], {})))
    workload = subprocess.Popen(
        [str(simnode.MINIRUN_PATH), str(spec_path), "dcu-probe", "--hold"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=sim_node.env(),
    )
    try:
        assert workload.stdout is not None
        assert "kind=card" in workload.stdout.readline()
        busy = hy_smi(sim_node, "-mig", "1")
        assert busy.stdout == (
            "Error: Set system level mig mode failed. The device is exist and may be in use.\n"
        )
    finally:
        workload.communicate(input="", timeout=60)
    assert hy_smi(sim_node, "-mig", "1").returncode == 0


@needs_root
def test_minirun_accepts_protobuf_json_names(sim_node: simnode.SimNode, tmp_path: Path) -> None:
    assert hy_smi(sim_node, "-mig", "1").returncode == 0
    conf, uuid = carve(sim_node, "2g.15gb", 0)
    snake = allocate_response(sim_node, 0, [conf], {"DMI_MIG_VISIBLE_DEVICE": f"MIG-{uuid}"})
    camel = {
        "envs": snake["envs"],
        "mounts": [
            {
                "containerPath": m["container_path"],
                "hostPath": m["host_path"],
                "readOnly": m["read_only"],
            }
            for m in snake["mounts"]
        ],
        "devices": [
            {
                "containerPath": d["container_path"],
                "hostPath": d["host_path"],
                "permissions": d["permissions"],
            }
            for d in snake["devices"]
        ],
    }
    shown = devices(minirun(sim_node, camel, tmp_path, "dcu-probe").stdout)
    assert [d[5] for d in shown] == [uuid]


# ------------------------------------------------------------------ virtual devices ---------
VDEV_LINE = re.compile(
    r"^device 0 kind=vdev pci=(\S+) cu_count=(\d+) memory_mib=(\d+) vdev_id=(\d+) card=(\d+)$"
)


def vcreate(
    node: simnode.SimNode, card: int, cus: str, mem: str
) -> subprocess.CompletedProcess[str]:
    return node.create_vdevs(card, cus, mem)


def make_vdevs(node: simnode.SimNode, card: int, cus: str, mem: str) -> None:
    result = vcreate(node, card, cus, mem)
    assert result.returncode == 0, result.stdout


def vdev_of(stdout: str) -> tuple[str, ...]:
    (line,) = stdout.splitlines()
    match = VDEV_LINE.match(line)
    assert match, f"unparseable probe line {line!r}"
    return match.groups()


def vdev_env(node: simnode.SimNode, container_etc_vdev: Path) -> dict[str, str]:
    """The host's device view, with ``container_etc_vdev`` as the probe's /etc/vdev."""
    env = node.env({"PATH": os.environ.get("PATH", "")})
    env["HYDMI_PROBE_VIEW"] = str(node.root)
    env["HYDMI_PROBE_VDEV"] = str(container_etc_vdev)
    return env


def probe_vdev(node: simnode.SimNode, container_etc_vdev: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(simnode.PROBE_PATH)],
        capture_output=True,
        text=True,
        env=vdev_env(node, container_etc_vdev),
        check=False,
        timeout=60,
    )


def given(container_etc_vdev: Path, name: str) -> Path:
    docker = container_etc_vdev / "docker"
    docker.mkdir(parents=True, exist_ok=True)
    return docker / name


def test_vdev_conf_shows_exactly_that_slice(sim_node: simnode.SimNode, tmp_path: Path) -> None:
    make_vdevs(sim_node, 1, "20,30", "16384,1000")
    inside = tmp_path / "etc-vdev"
    os.link(sim_node.vdev_conf(1), given(inside, "vdev1.conf"))  # what a bind mount gives
    result = probe_vdev(sim_node, inside)
    assert result.returncode == 0
    assert vdev_of(result.stdout) == ("0000:0c:00.0", "30", "1000", "1", "1")


def test_vdev_found_under_the_plain_view_too(sim_node: simnode.SimNode) -> None:
    make_vdevs(sim_node, 0, "8", "512")
    docker = sim_node.vdev_dir / "docker"
    docker.mkdir()
    (docker / "vdev0.conf").write_text(sim_node.vdev_conf(0).read_text())  # a faithful copy
    result = probe_view(sim_node)
    assert vdev_of(result.stdout) == ("0000:09:00.0", "8", "512", "0", "0")


def test_vdev_id_must_match_the_file_name(sim_node: simnode.SimNode, tmp_path: Path) -> None:
    make_vdevs(sim_node, 0, "10,10", "10,10")
    inside = tmp_path / "etc-vdev"
    given(inside, "vdev1.conf").write_text(sim_node.vdev_conf(0).read_text())
    result = probe_vdev(sim_node, inside)
    assert (result.returncode, result.stdout) == (1, NONE)


@pytest.mark.parametrize(
    "content",
    [
        None,  # the directory is there, no conf in it
        "",
        "garbage\n",
        "vdev_id: zero\n",
        "DIR",  # a directory on the conf's name (a runtime's missing bind source)
    ],
)
def test_missing_empty_or_unparseable_conf_shows_nothing(
    sim_node: simnode.SimNode, tmp_path: Path, content: str | None
) -> None:
    make_vdevs(sim_node, 0, "10", "10")
    inside = tmp_path / "etc-vdev"
    conf = given(inside, "vdev0.conf")
    if content == "DIR":
        conf.mkdir()
    elif content is not None:
        conf.write_text(content)
    result = probe_vdev(sim_node, inside)
    assert (result.returncode, result.stdout) == (1, NONE)


def test_modified_stray_or_dead_conf_shows_nothing(
    sim_node: simnode.SimNode, tmp_path: Path
) -> None:
    inside = tmp_path / "etc-vdev"
    # A crash half-way leaves a conf the driver never recorded.
    sim_node.fail_next("vdev_create_crash")
    assert vcreate(sim_node, 0, "10", "10").returncode == 1
    os.link(sim_node.vdev_conf(0), given(inside, "vdev0.conf"))
    assert probe_vdev(sim_node, inside).stdout == NONE
    # A live vdev whose conf text was changed.
    given(inside, "vdev0.conf").unlink()
    make_vdevs(sim_node, 0, "10", "10")
    given(inside, "vdev0.conf").write_text(sim_node.vdev_conf(0).read_text() + "\n")
    assert probe_vdev(sim_node, inside).stdout == NONE
    # A faithful copy of a conf whose vdev has been destroyed since.
    given(inside, "vdev0.conf").write_text(sim_node.vdev_conf(0).read_text())
    assert vdev_of(probe_vdev(sim_node, inside).stdout)[3] == "0"
    assert hy_smi(sim_node, "virtual", "-destroy-vdevice").returncode == 0
    assert probe_vdev(sim_node, inside).stdout == NONE


def test_vdev_needs_its_cards_device_nodes(sim_node: simnode.SimNode, tmp_path: Path) -> None:
    make_vdevs(sim_node, 1, "10", "10")
    inside = tmp_path / "etc-vdev"
    os.link(sim_node.vdev_conf(0), given(inside, "vdev0.conf"))
    sim_node.render_node(0).unlink()  # another card's node: irrelevant
    assert vdev_of(probe_vdev(sim_node, inside).stdout)[4] == "1"
    sim_node.render_node(1).unlink()
    assert probe_vdev(sim_node, inside).stdout == NONE


def test_vdev_on_an_unreachable_card_shows_nothing(
    sim_node: simnode.SimNode, tmp_path: Path
) -> None:
    make_vdevs(sim_node, 1, "10", "10")
    inside = tmp_path / "etc-vdev"
    os.link(sim_node.vdev_conf(0), given(inside, "vdev0.conf"))
    sim_node.make_unreachable(0)
    assert vdev_of(probe_vdev(sim_node, inside).stdout)[4] == "1"
    sim_node.make_unreachable(1)
    assert probe_vdev(sim_node, inside).stdout == NONE


def test_one_slice_per_process_lowest_id_first(sim_node: simnode.SimNode, tmp_path: Path) -> None:
    make_vdevs(sim_node, 0, "10,10,10", "10,10,10")
    inside = tmp_path / "etc-vdev"
    for vid in (2, 1):  # vdev2 and vdev1: sorted by number, not by name
        os.link(sim_node.vdev_conf(vid), given(inside, f"vdev{vid}.conf"))
    assert vdev_of(probe_vdev(sim_node, inside).stdout)[3] == "1"


def test_probe_holding_the_vdev_conf_blocks_destroy_and_update(
    sim_node: simnode.SimNode, tmp_path: Path
) -> None:
    make_vdevs(sim_node, 0, "10", "10")
    inside = tmp_path / "etc-vdev"
    os.link(sim_node.vdev_conf(0), given(inside, "vdev0.conf"))
    workload = subprocess.Popen(
        [str(simnode.PROBE_PATH), "--hold"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=vdev_env(sim_node, inside),
    )
    try:
        assert workload.stdout is not None
        assert "kind=vdev" in workload.stdout.readline()
        busy = hy_smi(sim_node, "virtual", "-d", "0", "-destroy-vdevice")
        assert busy.returncode == 1 and "Device busy" in busy.stdout
        assert [v.id for v in sim_node.status().vdevs] == [0]
    finally:
        workload.communicate(input="", timeout=60)
    assert hy_smi(sim_node, "virtual", "-d", "0", "-destroy-vdevice").returncode == 0


def vdev_allocate(node: simnode.SimNode, card: int, conf: Path, inside_name: str) -> dict[str, Any]:
    spec = allocate_response(node, card, [], {})
    spec["mounts"].append(
        {
            "container_path": f"/etc/vdev/docker/{inside_name}",
            "host_path": str(conf),
            "read_only": True,
        }
    )
    return spec


@needs_root
def test_vdev_container_sees_its_slice(sim_node: simnode.SimNode, tmp_path: Path) -> None:
    make_vdevs(sim_node, 1, "20,40", "100,200")
    spec = vdev_allocate(sim_node, 1, sim_node.vdev_conf(1), "vdev1.conf")
    result = minirun(sim_node, spec, tmp_path, "dcu-probe")
    assert result.returncode == 0, result.stderr
    assert vdev_of(result.stdout) == ("0000:0c:00.0", "40", "200", "1", "1")
    # Inside, /opt/hyhal/lib/libhydmi.so is a link into build/, which the container does not
    # see: the probe asks only that the name exists.
    lib = "/opt/hyhal/lib/libhydmi.so"
    dangling = minirun(sim_node, spec, tmp_path, "sh", "-c", f"test -L {lib} && ! test -e {lib}")
    assert dangling.returncode == 0


@needs_root
def test_vdev_conf_under_another_number_is_refused(
    sim_node: simnode.SimNode, tmp_path: Path
) -> None:
    make_vdevs(sim_node, 0, "20,40", "100,200")
    spec = vdev_allocate(sim_node, 0, sim_node.vdev_conf(0), "vdev1.conf")
    result = minirun(sim_node, spec, tmp_path, "dcu-probe")
    assert (result.returncode, result.stdout) == (1, NONE)


@needs_root
def test_vdev_container_holding_its_conf_blocks_destroy(
    sim_node: simnode.SimNode, tmp_path: Path
) -> None:
    make_vdevs(sim_node, 0, "20", "100")
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(
        json.dumps(vdev_allocate(sim_node, 0, sim_node.vdev_conf(0), "vdev0.conf"))
    )
    workload = subprocess.Popen(
        [str(simnode.MINIRUN_PATH), str(spec_path), "dcu-probe", "--hold"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=sim_node.env(),
    )
    try:
        assert workload.stdout is not None
        assert "kind=vdev" in workload.stdout.readline()
        # Held from another mount namespace, through a bind mount: same inode, still busy.
        busy = hy_smi(sim_node, "virtual", "-destroy-vdevice")
        assert busy.returncode == 1 and "Device busy" in busy.stdout
    finally:
        workload.communicate(input="", timeout=60)
    assert hy_smi(sim_node, "virtual", "-destroy-vdevice").returncode == 0


@needs_root
def test_missing_vdev_conf_source_shows_nothing_and_poisons_that_id(
    sim_node: simnode.SimNode, tmp_path: Path
) -> None:
    spec = vdev_allocate(sim_node, 0, sim_node.vdev_conf(0), "vdev0.conf")
    assert minirun(sim_node, spec, tmp_path, "dcu-probe").stdout == NONE
    assert sim_node.vdev_conf(0).is_dir()  # the runtime made the missing source a directory
    failed = vcreate(sim_node, 0, "1", "1")
    assert failed.returncode == 1 and "File error" in failed.stdout
