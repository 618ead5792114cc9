"""The driver's vdev conf file, read strictly: a conf a container would get must say exactly
what the library says of that vdev, or it is not given (docs/dev/hardware.md, "Logical slices")."""

from __future__ import annotations

import pytest
from ansible_collections.hygon.dcu.plugins.module_utils.vdevs import parse_vdev_conf

GOOD = (
    "PciBusId: 0000:3d:00.0\n"
    "cu_mask: 0x00000000000fffff\n"
    "cu_mask: 0x0000000000000000\n"
    "cu_count: 20\n"
    "mem: 16384 MiB\n"
    "device_id: 1\n"
    "vdev_id: 3\n"
    "pipe_id: 2\n"
    "enable: 1\n"
)


def test_a_driver_conf_reads_field_by_field() -> None:
    conf = parse_vdev_conf(GOOD)
    assert (conf.pci, conf.compute_units, conf.memory_mib) == ("0000:3d:00.0", 20, 16384)
    assert (conf.card, conf.vdev_id, conf.pipe_id, conf.enabled) == (1, 3, 2, True)
    assert conf.cu_mask == (1 << 20) - 1


def test_the_high_mask_word_holds_compute_units_64_and_up() -> None:
    text = GOOD.replace("cu_mask: 0x0000000000000000", "cu_mask: 0x0000000000000003").replace(
        "cu_count: 20", "cu_count: 22"
    )
    assert parse_vdev_conf(text).cu_mask == (1 << 20) - 1 | 3 << 64


@pytest.mark.parametrize(
    ("broken", "says"),
    [
        (GOOD.replace("enable: 1\n", ""), "8 lines, not 9"),
        (GOOD + "extra: 1\n", "10 lines, not 9"),
        (GOOD.replace("PciBusId", "PciBusID"), "line 1 is not 'PciBusId: ...'"),
        (GOOD.replace("vdev_id: 3", "pipe_id: 3"), "line 7 is not 'vdev_id: ...'"),
        (GOOD.replace("0000:3d:00.0", "3d:00.0"), "is not a PCI address"),
        (GOOD.replace("0x00000000000fffff", "0xfffff"), "two 16-digit hex words"),
        (GOOD.replace("cu_count: 20", "cu_count: 19"), "cu_mask holds 20 compute units"),
        (GOOD.replace("mem: 16384 MiB", "mem: 16384"), "is not '<n> MiB'"),
        (GOOD.replace("device_id: 1", "device_id: -1"), "device_id '-1' is not a number"),
        (GOOD.replace("vdev_id: 3", "vdev_id: \uff13"), "is not a number"),
        (GOOD.replace("enable: 1", "enable: yes"), "enable 'yes' is not 0 or 1"),
        (
            GOOD.replace("0x00000000000fffff", "0x0000000000000000").replace(
                "cu_count: 20", "cu_count: 0"
            ),
            "cu_mask holds 0 compute units",
        ),
    ],
)
def test_anything_but_the_drivers_shape_is_refused_with_why(broken: str, says: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_vdev_conf(broken)
    assert says in str(caught.value)
